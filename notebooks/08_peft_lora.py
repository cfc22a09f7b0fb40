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
# # Lesson 8 — Parameter-efficient fine-tuning: LoRA
#
# **Goal:** fine-tune a pretrained encoder while training less than 1% of its parameters, and know
# exactly what that saves (memory for gradients and optimizer state) and what it does not (the
# forward pass). We will:
#
# 1. take the memory of full fine-tuning apart — weights, gradients, AdamW's two states — and
#    LoRA's, by arithmetic and by counting the tensors, then measure the peak of a training step;
# 2. count trainable parameters for ranks and target modules, and see what alpha does;
# 3. time a training step, and a forward pass, with and without LoRA (`effkit.lesson` A/B verdicts);
# 4. fine-tune on SST-2 both ways over paired seeds and compare accuracy;
# 5. merge the adapters into the weights for inference with zero overhead — measured;
# 6. name the next step on a GPU: QLoRA.
#
# **Run time**: about 3.5 min in `cpu` (215 s recorded on a quiet 2-core Intel Xeon VM with AMX, no GPU, 2026-12-06: the outputs in `docs/recorded/`; the paired seeds of both fine-tunings take
# most of it), 17 s in `smoke`.
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one), `smoke`
# (tests only: a 2-layer encoder on synthetic sentences; its numbers show the code runs, not what
# is true). The model is the packaged pretrained encoder (all-MiniLM-L6-v2, BERT 6 x 384, 22.7 M
# parameters; `effkit.workloads.bert.pretrained`). On a 2-core CPU we can afford only a short
# fine-tuning: few steps, sequences cut to 32 tokens, a subset of the evaluation set — said again
# next to every accuracy. The quiz and the graded exercise are in `exercises/lesson8/`.

# %%
# %matplotlib inline
import copy
import math
import statistics
import time

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyArrowPatch, Rectangle
from peft import LoraConfig, get_peft_model
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from effkit import lesson, lesson_setup
from effkit.abtest import median_ci, median_ci_coverage
from effkit.measure import device_name
from effkit.peak_memory import peak_memory_bytes, reset_peak_memory

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
SIZES = {
    "smoke": dict(layers=2, batch=8, seq=16, steps=6, eval_rows=64, pairs=6, burst=1, seeds=2),
    "cpu": dict(layers=None, batch=16, seq=32, steps=100, eval_rows=872, pairs=6, burst=2, seeds=3),
    "gpu": dict(layers=None, batch=32, seq=64, steps=600, eval_rows=872, pairs=8, burst=5, seeds=5),
}[PROFILE]
FULL_LR, LORA_LR = 5e-5, 1e-3  # LoRA's adapters start at zero and are few: a ~20x higher LR is usual
lesson_setup.quiet_transformers()  # the classifier head is new by design: no load report
ENCODER = lesson_setup.pretrained_encoder()  # LoRA on random weights would measure nothing worth learning
print(f"profile {PROFILE!r} on {DEVICE_NAME}; encoder: {ENCODER.note}")


def encoder(seed=0):
    """The pretrained encoder with a fresh 2-way head (cut to fewer layers in smoke)."""
    torch.manual_seed(seed)
    extra = {} if SIZES["layers"] is None else {"num_hidden_layers": SIZES["layers"]}
    return AutoModelForSequenceClassification.from_pretrained(ENCODER.source, num_labels=2, **extra).to(DEVICE)


def lora(model, targets=("query", "value"), r=8, alpha=16):
    cfg = LoraConfig(task_type="SEQ_CLS", r=r, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0)
    return get_peft_model(model, cfg)


full_model = encoder()
n_params = sum(p.numel() for p in full_model.parameters())
print(f"{n_params / 1e6:.1f} M parameters, {full_model.config.num_hidden_layers} layers of width"
      f" {full_model.config.hidden_size}")

# %% [markdown]
# ## 1. What LoRA changes
#
# Full fine-tuning updates every weight `W`. LoRA (Hu et al. 2021) freezes `W` and learns a
# low-rank change: for a layer with `in` inputs and `out` outputs it adds `B @ A`, with `A` of shape
# `r x in` and `B` of shape `out x r`, scaled by `alpha / r`:
#
# `y = x W^T + (alpha / r) · x A^T B^T`
#
# `B` starts at zero, so the adapted model starts *exactly* as the pretrained one. Only `A` and `B`
# (and the new classifier head) are trained: `r · (in + out)` numbers per layer instead of `in · out`.

