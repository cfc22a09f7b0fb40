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
# # Lesson 3 — Mixed precision
#
# **Goal:** run the bulk of the arithmetic in 16-bit floats where the hardware is faster at it,
# keep in fp32 what autocast's op lists mark as needing range or precision (these lists differ by
# device: on CUDA softmax and layer norm stay fp32, while in the recorded CPU run they ran in bf16),
# and know — by measuring — when it does not pay.
# We will:
#
# 1. see what fp32, bf16 and fp16 can represent, and pick one per device with
#    `effkit.amp.choose_precision` (and simulate a T4);
# 2. see what `torch.autocast` runs in low precision and what it keeps in fp32;
# 3. watch an fp16 gradient underflow to zero — and survive with loss scaling; watch the
#    `GradScaler` skip steps on `inf` and probe its scale;
# 4. measure fp32 against autocast, A/B: matrix multiplications of growing size, then the naive
#    BERT recipe — and let the verdicts say where 16 bits pay on this device.
#
# **Run time**: about 70 s in `cpu` (67 s recorded on a quiet 2-core Intel Xeon VM with AMX, no GPU, 2026-12-07
# 10:49 UTC: `docs/recorded/manifest.json`, its outputs in `docs/recorded/`). On a CPU without native bf16 (AVX2 only) expect
# much longer: its bf16 arms run in PyTorch's fallback kernels (no run of this lesson there is recorded; the exercise's
# reference bf16 steps ran ~18x slower than fp32 on such an AMD EPYC, `grader/assignments/lesson3/README.md`).
# About 25-60 s in `smoke` (tests only; wall times seen in two test runs on 2026-12-06 on a 2-core Intel Xeon with
# AMX busy with other jobs, not kept in a file);
# `gpu`: 56 s on an H100 80GB HBM3, measured with the code of 2026-11-23, before the sweep's bursts did
# constant work (its narrower widths now run more repetitions: `benchmarks/results/nvidia-h100-80gb-hbm3/README.md`).
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one),
# `smoke` (tests only). You will predict twice and run your own A/B in *Your turn*. The quiz is
# in `exercises/lesson3/`.

# %%
# %matplotlib inline
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from effkit import lesson
from effkit.amp import DeviceCaps, choose_precision
from effkit.measure import device_name
from effkit.workloads import bert

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
# This lesson's experiment sizes per profile; the BERT recipe's own sizes live in its profile.
# matmul_reps: a burst's repetitions at the widest width (burst_reps scales them for the others).
SIZES = {
    "smoke": dict(widths=(64, 256, 1024), matmul_rows=256, matmul_reps=1, bert_steps=1, pairs=6),
    "cpu": dict(widths=(64, 256, 1024), matmul_rows=512, matmul_reps=4, bert_steps=1, pairs=6),
    "gpu": dict(widths=(256, 1024, 4096), matmul_rows=8192, matmul_reps=20, bert_steps=20,
                pairs=8),
}[PROFILE]
print(f"profile {PROFILE!r} on {DEVICE_NAME}")


# %% [markdown]
# **Where the data comes from.** This lesson trains on SST-2, real in the `cpu` and `gpu` profiles:
# downloaded once, or read from a folder with GLUE SST-2's `train.tsv`/`dev.tsv`/`test.tsv` that
# `EFFKIT_SST2_DIR` points at (set it in the shell before `jupyter lab`, or in the cell below with
# `os.environ[...] = ...` before anything loads). `smoke` generates synthetic sentences.

# %%
for workload, source in lesson.data_location(PROFILE).items():
    print(f"{workload:9} <- {source}")

# %% [markdown]
# ## 1. fp16 or bf16?
#
# Both are 16 bits, split differently between exponent (range) and mantissa (precision):

