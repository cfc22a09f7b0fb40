# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 9 — Knowledge distillation
#
# **Goal:** train a smaller, faster *student* from a fine-tuned *teacher*, and measure what it buys
# (inference speed and memory) and what it costs (accuracy, teacher forwards while training). We will:
#
# 1. fine-tune the teacher: the pretrained encoder on SST-2;
# 2. see what the temperature does to the teacher's soft targets, and why the loss has a `T²`;
# 3. cache the teacher's logits once instead of running it in every step — measured;
# 4. build a 3-layer student from every other layer of the fine-tuned teacher (DistilBERT took
#    every other layer of the pre-trained BERT) and one from scratch;
# 5. train students with distillation and on labels alone, over seeds: how much of the gap closes;
# 6. time the student's inference against the teacher's and count their memory.
#
# **Run time** (measured on a 2-core AMD EPYC VM, no GPU, with other jobs running): 317 s in `cpu`
# at load average 2.3-3.8 (a test suite and two other jobs beside it; the process got ~one core:
# expect less on a quiet machine; the teacher's fine-tuning alone takes ~100 s), 32 s in `smoke`
# at load 3.4.
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one), `smoke`
# (tests only: a 2-layer teacher, a 1-layer student, synthetic sentences; its numbers show the code
# runs, not what is true). The teacher is the packaged pretrained encoder (all-MiniLM-L6-v2, BERT
# 6 x 384, 22.7 M parameters; `effkit.workloads.bert.pretrained`). On a 2-core CPU we afford only
# short runs: few steps, sequences cut to 32 tokens, a 1,000-sentence training subset for the
# students — said again next to every accuracy. The quiz and the graded exercise are in
# `exercises/lesson9/`.

# %%
# %matplotlib inline
import math
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from effkit import lesson, lesson_setup
from effkit.distill import kd_loss, layer_map, student_from_teacher, teacher_logits
from effkit.measure import device_name

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
SIZES = {
    "smoke": dict(teacher_layers=2, student_layers=1, batch=8, seq=16, teacher_steps=6, steps=6, rows=64,
                  eval_rows=64, seeds=2, pairs=6, burst=1),
    "cpu": dict(teacher_layers=None, student_layers=3, batch=16, seq=32, teacher_steps=150, steps=60, rows=1000,
                eval_rows=872, seeds=2, pairs=6, burst=2),
    "gpu": dict(teacher_layers=None, student_layers=3, batch=32, seq=64, teacher_steps=600, steps=400, rows=8000,
                eval_rows=872, seeds=3, pairs=8, burst=5),
}[PROFILE]
LR, TEMPERATURE, ALPHA = 5e-5, 4.0, 0.9
lesson_setup.quiet_transformers()  # the classifier head is new by design: no load report
ENCODER = lesson_setup.pretrained_encoder()  # a teacher that never learned language has nothing to teach
print(f"profile {PROFILE!r} on {DEVICE_NAME}; encoder: {ENCODER.note}")

tokenizer = AutoTokenizer.from_pretrained(ENCODER.source)
train, held_out = lesson_setup.sst2_splits(PROFILE)  # held_out: GLUE SST-2 dev (872 rows) in cpu/gpu


def encode(texts, labels):
    enc = tokenizer(list(texts), padding="max_length", truncation=True, max_length=SIZES["seq"], return_tensors="pt")
    return {k: v.to(DEVICE) for k, v in enc.items()}, torch.tensor(list(labels), device=DEVICE)


def evaluate(model, rows=SIZES["eval_rows"]):
    """Held-out accuracy and its binomial 95% half-width."""
    model.eval()
    rows, correct = min(rows, len(held_out.texts)), 0
    with torch.no_grad():
        for start in range(0, rows, 64):
            enc, y = encode(held_out.texts[start:min(start + 64, rows)], held_out.labels[start:min(start + 64, rows)])
            correct += int((model(**enc).logits.argmax(-1) == y).sum())
    acc = correct / rows
    return acc, 1.96 * math.sqrt(acc * (1 - acc) / rows)


# %% [markdown]
# ## 1. The teacher
#
# The teacher is the pretrained encoder with a fresh 2-way head, fine-tuned on SST-2 (full
# fine-tuning, AdamW, LR 5e-5). A short fine-tuning on this CPU; its accuracy is printed with the
# step count.