# %%
fig, ax = plt.subplots(figsize=(9, 3))
ax.add_patch(Rectangle((0, 0.4), 2.2, 2.2, color="tab:gray", alpha=0.7))
ax.text(1.1, 1.5, "W (frozen)\nout x in\nno gradient,\nno AdamW state", ha="center", va="center", fontsize=9)
ax.add_patch(Rectangle((3.0, 1.9), 2.2, 0.35, color="tab:orange"))
ax.text(4.1, 2.07, "A: r x in (random)", ha="center", va="center", fontsize=8)
ax.add_patch(Rectangle((3.0, 0.4), 0.35, 1.3, color="tab:green"))
ax.text(3.5, 1.05, "B: out x r\n(zeros)", ha="left", va="center", fontsize=8)
ax.text(6.0, 1.5, "y = x W^T + (alpha/r) x A^T B^T\n\ntrained: A, B (+ head)\nmerge: W' = W + (alpha/r) B A",
        fontsize=9, va="center")
ax.add_patch(FancyArrowPatch((2.3, 1.5), (2.9, 1.5), arrowstyle="<-", mutation_scale=12))
ax.text(2.6, 1.65, "+", ha="center", fontsize=14)
ax.set(xlim=(-0.2, 10), ylim=(0.2, 2.6), title="LoRA: a frozen weight plus a trainable low-rank update")
ax.axis("off")
plt.show()

# %% [markdown]
# ## 2. The memory of fine-tuning
#
# With AdamW in fp32, every *trained* parameter costs 4 bytes of weight, 4 of gradient and 8 of
# optimizer state (first and second moments): **16 bytes**. A *frozen* parameter costs its 4 bytes
# of weight only. (Activations come on top, and LoRA shrinks them little: backward still needs the
# inputs of every nonlinearity — GELU, softmax, layer norm — and of every adapted layer to pass
# gradients down to the adapters below; only a frozen linear layer's input can be dropped, since the
# gradient it passes down needs its weight, not its input. Section 4 measures a training step's
# peak, activations included; lesson 5 takes activations apart.)
#
# **Predict.** With rank 8 on the query and value projections of every layer (plus the 2-way head),
# what share of the encoder's parameters does LoRA train, in percent?

# %%
GUESS_TRAINABLE_PERCENT = None  # your guess, e.g. 5.0

# %%
lora_model = lora(encoder())
trainable, total = lora_model.get_nb_trainable_parameters()
lesson.check_guess(GUESS_TRAINABLE_PERCENT, 100 * trainable / total, "percent of parameters LoRA trains", "{:.2f}")


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t) and t.dim() > 0)