# %%
formats = {"fp32": (1, 8, 23), "bf16": (1, 8, 7), "fp16": (1, 5, 10)}
fig, ax = plt.subplots(figsize=(9, 2.2))
for row, (sign, exponent, mantissa) in enumerate(formats.values()):
    start = 0
    for width, colour, label in ((sign, "tab:red", "sign"), (exponent, "tab:green", "exponent"),
                                 (mantissa, "tab:blue", "mantissa")):
        ax.barh(row, width, left=start, color=colour, edgecolor="white")
        ax.text(start + width / 2, row, f"{label} {width}" if width > 2 else str(width),
                ha="center", va="center", color="white", fontsize=8)
        start += width
ax.set_yticks(range(3), list(formats))
ax.invert_yaxis()
ax.set(xlim=(0, 32), xlabel="bits", title="Bit layouts: bf16 keeps fp32's range (8 exponent"
       " bits), fp16 keeps more precision (10 mantissa bits)")
plt.show()

for dtype in (torch.float32, torch.bfloat16, torch.float16):
    info = torch.finfo(dtype)
    print(f"{str(dtype):15} max {info.max:9.3g}   smallest normal {info.tiny:9.3g}"
          f"   step at 1.0: {info.eps:.3g}")

# %% [markdown]
# **fp16** has only 5 exponent bits: small values underflow and large ones overflow, so many
# models need *loss scaling* to train in it (some train without) [Micikevicius et al. 2018].
# **bf16** keeps fp32's 8 exponent bits (same range) with 7 mantissa bits: no scaler, but steps 8x
# coarser than fp16's (at 1.0, 0.00781 against 0.000977 in the table) [Kalamkar et al. 2019].
# Use bf16 where the hardware has it (Ampere and later GPUs, CPUs with AMX or AVX-512 bf16: on
# an AVX-512 bf16 AMD EPYC without AMX, the lesson 3 exercise's grader timed its reference solution's
# bf16 BERT recipe at 1.35-1.54x fp32's speed over 246 gradings, and at 1.86-1.99x in 7 earlier ones
# with torch 2.15; what made the difference (torch 2.15 to 2.14.1, or the host) was not isolated:
# `benchmarks/results/grader-notes.md`),
# fp16 + `GradScaler` where it does not (T4, V100).
#
# `choose_precision(device, "auto")` picks for the device it detects. Hand it a `DeviceCaps` to
# see what it would pick on hardware you do not have:

# %%
here = choose_precision(DEVICE, "auto")
t4 = DeviceCaps("cuda", "Tesla T4", bf16=False, fp16=True)
a100 = DeviceCaps("cuda", "NVIDIA A100-SXM4-80GB", bf16=True, fp16=True)
for caps in (DeviceCaps.detect(DEVICE), t4, a100):
    policy = choose_precision(caps.type, "auto", caps=caps)
    print(f"{caps.name[:28]:28} auto -> {policy.mode:4}   scaler: {policy.needs_scaler}")
try:
    choose_precision("cuda", "bf16", caps=t4)
except ValueError as err:
    print(f"bf16 on a T4 -> ValueError: {err}")
LOW = here.dtype or torch.bfloat16  # the 16-bit type this lesson measures on this device
LOW_NAME = {torch.bfloat16: "bf16", torch.float16: "fp16"}[LOW]
cpu_flags = set()
if DEVICE.type == "cpu" and Path("/proc/cpuinfo").exists():
    cpu_flags = set(re.findall(r"\w+", next(ln for ln in Path("/proc/cpuinfo").read_text()
                                            .splitlines() if ln.startswith("flags"))))
bf16_flags = sorted(cpu_flags & {"amx_bf16", "avx512_bf16"})  # what effkit counts as native bf16
print(f"this lesson measures {LOW_NAME} on {DEVICE_NAME}")
if DEVICE.type == "cpu":
    matrix = sorted(cpu_flags & {"amx_bf16", "amx_fp16"})
    vector = sorted(cpu_flags & {"avx512_bf16", "avx512_fp16"})
    print(f"16-bit matrix units (AMX) this CPU reports: {', '.join(matrix) or 'none'};"
          f" 16-bit vector instructions (AVX-512): {', '.join(vector) or 'none'}")