# %%
teacher, teacher_seconds = lesson_setup.fine_tune(
    ENCODER.source, train, encode, steps=SIZES["teacher_steps"], batch=SIZES["batch"], lr=LR,
    device=DEVICE, layers=SIZES["teacher_layers"], desc="fine-tuning the teacher")
teacher_acc, teacher_err = evaluate(teacher)
teacher.requires_grad_(False).eval()
print(f"teacher: {teacher.config.num_hidden_layers} layers, accuracy {teacher_acc:.1%} ± {teacher_err:.1%} on the"
      f" held-out rows after {SIZES['teacher_steps']} steps of {SIZES['batch']} ({teacher_seconds:.0f} s)")

# %% [markdown]
# ## 2. Soft targets and the temperature
#
# A trained classifier's softmax is nearly one-hot: it hides *how* wrong the other classes are.
# Hinton et al. (2015) divide the logits by a temperature `T > 1` before the softmax, which spreads
# the probability over the classes — the teacher's "dark knowledge" — and train the student to
# match that distribution (KL divergence), mixed with the usual cross-entropy on the labels:
#
# `loss = alpha · T² · KL(softmax(z_t / T) || softmax(z_s / T)) + (1 - alpha) · CE(z_s, y)`
#
# The gradient of the soft term with respect to the student's logits is `(p_s - p_t) / T`, and
# `p_s - p_t` itself shrinks about as `1/T` for large `T`: so without `T²` the soft term fades
# as `T` grows. `effkit.distill.kd_loss` is this loss.
#
# On SST-2 there are only two classes, so a soft target is one number, the teacher's confidence
# that a sentence is positive: the part of dark knowledge that says which *wrong* classes are close
# (a "7" that looks like a "1") has nothing to say here. What the student can still learn from the
# teacher is how sure it is, sentence by sentence; with many classes, soft targets carry more.

# %%
fig, ax = plt.subplots(figsize=(9, 2.8))
boxes = {"inputs": (0.2, 1.0), "teacher\n(6 layers, frozen)": (2.4, 1.8), "student\n(3 layers)": (2.4, 0.2),
         "softmax(z_t / T)": (5.0, 1.8), "softmax(z_s / T)\nand z_s": (5.0, 0.2),
         "alpha T² KL + (1 - alpha) CE": (7.6, 1.0)}
for text, (x, y) in boxes.items():
    ax.add_patch(FancyBboxPatch((x, y), 2.0, 0.7, boxstyle="round,pad=0.05", color="tab:blue", alpha=0.25))
    ax.text(x + 1.0, y + 0.35, text, ha="center", va="center", fontsize=9)
for (x0, y0), (x1, y1) in (((2.2, 1.35), (2.4, 2.1)), ((2.2, 1.35), (2.4, 0.5)), ((4.4, 2.15), (5.0, 2.15)),
                           ((4.4, 0.55), (5.0, 0.55)), ((7.0, 2.1), (7.6, 1.5)), ((7.0, 0.6), (7.6, 1.2))):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="->", mutation_scale=12))
ax.text(5.0, 2.75, "cached once (no augmentation)", fontsize=8, color="tab:red")
ax.text(7.6, 0.0, "labels y", fontsize=8)
ax.set(xlim=(0, 9.8), ylim=(-0.2, 3.0), title="Distillation: the student learns from the teacher's softened outputs")
ax.axis("off")
plt.show()

# %% [markdown]
# **Predict.** For SST-2 sentences the fine-tuned teacher is usually confident. At `T = 4`, what
# will the teacher's average probability of its *less likely* class be, in percent? (The cell below
# prints it at `T = 1` too.)

# %%
GUESS_MINORITY_PERCENT_AT_T4 = None  # your guess, e.g. 20.0

# %%
probe_enc, _ = encode(held_out.texts[:64], held_out.labels[:64])
probe_logits = teacher_logits(teacher, probe_enc)
minority = {t: float(F.softmax(probe_logits / t, -1).min(-1).values.mean()) for t in (1, 2, 4, 8)}
print("teacher's mean probability of its less likely class: " +
      ", ".join(f"T={t}: {p:.1%}" for t, p in minority.items()))