def one_step_anatomy(model, lr):
    """Bytes of weights, gradients and AdamW state, counted tensor by tensor after one step."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    ids = torch.randint(1000, 2000, (SIZES["batch"], SIZES["seq"]), device=DEVICE)
    model(input_ids=ids, labels=torch.zeros(SIZES["batch"], dtype=torch.long, device=DEVICE)).loss.backward()
    opt.step()
    return {"weights": tensor_bytes(model.parameters()), "gradients": tensor_bytes(p.grad for p in params),
            "AdamW state": tensor_bytes(v for s in opt.state.values() for v in s.values())}


anatomy = {"full fine-tuning": one_step_anatomy(copy.deepcopy(full_model), FULL_LR),
           "LoRA r=8 (q, v)": one_step_anatomy(lora(encoder()), LORA_LR)}
for name, parts in anatomy.items():
    arithmetic = 16 * (n_params if name.startswith("full") else trainable) + (0 if name.startswith("full") else
                                                                             4 * (total - trainable))
    print(f"{name:18} " + ", ".join(f"{k} {v / 2**20:7.2f} MiB" for k, v in parts.items())
          + f"; total {sum(parts.values()) / 2**20:6.1f} MiB (arithmetic: {arithmetic / 2**20:6.1f} MiB)")
full_static, lora_static = (sum(p.values()) for p in anatomy.values())
grad_opt = {k: v["gradients"] + v["AdamW state"] for k, v in anatomy.items()}
print(f"gradients + AdamW state: {grad_opt['full fine-tuning'] / grad_opt['LoRA r=8 (q, v)']:,.0f}x less with LoRA;"
      f" with the frozen weights counted: {full_static / lora_static:.1f}x less")

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
left = [0, 0]
for part, color in zip(("weights", "gradients", "AdamW state"), ("tab:gray", "tab:orange", "tab:purple"), strict=True):
    vals = [anatomy[k][part] / 2**20 for k in anatomy]
    ax.barh(list(anatomy), vals, left=left, color=color, label=part)
    left = [a + b for a, b in zip(left, vals, strict=True)]
ax.set(xlabel="MiB (measured, fp32)", title=f"Training memory before activations — {DEVICE_NAME}")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Rank, alpha, and which modules to adapt
#
# Each adapted `in x out` layer adds `r · (in + out)` parameters: linear in the rank. Hu et al.
# adapted only the attention's query and value projections and found r = 1-8 enough on their
# tasks; later work (QLoRA) adapts every linear layer. `alpha` sets the update's scale as
# `alpha / r`. Hu et al. fixed `alpha` while varying `r` and report that this spared them retuning
# the learning rate. A common choice today, and this lesson's, is `alpha = 2r`, which fixes
# `alpha / r` instead; whether a learning rate then transfers across ranks is not measured here
# (see *What to try next*).

# %%
layers_n, width = full_model.config.num_hidden_layers, full_model.config.hidden_size
inner = full_model.config.intermediate_size
target_sets = {"query, value": (["query", "value"], 2 * (width + width)),
               "query, key, value, attention output": (["query", "key", "value", "attention.output.dense"],
                                                       4 * (width + width)),
               "every linear layer": (["query", "key", "value", "dense"], 4 * 2 * width + 2 * (width + inner))}
def trainable_numel(model, keep):
    return sum(p.numel() for n, p in model.named_parameters() if p.requires_grad and keep(n))


rows = []
for name, (targets, per_rank) in target_sets.items():
    for r in (1, 8, 64):
        adapted = lora(encoder(), targets, r, 2 * r)
        rows.append((name, r, adapted.get_nb_trainable_parameters()[0], r * per_rank * layers_n,
                     trainable_numel(adapted, lambda n: "lora_" not in n),  # the classifier: peft trains a copy of it
                     trainable_numel(adapted, lambda n: "lora_" in n and "pooler" in n)))  # "dense" matches the pooler's too
print(f"{'targets':38} {'r':>3} {'peft counts':>12} {'r(in+out) x layers':>19} {'classifier':>10} "
      f"{'pooler LoRA':>11}  share")
for name, r, counted, arithmetic, head, pooler in rows:
    print(f"{name:38} {r:3d} {counted:12,} {arithmetic:19,} {head:10,} {pooler:11,}  {counted / n_params:6.2%}")
adds_up = all(counted == arithmetic + head + pooler for _, _, counted, arithmetic, head, pooler in rows)
print(f"peft's count = the arithmetic + the classifier it trains (task_type SEQ_CLS) + a LoRA on the pooler's "
      f"dense layer where the targets name 'dense': {'every row' if adds_up else 'NOT every row: see the columns'}")

# %% [markdown]
# ## 4. Step time: what LoRA saves and what it does not
#
# A LoRA step still runs the *whole* frozen model forward, plus the small adapters. Backward still
# passes activation gradients through every layer (the adapters in layer 1 need them); it skips
# only the frozen weights' gradients (one of the two big matmuls per layer in backward, and the
# word embedding's 30,522 x 384 gradient). The optimizer touches 0.3% of the parameters instead of
# all of them. At this small batch on a CPU the optimizer's pass over 22.7 M parameters is a large
# part of a full step; on a GPU at a large batch the matmuls dominate and the gain shrinks toward
# what backward skips (Hu et al. report ~25% faster training for GPT-3 175B).
#
# **Predict.** How many times faster is a LoRA training step than a full fine-tuning step here?

# %%
GUESS_STEP_SPEEDUP = None  # your guess, e.g. 1.3

# %%
tokenizer = AutoTokenizer.from_pretrained(ENCODER.source)
train, held_out = lesson_setup.sst2_splits(PROFILE)  # held_out: GLUE SST-2 dev (872 rows) in cpu/gpu


def encode(texts, labels):
    enc = tokenizer(list(texts), padding=True, truncation=True, max_length=SIZES["seq"], return_tensors="pt")
    return {k: v.to(DEVICE) for k, v in enc.items()}, torch.tensor(list(labels), device=DEVICE)


def batches(seed):
    gen = torch.Generator().manual_seed(seed)
    while True:
        rows = torch.randint(0, len(train.texts), (SIZES["batch"],), generator=gen).tolist()
        yield encode([train.texts[i] for i in rows], [train.labels[i] for i in rows])


def trainer(model, lr, seed=0):
    """One function that runs `burst` training steps and returns the samples it saw."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt, feed = torch.optim.AdamW(params, lr=lr), batches(seed)
    model.train()

    def run(steps=SIZES["burst"]):
        for _ in range(steps):
            enc, y = next(feed)
            model(**enc, labels=y).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return steps * SIZES["batch"]
    return run


