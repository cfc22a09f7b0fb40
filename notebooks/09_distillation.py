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
# 3. cache the teacher's logits (and hidden states) once instead of running it in every step — measured;
# 4. build a 3-layer student from every other layer of the fine-tuned teacher (DistilBERT took
#    every other layer of the pre-trained BERT);
# 5. train it three ways from the same start on the same batches — on labels alone, with logit
#    distillation, and with logit plus hidden-state distillation (DistilBERT's cosine loss) — over
#    paired seeds, and say only what the interval of the paired differences supports;
# 6. time the student's inference against the teacher's and count their memory.
#
# **Run time**: about 5 min in `cpu` (285 s recorded on a quiet 2-core Intel Xeon VM with AMX, no GPU, 2026-12-06: the outputs in `docs/recorded/`; one thread,
# `OMP_NUM_THREADS=1`: the teacher's fine-tuning takes about 1 min of it, the student runs most of
# the rest; 239 s on 2026-11-28), 11-17 s in `smoke` at load 1.4-2.1.
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
import statistics
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from effkit import lesson, lesson_setup
from effkit.abtest import median_ci, median_ci_coverage
from effkit.distill import kd_loss, layer_map, student_from_teacher, teacher_logits
from effkit.distill_hidden import hidden_cosine_loss, teacher_outputs
from effkit.measure import device_name

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
SIZES = {
    "smoke": dict(teacher_layers=2, student_layers=1, batch=8, seq=16, teacher_steps=6, steps=6, rows=64,
                  eval_rows=64, seeds=3, pairs=6, burst=1),
    "cpu": dict(teacher_layers=None, student_layers=3, batch=16, seq=32, teacher_steps=150, steps=50, rows=1000,
                eval_rows=872, seeds=6, pairs=6, burst=2),
    "gpu": dict(teacher_layers=None, student_layers=3, batch=32, seq=64, teacher_steps=600, steps=400, rows=8000,
                eval_rows=872, seeds=9, pairs=8, burst=5),
}[PROFILE]
LR, TEMPERATURE, ALPHA = 5e-5, 4.0, 0.9
HIDDEN_WEIGHT = 1.0  # weight of the hidden-state cosine term (DistilBERT's alpha_cos = 1); not tuned
lesson_setup.quiet_transformers()  # the classifier head is new by design: no load report
ENCODER = lesson_setup.pretrained_encoder()  # a teacher that never learned language has nothing to teach
print(f"profile {PROFILE!r} on {DEVICE_NAME}; encoder: {ENCODER.note}")

tokenizer = AutoTokenizer.from_pretrained(ENCODER.source)
train, held_out = lesson_setup.sst2_splits(PROFILE)  # held_out: GLUE SST-2 dev (872 rows) in cpu/gpu


def encode(texts, labels):
    enc = tokenizer(list(texts), padding="max_length", truncation=True, max_length=SIZES["seq"], return_tensors="pt")
    return {k: v.to(DEVICE) for k, v in enc.items()}, torch.tensor(list(labels), device=DEVICE)


def trim(enc):
    """A batch padded to SIZES['seq'] cut to its longest sentence (lesson 7): padding is masked out,
    so only the time changes."""
    keep = int(enc["attention_mask"].sum(1).max())
    return {k: v[:, :keep] for k, v in enc.items()}


EVAL_ROWS = min(SIZES["eval_rows"], len(held_out.texts))
held_enc, held_y = encode(held_out.texts[:EVAL_ROWS], held_out.labels[:EVAL_ROWS])  # tokenised once
held_by_length = held_enc["attention_mask"].sum(1).argsort()  # similar lengths together: less padding