lesson.check_guess(GUESS_MINORITY_PERCENT_AT_T4, 100 * minority[4], "percent on the less likely class at T=4", "{:.1f}")
student_logits = torch.zeros_like(probe_logits, requires_grad=True)
labels = probe_logits.argmax(-1)
grads = {}
for t in (1, 2, 4, 8):
    for name, loss_fn in (("with T²", lambda s, t=t: kd_loss(s, probe_logits, labels, t, alpha=1.0)),
                          ("without T²", lambda s, t=t: kd_loss(s, probe_logits, labels, t, alpha=1.0) / t**2)):
        (g,) = torch.autograd.grad(loss_fn(student_logits), student_logits)
        grads.setdefault(name, []).append(float(g.norm()))
print("gradient norm of the soft term at T = 1, 2, 4, 8: " +
      "; ".join(f"{k}: " + ", ".join(f"{v:.3f}" for v in vals) for k, vals in grads.items()))

# %% [markdown]
# ## 3. Cache the teacher's logits: the efficiency step
#
# The teacher is frozen and SST-2 sentences are not augmented, so its logits for a training row
# never change: compute them **once** and store 2 numbers per row, instead of a teacher forward in
# every step. (With random augmentation or dropout-noised inputs, they do change: then the teacher
# must run each step.)
#
# **Predict.** How many times faster is a distillation step with cached logits than one that runs
# the teacher?

# %%
GUESS_CACHE_SPEEDUP = None  # your guess, e.g. 1.5

# %%
subset = list(range(min(SIZES["rows"], len(train.texts))))
sub_texts, sub_labels = [train.texts[i] for i in subset], [train.labels[i] for i in subset]
start = time.perf_counter()
cached = torch.cat([teacher_logits(teacher, encode(sub_texts[i:i + 64], sub_labels[i:i + 64])[0])
                    for i in tqdm(range(0, len(subset), 64), desc="caching teacher logits")])
cache_seconds = time.perf_counter() - start
print(f"teacher logits for {len(subset):,} rows cached in {cache_seconds:.1f} s: {cached.numel() * 4 / 1024:.0f} KiB")


def make_student(seed, init):
    """A student of SIZES['student_layers'] layers: every other teacher layer, or fresh weights."""
    torch.manual_seed(seed)
    if init == "teacher":
        return student_from_teacher(teacher, SIZES["student_layers"]).to(DEVICE)
    config = AutoConfig.from_pretrained(ENCODER.source, num_labels=2, num_hidden_layers=SIZES["student_layers"])
    return AutoModelForSequenceClassification.from_config(config).to(DEVICE)


def trainer(model, seed, alpha=ALPHA, use_cache=True):
    """A function running `burst` distillation steps on the subset; returns the samples it saw."""
    opt, gen = torch.optim.AdamW(model.parameters(), lr=LR), torch.Generator().manual_seed(seed)
    model.train()

    def run(steps=SIZES["burst"]):
        for _ in range(steps):
            rows = torch.randint(0, len(subset), (SIZES["batch"],), generator=gen)
            enc, y = encode([sub_texts[i] for i in rows], [sub_labels[i] for i in rows])
            soft = cached[rows] if use_cache else teacher_logits(teacher, enc)
            kd_loss(model(**enc).logits, soft, y, TEMPERATURE, alpha).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return steps * SIZES["batch"]
    return run


cache_ab = lesson.ab("distillation step: teacher run every step vs cached logits",
                     trainer(make_student(0, "teacher"), 0, use_cache=False), trainer(make_student(0, "teacher"), 0),
                     pairs=SIZES["pairs"], a_label="teacher every step", b_label="cached logits", dev=DEVICE)
lesson.check_guess(GUESS_CACHE_SPEEDUP, cache_ab.ratio, "cached step speed / teacher-every-step's", "{:.2f}x")
cache_line = {"faster": f"caching the teacher's logits makes each step faster ({cache_ab.ratio:.2f}x) for a one-off"
                        f" {cache_seconds:.0f} s",
              "slower": "the cached step measured slower, which the arithmetic cannot explain: re-run",
              "no clear difference": "no step-time difference this measurement can resolve"}[cache_ab.verdict.word]
print(cache_line)