full_run, lora_run = trainer(encoder(), FULL_LR), trainer(lora(encoder()), LORA_LR)
step_ab = lesson.ab("training step: full fine-tuning vs LoRA", full_run, lora_run, pairs=SIZES["pairs"],
                    a_label="full fine-tuning", b_label="LoRA", unit="samples/s", dev=DEVICE)
lesson.check_guess(GUESS_STEP_SPEEDUP, step_ab.ratio, "LoRA step speed / full fine-tuning's", "{:.2f}x")

# %% [markdown]
# And the forward pass alone (inference, `torch.no_grad`): the frozen model, against the same model
# with unmerged adapters.

# %%
probe_enc, _ = encode(held_out.texts[: SIZES["batch"] * 2], held_out.labels[: SIZES["batch"] * 2])
base_eval, adapted_eval = encoder().eval(), lora(encoder()).eval()


def infer(model):  # a burst of SIZES["burst"] forward passes on probe_enc, under no_grad
    return lesson.inference_burst(model, probe_enc, SIZES["burst"])


fwd_ab = lesson.ab("inference: base model vs unmerged LoRA", infer(base_eval), infer(adapted_eval),
                   pairs=SIZES["pairs"], a_label="base model", b_label="unmerged LoRA", dev=DEVICE)
# What the two verdicts together say (never more than their intervals allow):
saves = {"faster": "the LoRA step is faster: backward skips the frozen weights' gradients (the word embedding's"
                   f" among them) and AdamW updates {trainable / total:.2%} of the parameters instead of all",
         "slower": "the LoRA step is slower here: the adapters' extra work outweighed what backward and AdamW skip",
         "no clear difference": "no step-time difference this measurement can resolve"}[step_ab.verdict.word]
not_saved = {"faster": "the unmerged forward measured faster, which LoRA's arithmetic cannot explain: re-run",
             "slower": "the forward with unmerged adapters is slower than the frozen model's: it runs the same"
                       " matmuls plus the adapters'",
             "no clear difference": "the forward is not cheaper: no difference from the frozen model's that this"
                                    " measurement can resolve (it runs the same matmuls plus the adapters')"}[fwd_ab.verdict.word]
step_line = f"{saves}; {not_saved}"
print(step_line)

# %% [markdown]
# ### Peak memory of a training step, measured
#
# Section 2 counted tensors; a training step also holds **activations** and temporaries, and what
# the machine must have is the *peak*. We measure it: on a GPU, the caching allocator's
# `max_memory_allocated`; on a CPU, the process's resident-set peak (`VmHWM`, reset before each
# measurement, or a sampler thread where the kernel refuses the reset: `effkit.peak_memory`). The
# figure is the rise above the resting model during two steps (the first creates AdamW's state, the
# second runs with it in place), each arm twice in the order A B B A on a fresh model.
#
# **Predict.** LoRA cut gradients + AdamW state by hundreds of times. By how many times does it cut
# the *peak* rise of a training step?

# %%
GUESS_PEAK_RATIO = None  # your guess, e.g. 10


def training_peak(build, lr):
    """(bytes the process grew to above the resting model during two training steps, how measured)."""
    run = trainer(build(), lr)
    how = reset_peak_memory(DEVICE)
    resting = peak_memory_bytes(DEVICE)  # right after a reset: what is resident now
    run(2)
    rise = peak_memory_bytes(DEVICE) - resting
    del run
    return rise, how


arms = {"full fine-tuning": (encoder, FULL_LR), "LoRA r=8 (q, v)": (lambda: lora(encoder()), LORA_LR)}
peaks = {name: [] for name in arms}
for name in ["full fine-tuning", "LoRA r=8 (q, v)", "LoRA r=8 (q, v)", "full fine-tuning"]:  # A B B A
    rise, how = training_peak(*arms[name])
    peaks[name].append(rise)