def evaluate(model):
    """Held-out accuracy and its binomial 95% half-width."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for chunk in held_by_length.split(64):
            enc = trim({k: v[chunk] for k, v in held_enc.items()})
            correct += int((model(**enc).logits.argmax(-1) == held_y[chunk]).sum())
    acc = correct / EVAL_ROWS
    return acc, 1.96 * math.sqrt(acc * (1 - acc) / EVAL_ROWS)


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
# must run each step.) The same pass also keeps the teacher's last hidden states for section 5:
# `effkit.distill_hidden.teacher_outputs` returns both from one forward.
#
# **Predict.** How many times faster is a distillation step with cached logits than one that runs
# the teacher?

# %%
GUESS_CACHE_SPEEDUP = None  # your guess, e.g. 1.5

# %%
subset = list(range(min(SIZES["rows"], len(train.texts))))
sub_texts, sub_labels = [train.texts[i] for i in subset], [train.labels[i] for i in subset]
sub_enc, sub_y = encode(sub_texts, sub_labels)  # tokenised once, padded to SIZES["seq"]
width = teacher.config.hidden_size
cached = torch.zeros(len(subset), 2, device=DEVICE)
cached_hidden = torch.zeros(len(subset), SIZES["seq"], width, device=DEVICE)  # padding stays 0: masked out
start = time.perf_counter()
for chunk in tqdm(sub_enc["attention_mask"].sum(1).argsort().split(64), desc="caching the teacher's outputs"):
    logits, hidden = teacher_outputs(teacher, trim({k: v[chunk] for k, v in sub_enc.items()}))
    cached[chunk], cached_hidden[chunk, :hidden.shape[1]] = logits, hidden
cache_seconds = time.perf_counter() - start
print(f"teacher outputs for {len(subset):,} rows cached in {cache_seconds:.1f} s: logits {cached.numel() * 4 / 1024:.0f}"
      f" KiB, last hidden states ({SIZES['seq']} tokens x {width}) {cached_hidden.numel() * 4 / 2**20:.1f} MiB")


def make_student(seed):
    """A student of SIZES['student_layers'] layers, every other teacher layer, its word embeddings frozen."""
    torch.manual_seed(seed)  # the dropout masks: the same seed draws the same masks in every arm
    student = student_from_teacher(teacher, SIZES["student_layers"]).to(DEVICE)
    student.get_input_embeddings().requires_grad_(False)  # see section 4
    return student


def trainer(model, seed, alpha=ALPHA, hidden_weight=0.0, use_cache=True):
    """A function running `burst` distillation steps on the subset; returns the samples it saw.

    The seed fixes the batches; hidden_weight > 0 adds the cosine loss on the last hidden states."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
    gen = torch.Generator().manual_seed(seed)
    model.train()

    def run(steps=SIZES["burst"]):
        for _ in range(steps):
            rows = torch.randint(0, len(subset), (SIZES["batch"],), generator=gen).to(DEVICE)
            enc, y = trim({k: v[rows] for k, v in sub_enc.items()}), sub_y[rows]
            soft = cached[rows] if use_cache else teacher_logits(teacher, enc)
            out = model(**enc, output_hidden_states=hidden_weight > 0)
            loss = kd_loss(out.logits, soft, y, TEMPERATURE, alpha)
            if hidden_weight > 0:
                target = cached_hidden[rows, :enc["input_ids"].shape[1]]
                loss = loss + hidden_weight * hidden_cosine_loss(out.hidden_states[-1], target, enc["attention_mask"])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return steps * SIZES["batch"]
    return run


cache_ab = lesson.ab("distillation step: teacher run every step vs cached logits",
                     trainer(make_student(0), 0, use_cache=False), trainer(make_student(0), 0),
                     pairs=SIZES["pairs"], a_label="teacher every step", b_label="cached logits", dev=DEVICE)
lesson.check_guess(GUESS_CACHE_SPEEDUP, cache_ab.ratio, "cached step speed / teacher-every-step's", "{:.2f}x")
cache_line = {"faster": f"caching the teacher's logits makes each step faster ({cache_ab.ratio:.2f}x) for a one-off"
                        f" {cache_seconds:.0f} s",
              "slower": "the cached step measured slower, which the arithmetic cannot explain: re-run",
              "no clear difference": "no step-time difference this measurement can resolve"}[cache_ab.verdict.word]
print(cache_line)

# %% [markdown]
# Logits cost 2 numbers a row; hidden states cost one vector per *token*. Here that is affordable
# (the printout above). With BERT-base (width 768) on all 67,349 SST-2 training sentences at 64
# tokens it would be 67,349 x 64 x 768 x 4 bytes = 13 GB in fp32: then store them in 16 bits, keep
# only the layers you distil, or run the teacher each step after all.
#
# **Predict.** How many MiB would the cached last hidden states take for 2,000 sentences at this
# profile's sequence length (32 tokens in `cpu`; width 384, fp32)? The cell below computes it from
# the cache it built.