# %% [markdown]
# ## 2. What autocast runs in low precision
#
# Autocast does not convert the model. The parameters stay fp32 and are the only weights kept
# from step to step: there is no *persistent* 16-bit copy beside them (unlike fp16 training with
# fp32 "master weights" [Micikevicius et al. 2018]). Each op casts its inputs, weights included, on
# the fly according to per-device lists [PyTorch AMP docs]: matmuls and convolutions run in 16
# bits, ops that need range or accumulate many values (losses; on CUDA also softmax, layer norm,
# exp, log) run in fp32, and mixed-dtype arithmetic promotes to the wider type. The 16-bit copies
# of the weights are temporary: autocast caches a weight's cast until its context exits, and
# backward keeps the 16-bit weight its forward saved until it has used it.
# What does *this* device do?

# %%
layer = nn.Linear(16, 16).to(DEVICE)
x = torch.randn(8, 16, device=DEVICE)
labels = torch.zeros(8, dtype=torch.int64, device=DEVICE)
with torch.autocast(DEVICE.type, dtype=LOW):
    h = layer(x)
    outputs = {
        "linear / matmul": h,
        "softmax(h)": torch.softmax(h, dim=-1),
        "layer_norm(h)": F.layer_norm(h, (16,)),
        "cross_entropy(h) (loss)": F.cross_entropy(h, labels),
        "h + x (x is fp32)": h + x,
    }
for name, out in outputs.items():
    print(f"{name:26} -> {out.dtype}")
print(f"{'layer.weight (parameter)':26} -> {layer.weight.dtype}   (autocast {LOW}, {DEVICE_NAME})")

# %% [markdown]
# One autocast context around the **forward pass and the loss**, never around `backward()`:
# backward runs each op in the dtype its forward used.
#
# ## 3. Underflow, overflow and the loss scale
#
# fp16's smallest *normal* value is 6.1e-5 (the table above). Below it, subnormals keep fewer and
# fewer bits down to about 6e-8 (2^-24); a value under half of that, about 3e-8, rounds to exactly
# zero, and a gradient that does so teaches the weights nothing. Here a loss scaled down by 1e-6
# (as averaging over a million tokens scales down each token's share) is the mean over the 64
# outputs of one fp16 layer, and flows back through it to the layer's weights.
#
# **Predict.** What share of the weight gradients will be exactly zero in fp16 without scaling?

# %%
GUESS_ZERO_SHARE = None  # your guess, a fraction

# %%
torch.manual_seed(0)
tiny = nn.Linear(16, 1).to(DEVICE)
inputs = torch.randn(64, 16, device=DEVICE)


def small_loss():
    with torch.autocast(DEVICE.type, dtype=torch.float16):
        return tiny(inputs).float().mean() * 1e-6


def weight_grad(scaler):
    tiny.zero_grad()
    scaler.scale(small_loss()).backward()
    scaler.unscale_(torch.optim.SGD(tiny.parameters(), lr=0.0))  # back to true gradients
    return tiny.weight.grad.clone()


plain = weight_grad(torch.amp.GradScaler(DEVICE.type, enabled=False))
scaled = weight_grad(torch.amp.GradScaler(DEVICE.type, init_scale=2.0**16))
tiny.zero_grad()
(tiny(inputs).mean() * 1e-6).backward()  # the fp32 reference
reference = tiny.weight.grad.clone()
zero_plain = float((plain == 0).float().mean())
print(f"fp16, no scaling : {zero_plain:.0%} of the weight gradients are zero")
print(f"fp16, scale 2^16 : {(scaled == 0).float().mean():.0%} zero, max relative error vs fp32 "
      f"{((scaled - reference).abs() / reference.abs()).max():.1e}")