# %% [markdown]
# ## 4. and 5. Students: from the teacher's layers or from scratch, distilled or on labels alone
#
# DistilBERT (Sanh et al. 2019) initialised its 6-layer student from every other layer of the
# *pre-trained* 12-layer BERT: the student starts with weights that already compute useful features.
# `effkit.distill.student_from_teacher` keeps every other layer the same way for any BERT-style model
# (`layer_map` picks the layers: here `layer_map(6, 3) == [0, 2, 4]`), but copies them from the
# *fine-tuned* teacher here, classifier head included. So every "from the teacher" student, even one
# trained on labels alone, starts with some of the teacher's SST-2 knowledge: distilled against
# labels alone compares like with like, while "from the teacher" against "from scratch" mixes
# pre-training with task fine-tuning. The alternative is the same architecture with fresh weights. Each student trains the same steps on the same subset (the sample budget), with the
# distillation loss (`T = 4`, `alpha = 0.9`) or on labels alone (`alpha = 0`).

# %%
print(f"student layers kept from the teacher: {layer_map(teacher.config.num_hidden_layers, SIZES['student_layers'])}")
runs = {}
plan = [(seed, init, alpha) for seed in range(SIZES["seeds"]) for init, alpha in
        (("teacher", ALPHA), ("teacher", 0.0))] + [(0, "scratch", ALPHA), (0, "scratch", 0.0)]
for seed, init, alpha in tqdm(plan, desc="training students"):
    model = make_student(seed + 1, init)
    trainer(model, seed + 1, alpha=alpha)(SIZES["steps"])
    runs[(seed, init, alpha)] = (model, *evaluate(model))
    kind = "distilled" if alpha else "labels alone"
    print(f"seed {seed}, from {init:7}, {kind:12}: accuracy {runs[(seed, init, alpha)][1]:.1%}"
          f" ± {runs[(seed, init, alpha)][2]:.1%}")


def gap_line(init, seeds):
    """Distilled minus labels-alone accuracy, over seeds, with the binomial half-width of a difference.

    Every seed is scored on the same held-out rows, so the rows' sampling error is shared by all
    seeds: averaging seeds does not shrink it (no division by sqrt(seeds))."""
    diffs = [runs[(s, init, ALPHA)][1] - runs[(s, init, 0.0)][1] for s in seeds]
    err = max(math.hypot(runs[(s, init, ALPHA)][2], runs[(s, init, 0.0)][2]) for s in seeds)
    mean = sum(diffs) / len(diffs)
    labels_only = sum(runs[(s, init, 0.0)][1] for s in seeds) / len(seeds)
    gap = teacher_acc - labels_only
    closed = f"; {mean / gap:.0%} of the {gap:.1%} gap to the teacher" if gap > err and mean > err else ""
    verdict = "no difference this evaluation can resolve" if abs(mean) <= err else (
        f"distillation {'ahead' if mean > 0 else 'behind'} by {abs(mean):.1%}{closed}")
    return (f"from {init}, over {len(seeds)} seed(s): {verdict} (per seed {', '.join(f'{d:+.1%}' for d in diffs)};"
            f" ± {err:.1%} binomial)")


kd_lines = [gap_line("teacher", range(SIZES["seeds"])), gap_line("scratch", [0])]
print("\n".join(kd_lines))

# %%
fig, ax = plt.subplots(figsize=(7, 3))
names = ["teacher"] + [f"{init}, {'KD' if a else 'labels'}" for init in ("teacher", "scratch") for a in (ALPHA, 0.0)]
accs = [teacher_acc] + [sum(r[1] for k, r in runs.items() if k[1:] == (init, a)) /
                        sum(1 for k in runs if k[1:] == (init, a)) for init in ("teacher", "scratch") for a in (ALPHA, 0.0)]
ax.barh(names, accs, color=["tab:gray", "tab:green", "tab:olive", "tab:blue", "tab:cyan"])
ax.set(xlabel="held-out accuracy (mean over seeds)", xlim=(0.4, 1.0),
       title=f"Students ({SIZES['student_layers']} layers, {SIZES['steps']} steps) — {DEVICE_NAME}")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 6. What the student buys: inference speed and memory
#
# Half the layers should mean about half the encoder's compute per token (the embeddings and the
# head are kept). Timed interleaved on the same held-out batch, under `torch.no_grad`.

# %%
best_student = runs[(0, "teacher", ALPHA)][0].eval()


def infer(model):  # a burst of SIZES["burst"] forward passes on probe_enc, under no_grad
    return lesson.inference_burst(model, probe_enc, SIZES["burst"])


infer_ab = lesson.ab("inference: teacher vs student", infer(teacher), infer(best_student), pairs=SIZES["pairs"],
                     a_label="teacher", b_label="student", dev=DEVICE)