# %%
GUESS_HIDDEN_CACHE_MIB_2000 = None  # your guess, e.g. 5.0

# %%
per_row_bytes = cached_hidden[0].numel() * cached_hidden.element_size()
lesson.check_guess(GUESS_HIDDEN_CACHE_MIB_2000, 2000 * per_row_bytes / 2**20,
                   f"MiB of last hidden states for 2,000 sentences at {SIZES['seq']} tokens", "{:.1f}")

# %% [markdown]
# ## 4. The student: every other layer of the teacher
#
# DistilBERT (Sanh et al. 2019) initialised its 6-layer student from every other layer of the
# *pre-trained* 12-layer BERT: the student starts with weights that already compute useful features.
# `effkit.distill.student_from_teacher` keeps every other layer the same way for any BERT-style model
# (`layer_map` picks the layers: here `layer_map(6, 3) == [0, 2, 4]`), but copies them from the
# *fine-tuned* teacher here, classifier head included. So every student, even one trained on labels
# alone, starts with some of the teacher's SST-2 knowledge, and all of them start from the same
# weights.
#
# The student's word-embedding table (30,522 x 384) stays frozen, in every arm alike. It is most of
# the student's parameters (printed below), 50 steps on 1,000 sentences touch few of its rows, and
# its gradient and AdamW update over the whole table were ~40% of a training step on a 2-core
# Xeon VM (0.32 s -> 0.18 s of CPU time per step with it frozen, one thread, measured while writing
# this lesson): that time goes to more seeds instead. DistilBERT trained its embeddings; so can you,
# with a bigger budget.

# %%
print(f"student layers kept from the teacher: {layer_map(teacher.config.num_hidden_layers, SIZES['student_layers'])}")
probe_student = make_student(0)
trained = sum(p.numel() for p in probe_student.parameters() if p.requires_grad)
print(f"student: {sum(p.numel() for p in probe_student.parameters()):,} parameters, {trained:,} trained"
      f" (the word embeddings, {probe_student.get_input_embeddings().weight.numel():,}, frozen)")
del probe_student

# %% [markdown]
# ## 5. Labels alone, logit distillation, hidden-state distillation: paired over seeds
#
# Three arms, each trained the same number of steps (in `cpu`, 50 steps of 16 sentences) on the same
# 1,000-sentence subset:
#
# * **labels alone**: cross-entropy on the labels (`alpha = 0`);
# * **logit KD**: Hinton's loss, `T = 4`, `alpha = 0.9` (section 2);
# * **logit + hidden KD**: the same, plus DistilBERT's cosine embedding loss between the student's
#   and the teacher's last hidden states, weight 1 (`effkit.distill_hidden.hidden_cosine_loss`):
#
#   `loss_hidden = mean over real tokens of 1 - cos(h_student, h_teacher)`.
#
#   A logit carries one number per sentence here; a hidden state carries 384 per *token*: how the
#   teacher represents each word in context. The cosine asks the student's vectors to point the
#   teacher's way and leaves their length free; padded tokens are left out. Student and teacher
#   are both 384 wide, so the states compare as they are; a narrower student would first map its
#   states with a learned matrix trained alongside it (`effkit.distill_hidden.width_projection`,
#   TinyBERT's `W_h`). Another route needs no projection at all: MiniLM (Wang et al. 2020), which
#   the packaged encoder descends from, transfers the teacher's last-layer self-attention
#   distributions and value relations (token-by-token matrices) instead of the states.
#
# **Paired seeds.** Every student starts from the same copied weights; seed *s* fixes its batches,
# their order and its dropout masks, the same in all three arms, so within a seed only the loss
# differs. The per-seed *difference* between two arms cancels the luck of the draw that both share,
# and the seeds' spread of that difference is the noise left. We report its median with the
# order-statistic interval of `effkit.abtest.median_ci` and that interval's real coverage
# (`median_ci_coverage`: 97% with 6 seeds, 75% with 3), and call an arm ahead or behind only when
# the whole interval is on one side of 0. All arms are scored on the same held-out sentences, so
# the interval says what training noise leaves standing *on these sentences*; it does not include
# their own sampling error (the binomial ± printed with each accuracy).