lesson.check_guess(GUESS_ZERO_SHARE, zero_plain, "zero gradients without scaling", "{:.0%}")
print(f"Why: the mean spreads the loss over {len(inputs)} outputs, so each output's gradient is"
      f" 1e-6 / {len(inputs)} = {1e-6 / len(inputs):.1e}, under the ~3e-8 below which fp16 rounds"
      " to zero; the weight gradients are computed from those.")

# %% [markdown]
# `GradScaler` multiplies the loss by a large scale before `backward()`, so gradients live in
# fp16's range, and divides them back (`unscale_`, in fp32) before the optimizer uses them. Which
# scale? The scaler *probes*: after `growth_interval` consecutive clean steps it doubles the
# scale; when a gradient overflows to `inf` it **skips** that optimizer step and halves the
# scale. A short run, starting low, with one loss spike (a bad batch) injected at step 20, and
# `growth_interval=3` so that we see the probing in 40 steps (the default is 2000):

# %%
GROWTH_INTERVAL = 3
net = nn.Linear(16, 1).to(DEVICE)
optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(DEVICE.type, init_scale=2.0**10, growth_interval=GROWTH_INTERVAL)
SPIKE_STEP = 20
history = []  # (step, scale used, skipped?)
for step in range(40):
    spike = 1e3 if step == SPIKE_STEP else 1.0
    with torch.autocast(DEVICE.type, dtype=torch.float16):
        loss = (net(inputs * spike).float() ** 2).mean()
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scale, weight = scaler.get_scale(), net.weight.detach().clone()
    scaler.step(optimizer)  # skipped when any gradient is inf/NaN
    scaler.update()  # halves the scale after an overflow, grows it after clean steps
    history.append((step, scale, torch.equal(weight, net.weight.detach())))
scales = [scale for _, scale, _ in history] + [scaler.get_scale()]
skips = [step for step, _, skipped in history if skipped]
for step in skips:
    print(f"step {step:2d}: scale {scales[step]:8.0f} -> inf gradients, step SKIPPED,"
          f" next scale {scales[step + 1]:.0f}")

# %%
fig, ax = plt.subplots(figsize=(8, 3))
steps = [s for s, _, _ in history]
ax.step(steps, [scale for _, scale, _ in history], where="post", label="loss scale")
ax.scatter(skips, [scales[s] for s in skips], color="red", zorder=3, label="step skipped")
ax.axvline(SPIKE_STEP, color="gray", ls=":", label="loss spike")
ax.set(yscale="log", xlabel="step", ylabel="scale", title=f"GradScaler at work — {DEVICE_NAME}")
ax.legend()
plt.show()

# %%
# What the skips say, computed from the run above.
probing = [s for s in skips if s != SPIKE_STEP]
gaps = sorted({b - a for a, b in zip(probing, probing[1:], strict=False)})
if SPIKE_STEP in skips:
    print(f"step {SPIKE_STEP}: the loss spike overflowed the gradients; the scaler skipped that"
          " update instead of writing inf into the weights, and halved the scale.")
if probing:
    print(f"steps {probing}: probing skips. After {GROWTH_INTERVAL} clean steps the scaler doubles"
          " the scale; once the scale is above what these gradients tolerate, the next step"
          " overflows, is skipped and the scale halves again.")
    if gaps:
        spacing = [b - a for a, b in zip(probing, probing[1:], strict=False)]
        print(f"gaps between probing skips: {gaps} steps — here 1 update lost every"
              f" {sum(spacing) / len(spacing):.1f} steps, measured. With"
              f" growth_interval={GROWTH_INTERVAL} probing cannot lose more than 1 in"
              f" {GROWTH_INTERVAL + 1}; with the default 2000, at most about 1 in 2001 — and only"
              " while the scale sits at the edge of what the gradients tolerate.")
else:
    print("no probing skips in these 40 steps: the scale never grew past what the gradients"
          " tolerate.")