peak = {name: statistics.median(v) for name, v in peaks.items()}
for name, values in peaks.items():
    rest = peak[name] - grad_opt[name]
    print(f"{name:18} peak rise {' and '.join(f'{v / 2**20:6.1f}' for v in values)} MiB ({how}); of which"
          f" gradients + AdamW state {grad_opt[name] / 2**20:6.1f} MiB, the rest (activations, temporaries)"
          f" {rest / 2**20:6.1f} MiB")
peak_ratio = peak["full fine-tuning"] / peak["LoRA r=8 (q, v)"]
lesson.check_guess(GUESS_PEAK_RATIO, peak_ratio, "full fine-tuning's peak rise / LoRA's", "{:.1f}x")
spread = max(max(v) / min(v) for v in peaks.values())
peak_line = (f"a training step's peak rise: {peak['full fine-tuning'] / 2**20:.0f} MiB full vs"
             f" {peak['LoRA r=8 (q, v)'] / 2**20:.0f} MiB LoRA ({peak_ratio:.1f}x; repeats within {spread:.2f}x"
             f" of each other), far less than the {grad_opt['full fine-tuning'] / grad_opt['LoRA r=8 (q, v)']:,.0f}x"
             " cut in gradients + AdamW state: activations stay"
             if peak_ratio < grad_opt["full fine-tuning"] / grad_opt["LoRA r=8 (q, v)"] / 2 else
             f"a training step's peak rise: {peak_ratio:.1f}x less with LoRA (repeats within {spread:.2f}x)")
print(peak_line)

# %% [markdown]
# ## 5. Accuracy: LoRA against full fine-tuning on SST-2
#
# Both start from the same pretrained encoder and the same head initialisation, see the same
# batches, and train the same number of steps; each with its usual learning rate (full fine-tuning
# 5e-5, LoRA 1e-3). On this CPU that is a *short* fine-tuning (the step count and sequence length
# are printed with the result): the accuracies are what this budget reaches, not what either method
# can reach.
#
# One run per method would compare two draws of luck. We **pair seeds**: seed `s` fixes the head's
# initialisation and the order of the batches for *both* methods, so the difference LoRA − full
# within a seed is free of the luck they share; the verdict rests on the median of those paired
# differences and its order-statistic interval, whose real coverage (75% with 3 seeds, 94% with 5)
# is printed beside it. Three seeds (the `cpu` profile, to stay within five minutes) give only 75%:
# read its verdict as a hint; the line also prints the standard error each accuracy carries from
# its finite held-out rows, which no number of seeds removes.

# %%
def evaluate(model, rows=SIZES["eval_rows"]):
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, rows, 64):
            enc, y = encode(held_out.texts[start:start + 64], held_out.labels[start:start + 64])
            correct += int((model(**enc).logits.argmax(-1) == y).sum())
    rows = min(rows, len(held_out.texts))
    acc = correct / rows
    return acc, 1.96 * math.sqrt(acc * (1 - acc) / rows)


def fine_tune(model, lr, seed, desc):
    run = trainer(model, lr, seed)
    start = time.perf_counter()
    for _ in tqdm(range(SIZES["steps"]), desc=desc, leave=False):
        run(1)
    return model, evaluate(model)[0], time.perf_counter() - start


results, lora_trained = {"full fine-tuning": [], "LoRA r=8 (q, v)": []}, None
for seed in tqdm(range(SIZES["seeds"]), desc="paired seeds"):
    for name, lr in (("full fine-tuning", FULL_LR), ("LoRA r=8 (q, v)", LORA_LR)):
        model = encoder(seed) if name.startswith("full") else lora(encoder(seed))  # same head init
        model, accuracy, seconds = fine_tune(model, lr, seed, f"{name}, seed {seed}")
        results[name].append((accuracy, seconds))
        if lora_trained is None and name.startswith("LoRA"):
            lora_trained = model  # seed 0's, merged in section 6
        print(f"seed {seed}  {name:18} accuracy {accuracy:.1%} on {min(SIZES['eval_rows'], len(held_out.texts))}"
              f" held-out rows, trained in {seconds:.0f} s")
        del model