def weight_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


memory_line = (f"weights: teacher {weight_bytes(teacher) / 2**20:.0f} MiB, student {weight_bytes(best_student) / 2**20:.0f}"
               f" MiB ({weight_bytes(best_student) / weight_bytes(teacher):.0%}; the word embeddings, 30,522 x 384,"
               " are kept whole)")
print(memory_line)

# %% [markdown]
# ## Your turn
#
# Write the soft term yourself, without `kd_loss`: the KL divergence between the teacher's and the
# student's distributions at temperature `T`, averaged per sample, times `T²`. Check it against
# `kd_loss(..., alpha=1.0)` on the trained student's logits for a few temperatures. Then try it
# *without* `T²` and with the KL's arguments reversed: by how much does each differ?

# %%
def my_soft_term(student_logits, teacher_logits, temperature):
    log_p_student = F.log_softmax(student_logits / temperature, dim=-1)
    p_teacher = F.softmax(teacher_logits / temperature, dim=-1)
    kl_per_sample = (p_teacher * (p_teacher.clamp_min(1e-12).log() - log_p_student)).sum(-1)
    return temperature**2 * kl_per_sample.mean()  # your turn: drop the T², or swap the two distributions


with torch.no_grad():
    student_probe = best_student(**probe_enc).logits
for t in (1.0, 2.0, 4.0):
    mine_value = float(my_soft_term(student_probe, probe_logits, t))
    reference = float(kd_loss(student_probe, probe_logits, labels, t, alpha=1.0))
    print(f"T = {t}: yours {mine_value:.5f}, kd_loss {reference:.5f}, relative difference"
          f" {abs(mine_value - reference) / max(reference, 1e-12):.1e}")

# %% [markdown]
# ### In your own words
#
# Sections 3–5 cached the teacher's logits and trained students with distillation and on labels
# alone. Explain in 2–3 sentences what a student learns from the teacher's temperature-softened
# outputs that one-hot labels do not give it, and why the teacher's logits could be computed once
# instead of in every step.
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=9)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(9, DEVICE_NAME, f"; encoder: {ENCODER.note}"))
print(f"* teacher: {teacher.config.num_hidden_layers} layers, {teacher_acc:.1%} ± {teacher_err:.1%} after"
      f" {SIZES['teacher_steps']} steps of {SIZES['batch']} ({SIZES['seq']} tokens)")
print(f"* soft targets: the less likely class gets {minority[1]:.1%} at T=1, {minority[4]:.1%} at T=4")
print(f"* caching the teacher's logits: {cache_ab.verdict}")
print(f"* so: {cache_line}")
print(f"* students ({SIZES['student_layers']} layers, {SIZES['steps']} steps of {SIZES['batch']} on"
      f" {len(subset):,} rows): " + "; ".join(kd_lines))
print(f"* inference: {infer_ab.verdict}")
print(f"* memory: {memory_line}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson9/`: write the distillation loss
# (checked on the grader's own logits, values and gradients), and write the function that chooses
# a distillation recipe for the constraints the grader draws for each grading (a teacher whose
# layers may be copied, or a black box that gives its logits only): it trains your choice itself on
# its own teacher and student — outside your notebook.
#
# ### References
#
# * G. Hinton, O. Vinyals, J. Dean, *Distilling the Knowledge in a Neural Network*, 2015,
#   [arXiv:1503.02531](https://arxiv.org/abs/1503.02531).
# * V. Sanh, L. Debut, J. Chaumond, T. Wolf, *DistilBERT, a distilled version of BERT*, 2019,
#   [arXiv:1910.01108](https://arxiv.org/abs/1910.01108).
# * PyTorch, [`torch.nn.functional.kl_div`](https://pytorch.org/docs/stable/generated/torch.nn.functional.kl_div.html)
#   (`reduction="batchmean"`, `log_target`).
# * N. Reimers, I. Gurevych, *Sentence-BERT*, 2019, [arXiv:1908.10084](https://arxiv.org/abs/1908.10084)
#   (all-MiniLM-L6-v2's training); R. Socher et al., SST, 2013.
#
# ### What to try next
#
# * On a GPU (`gpu` profile: longer runs, more seeds), or with `bert-base-uncased` as the teacher
#   where its weights exist: a bigger teacher has more to teach.
# * Distil on unlabelled sentences as well (the teacher labels them): the soft term needs no labels.