# %% [markdown]
# bf16 needs none of this: its range is fp32's. A gradient of 1e-8 and a value of 2e7 both
# survive in bf16, while fp16 flushes the first to zero and turns the second into `inf`:

# %%
values = torch.tensor([1e-8, 2e7])
print(f"fp16: {values.to(torch.float16).tolist()}   bf16: {values.to(torch.bfloat16).tolist()}")

# %% [markdown]
# ## 4. When does it pay?
#
# 16 bits can pay in two ways: faster arithmetic, where the hardware has 16-bit units for the op
# (tensor cores, AMX), and half the bytes per value to move, which can speed up a memory-bound op
# even without such units. Every op also pays costs that 16 bits do not shrink (a kernel launch,
# the CPU's dispatch of the op), and autocast adds cast kernels of its own. The smaller the op, the
# larger the share of these fixed costs, and 16 bits can then make it *slower*. On an H100 at the
# gpu profile's sizes (8192 rows; the lesson's code of 2026-11-23,
# `benchmarks/results/nvidia-h100-80gb-hbm3/lessons/03_mixed_precision.outputs.txt`; 99% intervals
# over 8 pairs), bf16 was slower than fp32 at width 256 (0.79x, interval 0.48-0.94) and at width
# 512 (0.80x, 0.69-0.84, from the Your-turn cell), not clearly different at 1024 (1.12x,
# 0.86-1.30) and 9.74x faster at 4096 (8.86-9.93). That run timed whole forward and backward
# passes, not launches, casts or bytes: it shows where bf16 lost, not which of these costs made it
# lose.
# (On a GPU, "fp32" here means full fp32 matmuls: PyTorch enables TF32 for matmuls only when asked,
# `torch.set_float32_matmul_precision("high")` — a third option between the two measured here.) Measure, A/B: first a
# linear layer's matrix multiplication (its forward and its weight gradient; the input here needs
# no gradient) at growing sizes, fp32 against autocast in this device's 16-bit type. Each burst
# does the same arithmetic at every width (a narrower layer repeats its matmul more often), so a
# narrow layer's burst is not too short to time. `pairs` is a minimum: `lesson.ab` runs at least
# that many pairs (6 in `cpu`) and up to twice as many, stopping as soon as the interval is narrow.
# Each verdict states the coverage its interval has for a fixed number of pairs; stopping early
# lowers it somewhat (lesson 1's simulation of the rule: 95.2-95.4% on a noisy machine, against
# 96.9% for a fixed 6 pairs).


# %%
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def burst_reps(width):
    """Repetitions in one burst: `matmul_reps` at the widest width, and as many more at a narrower
    one as keep the multiply-adds (rows x width x width per repetition) the same."""
    return max(1, round(SIZES["matmul_reps"] * (max(SIZES["widths"]) / width) ** 2))


def matmul_work(width, precision):
    """A linear layer's forward and weight gradient on `matmul_rows` rows of `width` features, in
    fp32 or under autocast to `precision` ("bf16" or "fp16"); one burst of `burst_reps(width)`."""
    torch.manual_seed(0)
    layer = nn.Linear(width, width, bias=False).to(DEVICE)
    data = torch.randn(SIZES["matmul_rows"], width, device=DEVICE)  # no grad: weight gradient only
    reps = burst_reps(width)

    def run():
        for _ in range(reps):
            with torch.autocast(DEVICE.type, dtype=DTYPES.get(precision, LOW),
                                enabled=precision != "fp32"):
                out = layer(data)
            out.float().sum().backward()
        return reps * SIZES["matmul_rows"]
    return run


sweep = {}
for width in SIZES["widths"]:
    sweep[width] = lesson.ab(f"{width}x{width} linear layer: fp32 vs {LOW_NAME}",
                             matmul_work(width, "fp32"), matmul_work(width, LOW_NAME),
                             pairs=SIZES["pairs"], a_label="fp32", b_label=LOW_NAME,
                             unit="rows/s")