acc = {name: [r[0] for r in runs] for name, runs in results.items()}
diffs = [b - a for a, b in zip(acc["full fine-tuning"], acc["LoRA r=8 (q, v)"], strict=True)]
lo, hi = median_ci(diffs)
coverage = median_ci_coverage(len(diffs))
t_full, t_lora = (statistics.median(r[1] for r in runs) for runs in results.values())
verdict_words = ("no difference these seeds can resolve (the interval spans 0)" if lo <= 0 <= hi else
                 f"LoRA ahead by at least {lo:.1%} (the interval excludes 0)" if lo > 0 else
                 f"full fine-tuning ahead by at least {-hi:.1%} (the interval excludes 0)")
# The rows' own error: one accuracy on n held-out rows has a binomial standard error of sqrt(p(1-p)/n),
# a floor under any difference between two of them that more seeds cannot lower.
n_rows = min(SIZES["eval_rows"], len(held_out.texts))
p_all = statistics.mean(a for runs in acc.values() for a in runs)
row_se = math.sqrt(p_all * (1 - p_all) / n_rows)
accuracy_line = (f"LoRA − full fine-tuning, paired over {len(diffs)} seeds: median {statistics.median(diffs):+.1%}"
                 f" (interval {lo:+.1%} to {hi:+.1%}, real coverage {coverage:.0%}; each accuracy carries a"
                 f" ±{row_se:.1%} standard error from its {n_rows} rows alone): {verdict_words};"
                 f" median training time {t_lora:.0f} s LoRA vs {t_full:.0f} s full")
print(accuracy_line)

# %% [markdown]
# ## 6. Merge the adapters: zero-overhead inference
#
# After training, `W' = W + (alpha / r) · B A` is an ordinary weight: `merge_and_unload()` folds
# every adapter in and returns the plain model. Same outputs, the base model's cost.

# %%
merged = copy.deepcopy(lora_trained).merge_and_unload().eval()
lora_trained.eval()
with torch.no_grad():
    merge_diff = float((merged(**probe_enc).logits - lora_trained(**probe_enc).logits).abs().max())
print(f"largest logit difference, merged vs unmerged: {merge_diff:.1e}; merged model type:"
      f" {type(merged).__name__}")
merge_ab = lesson.ab("inference: unmerged LoRA vs merged", infer(lora_trained), infer(merged), pairs=SIZES["pairs"],
                     a_label="unmerged LoRA", b_label="merged", dev=DEVICE)
same_ab = lesson.ab("inference: base model vs merged", infer(base_eval), infer(merged), pairs=SIZES["pairs"],
                    a_label="base model", b_label="merged", dev=DEVICE)

# %%
lesson.plot_ab({"LoRA step\n/ full step": step_ab, "unmerged fwd\n/ base fwd": fwd_ab,
                "merged\n/ unmerged": merge_ab, "merged\n/ base": same_ab}, f"Speed ratios (B/A) — {DEVICE_NAME}")
plt.show()

# %% [markdown]
# ## 7. The next step on a GPU: QLoRA
#
# LoRA removes gradients and optimizer state for the frozen weights, but the frozen weights
# themselves still sit in memory in full precision. **QLoRA** (Dettmers et al. 2023) stores them in
# 4 bits (NF4, with double quantisation of the scales) and computes in bf16, training LoRA
# adapters on top: a 65 B model fine-tunes on one 48 GB GPU. It needs `bitsandbytes`' CUDA kernels
# and the QLoRA settings spelled out, since `BitsAndBytesConfig(load_in_4bit=True)` alone means FP4,
# no double quantisation and fp32 compute: `BitsAndBytesConfig(load_in_4bit=True,
# bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)`
# in transformers, then `prepare_model_for_kbit_training` and a `LoraConfig` in peft. No profile of
# this course runs it (none installs `bitsandbytes`, and it needs a CUDA GPU); the 22.7 M-parameter
# encoder here fits in 91 MB anyway.

# %% [markdown]
# ## Your turn
#
# Choose targets and a rank: how many parameters do they train, what do gradients and AdamW state
# cost, and how does the training step compare with the lesson's LoRA (q, v, r = 8)?