# %%
ARMS = {"labels alone": dict(alpha=0.0), "logit KD": dict(alpha=ALPHA),
        "logit + hidden KD": dict(alpha=ALPHA, hidden_weight=HIDDEN_WEIGHT)}
accuracy, row_error = {arm: [] for arm in ARMS}, 0.0
for seed in tqdm(range(SIZES["seeds"]), desc="training students (3 arms per seed)"):
    for arm, loss_settings in ARMS.items():
        model = make_student(seed + 1)
        trainer(model, seed + 1, **loss_settings)(SIZES["steps"])
        acc, err = evaluate(model)
        accuracy[arm].append(acc)
        row_error = max(row_error, err)
        if seed == 0 and arm == "logit KD":
            kd_student = model.eval()  # kept for section 6
    print(f"seed {seed + 1}: " + ", ".join(f"{arm} {accuracy[arm][-1]:.1%}" for arm in ARMS))
print(f"each accuracy ± up to {row_error:.1%} (binomial, {EVAL_ROWS} held-out rows): the sentences' own sampling"
      " error, the same rows for every arm")


def paired(arm, baseline):
    """arm minus baseline, seed by seed: the median difference, its interval and what it supports."""
    diffs = [a - b for a, b in zip(accuracy[arm], accuracy[baseline], strict=True)]
    middle, (low, high) = statistics.median(diffs), median_ci(diffs)
    coverage = median_ci_coverage(len(diffs))
    if low > 0:
        word = f"{arm} ahead of {baseline} on these sentences"
    elif high < 0:
        word = f"{arm} behind {baseline} on these sentences"
    else:
        word = f"{arm} vs {baseline} not resolved at this size (the interval includes 0)"
    smoke = f" [{lesson.SMOKE_NOTE}]" if PROFILE == "smoke" else ""
    line = (f"{word}: median difference {middle:+.1%}, interval {low:+.1%} to {high:+.1%} covering the median"
            f" {coverage:.0%} of the time over {len(diffs)} seeds (per seed {', '.join(f'{d:+.1%}' for d in diffs)})")
    return dict(median=middle, low=low, high=high, line=line + smoke)


comparisons = {("logit KD", "labels alone"): paired("logit KD", "labels alone"),
               ("logit + hidden KD", "labels alone"): paired("logit + hidden KD", "labels alone"),
               ("logit + hidden KD", "logit KD"): paired("logit + hidden KD", "logit KD")}
labels_median = statistics.median(accuracy["labels alone"])
gap = teacher_acc - labels_median
kd = comparisons[("logit KD", "labels alone")]
gap_line = (f"logit KD closed about {kd['median'] / gap:.0%} of the {gap:.1%} gap between the labels-alone student"
            " (median) and the teacher" if kd["low"] > 0 and gap > 0 else
            "no share of the student-teacher gap is claimed: logit KD's gain over labels alone is not resolved")
print("\n".join(c["line"] for c in comparisons.values()))
print(gap_line)

# %%
fig, ax = plt.subplots(figsize=(7.5, 3.4))
for i in range(SIZES["seeds"]):
    ax.plot(list(ARMS), [accuracy[arm][i] for arm in ARMS], marker="o", color="tab:blue", alpha=0.5)
ax.plot(list(ARMS), [statistics.median(accuracy[arm]) for arm in ARMS], marker="s", color="black", lw=2,
        label="median over seeds")
ax.axhline(teacher_acc, color="tab:gray", ls="--", label=f"teacher ({teacher.config.num_hidden_layers} layers)")
ax.set(ylabel="held-out accuracy", title=f"Students ({SIZES['student_layers']}-layer, {SIZES['steps']} steps),"
       f" one line per seed — {DEVICE_NAME}")