# How long one burst lasted: a "no evidence" verdict blames noise or short bursts; this shows which.
for width, result in sweep.items():
    rows = burst_reps(width) * SIZES["matmul_rows"]
    print(f"width {width:5}: {burst_reps(width):5} repetitions a burst,"
          f" {1e3 * rows / result.a_median:7.1f} ms in fp32,"
          f" {1e3 * rows / result.b_median:7.1f} ms in {LOW_NAME} (medians)")

# %% [markdown]
# Now the naive BERT recipe, nothing changed but `precision=`. Its step runs matrix
# multiplications (attention and MLP) of its hidden width, but also AdamW over all parameters,
# layer norms and GELU, and its DataLoader workers tokenise: the sweep times none of these. Its
# hidden width: 64 in `smoke`, 384 in `cpu` (the packaged all-MiniLM-L6-v2; 256 only in the
# from-scratch fallback when no weights are found), 768 (bert-base) in `gpu`. Its shapes are not
# the sweep's: each of its matmuls has batch x sequence rows (in `cpu`, 32 sentences x 128 tokens
# = 4096, against the sweep's 512) and its MLP maps 384 features to 1536 and back, where the
# sweep's layers are square; attention adds matmuls of its own. A prediction from the
# sweep is an extrapolation.
#
# **Predict.** From the sweep above: will the naive BERT at this profile's width run faster in
# 16 bits? Write the speed ratio you expect (16-bit / fp32, e.g. `1.5`).

# %%
GUESS_BERT_SPEEDUP = None  # your guess

# %%
bert_fp32 = bert.build("naive", PROFILE, precision="off")
bert_low = bert.build("naive", PROFILE, precision=LOW_NAME)
k = SIZES["bert_steps"]
bert_ab = lesson.ab(f"naive BERT ({bert_fp32.describe()['hidden']} wide): fp32 vs {LOW_NAME}",
                    lambda: bert_fp32.train_steps(k).samples,
                    lambda: bert_low.train_steps(k).samples, pairs=SIZES["pairs"],
                    a_label="fp32", b_label=LOW_NAME, unit="sentences/s")
lesson.check_guess(GUESS_BERT_SPEEDUP, bert_ab.ratio, "BERT 16-bit speed-up", "{:.2f}x")

# %% [markdown]
# Speed is half the question; the other half, whether 16-bit training learns as well *to the end*,
# needs paired runs to the target, which this lesson does not run. The lesson 3 exercise's grader
# checks it only at small scale: its smoke spec runs 2 repeats of 48 steps of a small from-scratch
# BERT (4 layers x 256) on a synthetic task built for measurement, and its accuracy gate pairs naive
# and your recipe run by run. What the A/B above can show is smaller: did its first steps go the same way? Both trainers started from the
# same seed (same weights, same batches) and the A/B trained each for the same number of steps,
# but not with the same dropout masks: dropout draws from PyTorch's global random generator, which
# the interleaved A/B hands to the two trainers in turn. Both are scored on the profile's held-out
# split: in `cpu` that is effkit's own held-out part of SST-2's *training* phrases (the phrases of
# a random 10% of its source sentences, kept out of training, less any held-out phrase that occurs
# inside a training phrase, which is dropped: `effkit/workloads/bert/split.py`),
# not GLUE's dev set, which the `gpu` profile scores on. So their held-out accuracies differ by
# precision, by those masks, and by test-set noise: on `n` sentences an accuracy `p` has a standard
# error `sqrt(p(1-p)/n)` (the interval below adds both variances: conservative, as both models are
# scored on the same sentences). One seed and a few steps only: training noise across seeds is not
# covered, and "learns as well" holds at most up to this early point (the lesson 3 exercise's
# grader pairs runs of 48 steps on its synthetic task, not runs to the end of a real one).