# %%
MY_TARGETS, MY_RANK = ["query", "key", "value", "dense"], 16  # your turn
mine = lora(encoder(), MY_TARGETS, MY_RANK, 2 * MY_RANK)
mine_anatomy = one_step_anatomy(lora(encoder(), MY_TARGETS, MY_RANK, 2 * MY_RANK), LORA_LR)
print(f"{MY_TARGETS}, r={MY_RANK}: {mine.get_nb_trainable_parameters()[0]:,} trainable; gradients + AdamW"
      f" {(mine_anatomy['gradients'] + mine_anatomy['AdamW state']) / 2**20:.2f} MiB")
mine_ab = lesson.ab("training step: LoRA (q, v, r=8) vs yours", trainer(lora(encoder()), LORA_LR),
                    trainer(mine, LORA_LR), pairs=SIZES["pairs"], a_label="LoRA q,v r=8", b_label="yours",
                    dev=DEVICE)

# %% [markdown]
# ### In your own words
#
# Sections 2 and 4 measured what LoRA saves in memory and in step time. Explain in 2–3 sentences
# why freezing the pretrained weights cuts gradient and optimizer memory so much but speeds a
# training step up far less, and why merging the adapters makes inference cost what the base model
# costs.
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=8)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(8, DEVICE_NAME, f"; encoder: {ENCODER.note}"))
print(f"* LoRA r=8 on query and value trains {trainable:,} of {total:,} parameters ({trainable / total:.2%})")
print(f"* gradients + AdamW state: {grad_opt['full fine-tuning'] / 2**20:.0f} MiB full vs"
      f" {grad_opt['LoRA r=8 (q, v)'] / 2**20:.2f} MiB LoRA (measured); with weights:"
      f" {full_static / 2**20:.0f} vs {lora_static / 2**20:.0f} MiB — the frozen weights stay")
print(f"* {peak_line}")
print(f"* training step: {step_ab.verdict}")
print(f"* forward pass with unmerged adapters: {fwd_ab.verdict}")
print(f"* so: {step_line}")
print(f"* accuracy ({SIZES['steps']} steps of {SIZES['batch']}, {SIZES['seq']} tokens): {accuracy_line}")
print(f"* merged: logits within {merge_diff:.0e}; vs unmerged: {str(merge_ab.verdict).rstrip('.')};"
      f" vs the base model: {same_ab.verdict}")
print(f"* your targets {MY_TARGETS}, r={MY_RANK}: {mine_ab.verdict}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson8/`: write a LoRA layer and the
# function that injects it (checked against peft's own outputs, gradients and merge), and write the
# function that chooses a LoRA recipe for the constraints the grader draws for each grading (which
# modules may carry adapters, how many bytes of gradient and AdamW state are allowed, and the half
# of them a recipe must spend): it fine-tunes your choice itself, against its own full fine-tuning —
# outside your notebook. Sections 2 and 3 hold the arithmetic: the budgets span ranks 4 to 31, so
# the lesson's q, v at r = 8, or any rank fixed in advance, misses most of them.
#
# ### References
#
# * E. J. Hu et al., *LoRA: Low-Rank Adaptation of Large Language Models*, 2021,
#   [arXiv:2106.09685](https://arxiv.org/abs/2106.09685).
# * T. Dettmers, A. Pagnoni, A. Holtzman, L. Zettlemoyer, *QLoRA: Efficient Finetuning of Quantized
#   LLMs*, 2023, [arXiv:2305.14314](https://arxiv.org/abs/2305.14314).
# * Hugging Face PEFT: [LoRA developer guide](https://huggingface.co/docs/peft/developer_guides/lora)
#   (`LoraConfig`, `get_peft_model`, `merge_and_unload`).
# * I. Loshchilov, F. Hutter, *Decoupled Weight Decay Regularization* (AdamW), 2019,
#   [arXiv:1711.05101](https://arxiv.org/abs/1711.05101).
# * R. Socher et al., *Recursive Deep Models for Semantic Compositionality Over a Sentiment
#   Treebank* (SST-2), 2013; N. Reimers, I. Gurevych, *Sentence-BERT*, 2019,
#   [arXiv:1908.10084](https://arxiv.org/abs/1908.10084) (all-MiniLM-L6-v2's training).
#
# ### What to try next
#
# * Train longer (the `gpu` profile: 600 steps of 32, 64 tokens) and see whether the accuracy gap
#   closes; try r = 1 and r = 64 at the same `alpha / r`.
# * On a GPU with `bitsandbytes`, load the encoder in 4 bits and train the same adapters (QLoRA):
#   measure `torch.cuda.max_memory_allocated` against fp32 LoRA.