ax.legend(loc="lower right", fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 6. What the student buys: inference speed and memory
#
# Half the layers should mean about half the encoder's compute per token (the embeddings and the
# head are kept). Timed interleaved on the same held-out batch, under `torch.no_grad`.

# %%
def infer(model):  # a burst of SIZES["burst"] forward passes on probe_enc, under no_grad
    return lesson.inference_burst(model, probe_enc, SIZES["burst"])


infer_ab = lesson.ab("inference: teacher vs student", infer(teacher), infer(kd_student), pairs=SIZES["pairs"],
                     a_label="teacher", b_label="student", dev=DEVICE)


def weight_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


memory_line = (f"weights: teacher {weight_bytes(teacher) / 2**20:.0f} MiB, student {weight_bytes(kd_student) / 2**20:.0f}"
               f" MiB ({weight_bytes(kd_student) / weight_bytes(teacher):.0%}; the word embeddings, 30,522 x 384,"
               " are kept whole)")
print(memory_line)

# %% [markdown]
# ## Your turn
#
# Write the soft term yourself, without `kd_loss`: the KL divergence between the teacher's and the
# student's distributions at temperature `T`, averaged per sample, times `T²`. The cell starts from a
# first attempt with the two classic mistakes: the KL's arguments reversed (`F.kl_div` takes the
# *student's* log-probabilities first and the teacher's probabilities second) and no `T²`. Fix it
# until it matches `kd_loss(..., alpha=1.0)` on the trained student's logits at every temperature
# below (relative difference ~1e-6), then put each mistake back alone: by how much does each differ,
# and which one grows with `T`?

# %%
def my_soft_term(student_logits, teacher_logits, temperature):
    # your turn: a first attempt with two mistakes; fix both
    log_p_teacher = F.log_softmax(teacher_logits / temperature, dim=-1)
    p_student = F.softmax(student_logits / temperature, dim=-1)
    return F.kl_div(log_p_teacher, p_student, reduction="batchmean")


with torch.no_grad():
    student_probe = kd_student(**probe_enc).logits
for t in (1.0, 2.0, 4.0):
    mine_value = float(my_soft_term(student_probe, probe_logits, t))
    reference = float(kd_loss(student_probe, probe_logits, labels, t, alpha=1.0))
    print(f"T = {t}: yours {mine_value:.5f}, kd_loss {reference:.5f}, relative difference"
          f" {abs(mine_value - reference) / max(reference, 1e-12):.1e}")

# %% [markdown]
# ### In your own words
#
# Sections 3–5 cached the teacher's outputs and trained students with distillation and on labels
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
print(f"* students ({SIZES['student_layers']}-layer, {SIZES['steps']} steps of {SIZES['batch']} on"
      f" {len(subset):,} rows, {SIZES['seeds']} paired seeds, scored on {EVAL_ROWS} held-out rows):")
for comparison in comparisons.values():
    print(f"  - {comparison['line']}")
print(f"  - {gap_line}")
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
#   [arXiv:1910.01108](https://arxiv.org/abs/1910.01108) (the cosine embedding loss on hidden states:
#   section 2).
# * W. Wang, F. Wei, L. Dong, H. Bao, N. Yang, M. Zhou, *MiniLM: Deep Self-Attention Distillation
#   for Task-Agnostic Compression of Pre-Trained Transformers*, 2020,
#   [arXiv:2002.10957](https://arxiv.org/abs/2002.10957).
# * X. Jiao et al., *TinyBERT: Distilling BERT for Natural Language Understanding*, 2020,
#   [arXiv:1909.10351](https://arxiv.org/abs/1909.10351) (the projection `W_h` for narrower students).
# * S. Sun, Y. Cheng, Z. Gan, J. Liu, *Patient Knowledge Distillation for BERT Model Compression*,
#   2019, [arXiv:1908.09355](https://arxiv.org/abs/1908.09355) (distilling intermediate layers too).
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
# * Distil the intermediate layers too (PKD): student layer `j`'s output against teacher layer
#   `2j`'s, the cosine loss summed over the pairs; or MiniLM's attention transfer (the model's
#   `output_attentions=True` gives the distributions).
# * A student from scratch (`AutoModelForSequenceClassification.from_config` with 3 layers) in the
#   same three arms: how much does starting from the teacher's layers buy, and does distillation
#   matter more without it?
# * Tune `HIDDEN_WEIGHT`, or train the word embeddings too, under the same paired seeds.