# %%
n_eval = len(bert_fp32.eval_sets[bert_fp32.eval_split])
EVAL_SETS = {"dev": "effkit's held-out split of SST-2's training phrases, not GLUE's dev set",
             "test": "GLUE SST-2's dev set"}  # bert.build's eval_split -> where its rows come from
eval_set = ("synthetic sentences" if bert.PROFILES[PROFILE].data == "synthetic"
            else EVAL_SETS[bert_fp32.eval_split])
acc = {"fp32": bert_fp32.evaluate(), LOW_NAME: bert_low.evaluate()}
delta = acc[LOW_NAME] - acc["fp32"]
se = math.sqrt(sum(p * (1 - p) for p in acc.values()) / n_eval)
low, high = 100 * (delta - 1.96 * se), 100 * (delta + 1.96 * se)  # pp
steps_each = (bert_ab.pairs + 1) * k  # one warm-up burst, then one burst per pair
if high < 0:
    reading = f"{LOW_NAME} measurably lost accuracy here"
elif low < 0:
    reading = f"no loss detected; a loss up to {-low:.1f} pp is not ruled out by this interval"
else:
    reading = "no loss detected, and this interval rules one out"
accuracy_line = (f"held-out accuracy after the same {steps_each} training steps: fp32 {acc['fp32']:.1%}, {LOW_NAME} {acc[LOW_NAME]:.1%} on {n_eval} sentences ({eval_set});"
                 f" difference {100 * delta:+.1f} pp, 95% test-set interval {low:+.1f} to {high:+.1f} pp"
                 f" — {reading} ({steps_each} steps: early in training, not the end of it)")
print(accuracy_line)

# %%
bars = {f"linear {w}\n{LOW_NAME} vs fp32": r for w, r in sweep.items()}
bars[f"naive BERT\n{LOW_NAME} vs fp32"] = bert_ab
lesson.plot_ab(bars, f"Autocast {LOW_NAME} — {DEVICE_NAME}")
plt.show()
pays = [w for w, r in sweep.items() if r.verdict.word == "faster"]
costs = [w for w, r in sweep.items() if r.verdict.word == "slower"]
if pays:
    where = f"{LOW_NAME} paid for linear layers of width {', '.join(map(str, pays))}"
else:
    where = f"{LOW_NAME} did not pay for any linear-layer width we tried"
if costs:
    where += f"; it cost time at width {', '.join(map(str, costs))}"
print(f"On {DEVICE_NAME}: {where}.")
small_costs = [w for w in costs if w < max(SIZES["widths"])]
if small_costs:  # a CPU's losses too (the recorded cpu run lost at 64 and 256)
    print(f"At width {', '.join(map(str, small_costs))} {LOW_NAME} cost time. These A/Bs timed whole"
          " forward and backward passes: they show where it lost, not why. Per-op overhead (kernel"
          " launches on a GPU), autocast's casts, memory traffic: none of them is measured here (the"
          " profiler's per-op times, lesson 10, would say which).")
print(f"Naive BERT: {bert_ab.verdict}")
if here.mode != "off" and bert_ab.verdict.word == "slower":
    print(f"choose_precision(..., 'auto') picked {here.mode} for this device, and the A/B says"
          " it is slower here: a capability table is no substitute for measuring.")
elif here.mode == "off":
    print(f"choose_precision(..., 'auto') kept fp32 on this device (no native 16-bit unit);"
          f" the A/B of {LOW_NAME} says: {bert_ab.verdict.word}.")
if DEVICE.type == "cpu" and not bf16_flags:
    print("This CPU reports neither amx_bf16 nor avx512_bf16: no bf16 arithmetic in hardware, so"
          " PyTorch runs its bf16 ops in fallback kernels; the A/Bs above measured what that costs"
          " here, not which part of it.")

# %% [markdown]
# ## Your turn
#
# Pick a width the sweep did not try (or `MY_LOW = "fp16"` on a GPU) and A/B it yourself:
# set `MY_WIDTH`, run, and read the verdict; try widths between the sweep's until the verdict
# changes. Where is the break-even width on this device?

# %%
MY_WIDTH = None  # your turn: a width the sweep did not try, e.g. 512
MY_LOW = LOW_NAME  # the 16-bit type to A/B: "bf16" or "fp16"; its name labels the results
if MY_WIDTH is None:  # unset: say so, do not fail (the recorded run goes top to bottom)
    mine = None
    print(f"No width written: set MY_WIDTH above (the sweep tried {', '.join(map(str, sweep))}),"
          " then re-run this cell.")
else:
    mine = lesson.ab(f"{MY_WIDTH}x{MY_WIDTH} linear layer: fp32 vs {MY_LOW}",
                     matmul_work(MY_WIDTH, "fp32"), matmul_work(MY_WIDTH, MY_LOW),
                     pairs=SIZES["pairs"], a_label="fp32", b_label=MY_LOW, unit="rows/s")

# %% [markdown]
# ### In your own words
#
# Section 4 A/B'd fp32 against autocast on matmuls of growing width and on the naive BERT. Say in
# 2–3 sentences what you measured on this device: at which widths did 16 bits pay, and which 16-bit
# units does this device report (section 1 printed them)? One device cannot show what a device
# without such units would do: what would? What did these A/Bs *not* measure about why a small
# matmul gains little or loses, and what would measure it?
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=3)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
low_ops = [name for name, out in outputs.items() if out.dtype == LOW]
fp32_ops = [name for name, out in outputs.items() if out.dtype == torch.float32]
print(lesson.summary_header(3, DEVICE_NAME))
print(f"* auto precision here: {here.mode}; a simulated T4 gets fp16 + GradScaler")
print(f"* autocast {LOW}: {', '.join(low_ops)} in 16 bits; {', '.join(fp32_ops)} in fp32")
print(f"* tiny fp16 gradients: {zero_plain:.0%} zero unscaled,"
      f" {(scaled == 0).float().mean():.0%} zero with loss scaling")
print(f"* GradScaler (growth_interval {GROWTH_INTERVAL}): scale {history[0][1]:.0f} ->"
      f" {scaler.get_scale():.0f}, skipped steps {skips} (each halved the scale)")
print(f"* linear layers: {where}")
for width, result in sweep.items():
    print(f"  - width {width}: {result.verdict}")
print(f"* naive BERT {LOW_NAME} vs fp32: {bert_ab.verdict}")
print(f"* {accuracy_line}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson3/`: write the mixed-precision
# training step yourself (autocast, scaler, unscale before clipping) and check it with the
# grader.
#
# ### References
#
# * P. Micikevicius et al., *Mixed Precision Training*, ICLR 2018 — fp16 with fp32 master
#   weights and loss scaling.
# * D. Kalamkar et al., *A Study of BFLOAT16 for Deep Learning Training*, 2019.
# * PyTorch: [Automatic Mixed Precision (`torch.amp`)](https://pytorch.org/docs/stable/amp.html),
#   including the per-device op lists and `GradScaler`'s `growth_interval`;
#   [AMP recipe](https://pytorch.org/tutorials/recipes/recipes/amp_recipe.html).
# * NVIDIA, [Train with mixed precision](https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/).
# * Hugging Face: [`TrainingArguments` `bf16`/`fp16`](https://huggingface.co/docs/transformers/perf_train_gpu_one).
# * Intel, [AMX overview](https://www.intel.com/content/www/us/en/products/docs/accelerator-engines/advanced-matrix-extensions/overview.html)
#   — the CPU units that make bf16 matmuls fast.
#
# ### What to try next
#
# * Add `channels_last` to a conv net and measure again (`model.to(memory_format=...)`).
# * Check accuracy over whole runs and several seeds: `train_to_target` on both BERT trainers
#   (the cell in section 4 compares one seed after a few steps).
