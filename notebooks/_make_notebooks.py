"""Build the lesson notebooks 01-03 from the plain-text cells in this file.

Why a script: a notebook's JSON is hard to review; cells kept as text in one Python file are not.
Each lesson is a string in the "percent" format: a line ``# %% md`` or ``# %% code`` starts a
cell, optionally followed by tags in brackets (``# %% code [summary]``). After editing, run

    .venv/bin/python notebooks/_make_notebooks.py

and commit the notebooks with this file. They are written *without* outputs or execution counts
and with stable cell ids, so regenerating unchanged text gives byte-identical files.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
MARKER = re.compile(r"^# %% (md|code)(?: \[([\w ,-]+)\])?$")

# The one line every lesson uses to pick its profile (tests check it is there, once).
PROFILE_SWITCH = (
    'PROFILE = "gpu" if torch.cuda.is_available() else os.environ.get("EFFKIT_PROFILE", "smoke")'
)

# --------------------------------------------------------------------------------------------
# Lesson 1
# --------------------------------------------------------------------------------------------

LESSON_1 = r'''
# %% md
# Lesson 1 — Measure first

**Goal:** before changing anything, find out where a training run's time goes. On the naive
recipes of both course workloads (CIFAR-10 images, BERT on SST-2 sentences) we measure:

1. throughput — samples/s and tokens/s;
2. time-to-target, and why it beats epoch time; cost-to-target in dollars;
3. MFU — the share of the hardware's peak FLOP/s the model actually uses;
4. the share of time spent *waiting for data*;
5. a `torch.profiler` trace you can open in Perfetto;

and then let the numbers name the top bottleneck. Every figure is printed next to the device it
was measured on. Without a GPU the `smoke` profile runs (tiny models, synthetic data in the
real formats); on a GPU the same cells run the full `gpu` profile.

# %% code
%matplotlib inline
import itertools
import os
import statistics
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from tqdm.auto import tqdm

from effkit.abtest import compare
from effkit.measure import (
    DataWaitSplit,
    StepTimer,
    cost_to_target,
    device_name,
    mfu,
    peak_flops,
    train_flops,
)
from effkit.profiling import profile_steps
from effkit.workloads import bert, cifar
from effkit.workloads.common import train_to_target

# %% code
PROFILE = "gpu" if torch.cuda.is_available() else os.environ.get("EFFKIT_PROFILE", "smoke")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DEVICE_NAME = device_name(DEVICE)
# This lesson's experiment sizes per profile; the recipes' own sizes live in their profiles.
SIZES = {
    "smoke": dict(steps=3, repeats=3, pairs=3, batches=(250, 2000), ab_steps=1, epochs=2,
                  target=0.80, wait_steps=16),
    "cpu": dict(steps=5, repeats=3, pairs=3, batches=(500, 4000), ab_steps=1, epochs=8,
                target=None, wait_steps=None),
    "gpu": dict(steps=20, repeats=5, pairs=5, batches=(1024, 8192), ab_steps=10, epochs=12,
                target=None, wait_steps=None),
}[PROFILE]
DOLLARS_PER_HOUR = 3.00 if DEVICE.type == "cuda" else 0.10  # example prices: put in yours
print(f"profile {PROFILE!r} on {DEVICE_NAME}")

# %% md
## 1. Throughput: samples/s and tokens/s

A recipe never times itself: we time `train_steps` from the outside. Three rules make the
number honest:

* **synchronise** the device before reading the clock (`StepTimer` does): GPU work is
  asynchronous, and without a sync you time the kernel *launches*;
* **warm up** first: the first steps pay for worker start-up, allocation, autotuning;
* **repeat** and take the median: single timings on a shared machine vary by 20% and more.

# %% code
naive_cifar = cifar.build("naive", PROFILE)
naive_bert = bert.build("naive", PROFILE)
naive_cifar.describe()["model"], naive_bert.describe()["model"]

# %% code
def throughput(trainer, steps=SIZES["steps"], repeats=SIZES["repeats"]):
    """Median (samples/s, tokens/s) over `repeats` synchronised bursts of `steps` steps."""
    trainer.train_steps(1)  # warm-up: not timed
    timer, rates = StepTimer(trainer.device), []
    for _ in tqdm(range(repeats), desc=f"timing {type(trainer).__name__}"):
        with timer:
            work = trainer.train_steps(steps)
        rates.append((work.samples / timer.seconds, work.tokens / timer.seconds))
    return tuple(statistics.median(column) for column in zip(*rates, strict=True))

# %% code
cifar_sps, _ = throughput(naive_cifar)
bert_sps, bert_tps = throughput(naive_bert)
padded_length = naive_bert.describe()["mean_padded_length"]
padded_tps = bert_sps * padded_length  # every row is padded to the same length
pad_share = 1 - bert_tps / padded_tps
print(f"naive CIFAR: {cifar_sps:8.0f} images/s     on {DEVICE_NAME}")
print(f"naive BERT : {bert_sps:8.0f} sentences/s  on {DEVICE_NAME}")
print(f"             {bert_tps:8.0f} real tokens/s, {padded_tps:.0f} tokens/s with padding")
print(f"-> {pad_share:.0%} of the tokens the naive BERT computes on are padding")

# %% md
Tokens/s needs care: count the **real** tokens (the attention mask), not the padded
positions, or padding makes a slow recipe look fast.

## 2. Time-to-target, not epoch time

What you pay for is **time-to-target**: training time (evaluation excluded) until held-out
accuracy first reaches a target. Epoch time — or samples/s — is only half of it: the other half
is how many epochs you need. The classic trap is a bigger batch: more samples/s, fewer optimizer
steps per epoch. We take the fast CIFAR recipe you will build up to in later lessons and train
it at two batch sizes (learning rate scaled linearly with the batch), same epoch budget.

First, throughput, A/B: `compare` runs one burst of each, interleaved A B B A …, so drift on a
shared machine hits both equally, and reports the median ratio with a confidence interval.

# %% code
small, big = SIZES["batches"]
target = {} if SIZES["target"] is None else {"target": SIZES["target"]}

def fast_recipe(batch):
    return cifar.build("optimized", PROFILE, batch_size=batch, epochs=SIZES["epochs"], **target)

def ab(name, a, b, pairs=SIZES["pairs"]):
    """`compare(a, b)` with a progress bar; each callable returns its sample count."""
    bar = tqdm(total=pairs, desc=name, unit="pair")
    def tick(done, ratio):
        bar.update(1)
        bar.set_postfix(ratio=f"{ratio:.2f}x")
    result = compare(a, b, device=DEVICE, min_pairs=pairs, max_pairs=pairs, progress=tick)
    bar.close()
    return result

# %% code
a, b, k = fast_recipe(small), fast_recipe(big), SIZES["ab_steps"]
batch_ab = ab(f"batch {small} vs {big}",
              lambda: a.train_steps(k).samples, lambda: b.train_steps(k).samples)
print(f"batch {small}: {batch_ab.a_median:7.0f} images/s  on {DEVICE_NAME}")
print(f"batch {big}: {batch_ab.b_median:7.0f} images/s  on {DEVICE_NAME}")
print(f"batch {big} vs {small}: {batch_ab}")

# %% md
Now train each from scratch (`compare` advanced the schedules of `a` and `b`: build fresh ones)
and record accuracy against time. `train_to_target` evaluates every `eval_every` steps with the
clock stopped and remembers when the target was first reached.

# %% code
runs = {}
for batch in (small, big):
    trainer = fast_recipe(batch)
    runs[batch] = train_to_target(trainer, eval_every=trainer.eval_every,
                                  device_label=DEVICE_NAME)

# %% code
def fmt_s(seconds):
    return "not reached" if seconds is None else f"{seconds:.1f} s"

print(f"target {runs[small].target:.0%} held-out accuracy, on {DEVICE_NAME}")
for batch, run in runs.items():
    per_epoch = run.train_seconds / (run.samples / run.config["n_train"])
    spent = run.time_to_target_s or run.train_seconds
    print(f"batch {batch:5d}: epoch {per_epoch:5.1f} s, time-to-target "
          f"{fmt_s(run.time_to_target_s):>11}, cost ${cost_to_target(spent, DOLLARS_PER_HOUR):.5f}"
          f" at ${DOLLARS_PER_HOUR:.2f}/h, final accuracy {run.accuracy:.1%}")

# %% code
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for batch, run in runs.items():
    seconds = [h["seconds"] for h in run.history]
    epochs = [h["step"] * batch / run.config["n_train"] for h in run.history]
    accuracy = [h["accuracy"] for h in run.history]
    axes[0].plot(seconds, accuracy, "o-", label=f"batch {batch}")
    axes[1].plot(epochs, accuracy, "o-", label=f"batch {batch}")
for ax, xlabel in zip(axes, ("training time (s)", "epochs"), strict=True):
    ax.axhline(runs[small].target, color="gray", ls="--", label="target")
    ax.set(xlabel=xlabel, ylabel="held-out accuracy")
    ax.legend()
fig.suptitle(f"Time-to-target vs epochs — {DEVICE_NAME}")
plt.show()

# %% code
faster = batch_ab.ratio > 1
ttt_small, ttt_big = runs[small].time_to_target_s, runs[big].time_to_target_s
big_slower = ttt_small is not None and (ttt_big is None or ttt_big > ttt_small)
print(f"batch {big}: {batch_ab.ratio:.2f}x the samples/s of batch {small};"
      f" time-to-target {fmt_s(ttt_big)} against {fmt_s(ttt_small)}")
if faster and big_slower:
    print("-> higher throughput, yet slower to the target: epoch time misled us.")
else:
    print("-> this time time-to-target follows throughput; compare the epochs each needed.")

# %% md
Cost-to-target is time-to-target times the price per hour (`cost_to_target`). A run that never
reaches the target has no cost-to-target: all its money was spent for nothing. Put your own
price in `DOLLARS_PER_HOUR`: a cloud H100 rents for a few dollars an hour, 2 vCPUs for cents.

## 3. MFU: how much of the hardware do we use?

Model FLOPs utilisation = model FLOPs per second achieved / the device's peak FLOP/s.
`train_flops` counts the FLOPs of one training step (forward *and* backward) with
`torch.utils.flop_counter`; the values in the batch do not matter, only its shape.

# %% code
model, loss_fn = naive_cifar.model, naive_cifar.loss_fn
x = torch.randn(8, 3, 32, 32, device=DEVICE)
y = torch.zeros(8, dtype=torch.int64, device=DEVICE)
flops_per_image = train_flops(lambda: loss_fn(model(x), y).backward()) / len(x)
model.zero_grad(set_to_none=True)
print(f"naive CIFAR: {flops_per_image / 1e6:.1f} MFLOP per training image (fwd + bwd)")
print(f"naive BERT : {naive_bert.flops_per_sample / 1e6:.1f} MFLOP per sentence, "
      f"padded to {padded_length:.0f} tokens")

# %% md
`peak_flops` looks the device name up in a table of GPU datasheet peaks (dense bf16/fp16).
CPUs are not in it: it returns `None`, and `mfu` returns `None` too. Pass your own peak
instead. For a CPU: cores × clock × FLOPs per cycle per core — with AVX-512 two FMA units do
2 × 16 fp32 multiply-adds = 64 FLOP per cycle (AVX2: 32). It is an estimate: a VM may report
its base clock, and two "threads" may be one physical core.

# %% code
def cpu_peak_flops():
    """fp32 peak of the threads torch uses: threads x clock x FLOPs per cycle (estimate)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    mhz = [float(line.split(":")[1]) for line in info.splitlines() if line.startswith("cpu MHz")]
    per_cycle = 64 if " avx512f" in info else 32  # 2 FMA units x 16 or 8 fp32 lanes x 2
    return torch.get_num_threads() * max(mhz, default=2500.0) * 1e6 * per_cycle

peak = peak_flops(DEVICE_NAME)
print(f"peak_flops({DEVICE_NAME!r}) = {peak}")
if peak is None:
    peak = cpu_peak_flops()
cifar_mfu = mfu(flops_per_image, cifar_sps, peak)
bert_mfu = mfu(naive_bert.flops_per_sample, bert_sps, peak)
print(f"peak used: {peak / 1e12:.2f} TFLOP/s  ({DEVICE_NAME})")
print(f"MFU naive CIFAR: {cifar_mfu:.2%}")
print(f"MFU naive BERT : {bert_mfu:.2%}  counting padding;"
      f" {bert_mfu * (1 - pad_share):.2%} on real tokens only")

# %% md
A low MFU says how much room there is, not where the time goes. Quote MFU against the dense
peak of the precision the hardware offers (on GPUs the table holds bf16/fp16 tensor-core peaks,
so an fp32 recipe scores low *on purpose*: that is the headroom mixed precision unlocks).

## 4. How long do we wait for data?

`DataWaitSplit` wraps the batch iterator and splits loop time into time spent inside `next()`
(waiting for the input pipeline) and everything else. Here is the naive CIFAR recipe's own
step — fp32 forward, loss, backward, SGD — over a fresh epoch (`wait_steps` of it in `smoke`).

# %% code
split = DataWaitSplit(DEVICE)
optimizer = naive_cifar.optimizer
steps = itertools.islice(naive_cifar.pipeline, SIZES["wait_steps"])  # None: the whole epoch
for x, y in tqdm(split.wrap(steps), total=SIZES["wait_steps"] or len(naive_cifar.pipeline)):
    loss = loss_fn(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print(f"naive CIFAR on {DEVICE_NAME}: {split.total_s:.1f} s, of which "
      f"{split.data_s:.1f} s waiting for data = {split.data_share:.0%}")

# %% md
Let the wrapped iterator run to its end (here `islice` ends it): `DataWaitSplit` books the
total when the iterator is exhausted — `break` out of the loop and `total_s` stays 0. A fresh
epoch also restarts the DataLoader's worker processes: a real cost of this recipe, counted.

## 5. A profiler trace

`profile_steps` runs a few steps under `torch.profiler` (skipping `wait` steps, tracing but
dropping `warmup` steps), writes a Chrome-trace JSON and returns the top operators by self time.
Never quote throughput measured under the profiler: it adds overhead.

# %% code
trace_dir = Path("..") / "runs" / "lesson1"
prof = profile_steps(lambda: naive_cifar.train_steps(1), trace_dir, wait=1, warmup=1, active=3)
print(f"trace written to {prof.trace.resolve()}")
print(f"top operators by self time, 3 steps on {DEVICE_NAME}:")
for name, ms in prof.top_ops[:8]:
    print(f"{ms:10.1f} ms  {name}")

# %% md
**Open the trace:** go to <https://ui.perfetto.dev>, click *Open trace file* and pick
`trace.json` (it is read in your browser, not uploaded). Zoom with W/S, pan with A/D; each
`ProfilerStep#` band is one step. Look for gaps where the main thread waits in the DataLoader's
`__next__`. TensorBoard works too: `pip install tensorboard torch-tb-profiler`, copy the file to
`LOGDIR/run1/worker0.pt.trace.json` and run `tensorboard --logdir LOGDIR` (the *PyTorch
Profiler* tab); `chrome://tracing` opens it as well.

## 6. Name the bottleneck

Rank what we measured as *wasted fractions* of the work, and let the data speak.

# %% code
waste = {
    "CIFAR: time waiting for the input pipeline": split.data_share,
    "BERT: compute spent on padding tokens": pad_share,
}
ranked = sorted(waste.items(), key=lambda item: item[1], reverse=True)
for what, share in ranked:
    print(f"{share:6.0%}  {what}")
top_bottleneck = ranked[0][0]
top_op = prof.top_ops[0][0]
print(f"Top bottleneck on {DEVICE_NAME}: {top_bottleneck} ({ranked[0][1]:.0%});"
      f" the profiler's most expensive operator: {top_op}")

# %% code
fig, ax = plt.subplots(figsize=(7, 2.5))
ax.barh([what for what, _ in ranked][::-1], [100 * share for _, share in ranked][::-1])
ax.set(xlabel="% wasted", xlim=(0, 100), title=f"Measured waste — {DEVICE_NAME}")
plt.show()

# %% md
## Summary

# %% code [summary]
print(f"Summary — lesson 1, profile {PROFILE!r}, measured on {DEVICE_NAME}")
print(f"* throughput: naive CIFAR {cifar_sps:.0f} images/s; naive BERT {bert_sps:.0f}"
      f" sentences/s = {bert_tps:.0f} real tokens/s ({pad_share:.0%} of tokens are padding)")
print(f"* batch {big} vs {small}: {batch_ab.ratio:.2f}x the samples/s, time-to-target"
      f" {fmt_s(ttt_big)} vs {fmt_s(ttt_small)}")
print(f"* cost-to-target at ${DOLLARS_PER_HOUR:.2f}/h (batch {small}):"
      f" ${cost_to_target(ttt_small or runs[small].train_seconds, DOLLARS_PER_HOUR):.5f}")
print(f"* MFU against {peak / 1e12:.2f} TFLOP/s: CIFAR {cifar_mfu:.2%}, BERT {bert_mfu:.2%}")
print(f"* data wait: {split.data_share:.0%} of the naive CIFAR loop")
print(f"* top bottleneck: {top_bottleneck}")

# %% md
### What to try next

* Do the exercise in `exercises/lesson1/`, then check yourself with
  `python -m grader check` on your notebook.
* Lesson 2 attacks the input pipeline (the data wait above); lesson 3 mixed precision.
* Open the trace in Perfetto and find one step's data wait by eye.
* Re-run with `EFFKIT_PROFILE=cpu` (real data if you have it), or on a GPU, and see which
  bottleneck wins there — it is rarely the same one.
'''

# --------------------------------------------------------------------------------------------
# Lesson 2
# --------------------------------------------------------------------------------------------

LESSON_2 = r'''
# %% md
# Lesson 2 — Feed the accelerator

**Goal:** make the naive CIFAR-10 recipe stop waiting for data, one change at a time, and
prove with measurements that each change made training faster — and did not change accuracy.
Lesson 1 measured how much of a naive epoch is spent inside the DataLoader's `next()`. Here we:

1. tune the `DataLoader`: `num_workers`, `persistent_workers`, `prefetch_factor`, and
   `pin_memory` with `non_blocking` copies;
2. cache work that does not change between epochs (BERT: tokenize once, not in the loop);
3. keep the whole dataset on the device as uint8 and augment a batch at a time *there*;

measuring every step A/B with `effkit.abtest.compare` on the same recipe, only the input
pipeline swapped (`cifar.build(..., pipeline=...)`).

# %% code
%matplotlib inline
import functools
import itertools
import os
import statistics

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from effkit.abtest import compare
from effkit.measure import StepTimer, device_name
from effkit.workloads import bert, cifar
from effkit.workloads.bert import batching
from effkit.workloads.cifar import DevicePipeline, TorchvisionPipeline
from effkit.workloads.common import train_to_target

# %% code
PROFILE = "gpu" if torch.cuda.is_available() else os.environ.get("EFFKIT_PROFILE", "smoke")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DEVICE_NAME = device_name(DEVICE)
# This lesson's experiment sizes per profile; the recipe's own sizes live in its profile.
SIZES = {
    "smoke": dict(steps=4, pairs=3, sweep_batches=6, text_batches=8, epochs=1, seeds=1),
    "cpu": dict(steps=8, pairs=3, sweep_batches=10, text_batches=20, epochs=None, seeds=2),
    "gpu": dict(steps=40, pairs=5, sweep_batches=40, text_batches=50, epochs=5, seeds=2),
}[PROFILE]
print(f"profile {PROFILE!r} on {DEVICE_NAME}, {os.cpu_count()} CPU cores")

# %% md
## The baseline and how we measure

Every variant is a *pipeline class* handed to the same naive recipe. `compare(a, b)` runs a
burst of training steps of each, interleaved A B B A …, and reports the median speed ratio B/A
with a 95% confidence interval. Training steps, not just batches: a pipeline that is fast on its
own but steals the cores the model needs is not faster. How much there is to win depends on how
long the step waits for data (lesson 1's data-wait share) — measure, don't assume.

# %% code
def ab(name, a, b, pairs=SIZES["pairs"]):
    """A/B throughput of two trainers, bursts of SIZES["steps"] steps, with a progress bar."""
    bar = tqdm(total=pairs, desc=name, unit="pair")
    def tick(done, ratio):
        bar.update(1)
        bar.set_postfix(ratio=f"{ratio:.2f}x")
    result = compare(lambda: a.train_steps(SIZES["steps"]).samples,
                     lambda: b.train_steps(SIZES["steps"]).samples,
                     device=DEVICE, min_pairs=pairs, max_pairs=pairs, progress=tick)
    bar.close()
    print(f"{name} on {DEVICE_NAME}: {result.a_median:.0f} -> {result.b_median:.0f} images/s;"
          f" {result}")
    return result

naive = cifar.build("naive", PROFILE)
naive.describe()["pipeline"], naive.describe()["num_workers"], naive.describe()["batch_size"]

# %% md
## 1. Tune the DataLoader

The naive pipeline (`TorchvisionPipeline`) runs PIL crops and flips per image in 2 worker
processes. Here it is with the `DataLoader`'s other knobs exposed — same transforms:

* `num_workers`: processes preparing batches in parallel with training;
* `persistent_workers`: keep them alive between epochs instead of forking new ones;
* `prefetch_factor`: batches each worker prepares ahead (default 2);
* `pin_memory` + `non_blocking=True`: put batches in page-locked host memory, so the copy to the
  GPU can run asynchronously, overlapped with compute.

# %% code
class LoaderPipeline(TorchvisionPipeline):
    """TorchvisionPipeline with the DataLoader knobs exposed (same per-image transforms)."""

    def __init__(self, dataset, batch_size, device, seed=0, *, num_workers=2,
                 persistent_workers=False, prefetch_factor=None, pin_memory=False):
        super().__init__(dataset, batch_size, device, seed, num_workers=num_workers)
        self.non_blocking = pin_memory
        self.loader = DataLoader(
            self.dataset, batch_size=batch_size, shuffle=True, generator=self.generator,
            num_workers=num_workers, pin_memory=pin_memory,
            persistent_workers=persistent_workers and num_workers > 0,
            prefetch_factor=prefetch_factor if num_workers > 0 else None)

    def __iter__(self):
        for x, y in self.loader:
            yield (x.to(self.device, non_blocking=self.non_blocking),
                   y.to(self.device, non_blocking=self.non_blocking))

# %% md
How many workers? Time the loader alone (no model) for a few counts, skipping the first batch
(worker start-up):

# %% code
train_set = cifar.load_cifar(cifar.prepare_data(PROFILE), train=True)

def loader_images_per_s(workers, batches=SIZES["sweep_batches"]):
    pipe = LoaderPipeline(train_set, 128, DEVICE, num_workers=workers, prefetch_factor=4)
    stream = iter(pipe)
    next(stream)  # start-up: not timed
    with StepTimer(DEVICE) as timer:
        images = sum(len(y) for _, y in itertools.islice(stream, batches))
    return images / timer.seconds

# More worker processes than cores only makes them fight (PyTorch warns about it, too).
counts = sorted({0, 1, 2, 4, 8, 12, 16} & set(range(os.cpu_count() + 1)))
sweep = {w: loader_images_per_s(w) for w in tqdm(counts, desc="num_workers")}
for w, speed in sweep.items():
    print(f"num_workers={w:2d}: {speed:7.0f} images/s from the loader alone, on {DEVICE_NAME}")
best_workers = max(sweep, key=sweep.get)

# %% md
On a GPU machine more workers keep helping up to roughly the number of free cores. On a 2-core
CPU the workers compete with the model for the same two cores, so the loader-alone winner is
only a guess: the A/B with training running decides.

Pinned memory only matters when there is a copy to a GPU. With the CPU as the training device,
`.to(DEVICE)` returns the very same tensor — no copy, nothing to overlap — and PyTorch warns
that pinning needs an accelerator. So we pin only on CUDA:

# %% code
t = torch.zeros(4)
print(f"on {DEVICE_NAME}: .to(DEVICE) returns the same tensor: {t.to(DEVICE) is t}")
PIN = DEVICE.type == "cuda"
tuned_loader = functools.partial(LoaderPipeline, num_workers=best_workers,
                                 persistent_workers=True, prefetch_factor=4, pin_memory=PIN)
if best_workers:
    tuned_desc = f"{best_workers} workers, persistent, prefetch 4, pin_memory={PIN}"
else:  # batches are made in the training process: nothing to keep alive or prefetch
    tuned_desc = f"no worker processes (persistent/prefetch do not apply), pin_memory={PIN}"
print(f"tuned DataLoader: {tuned_desc}")

# %% code
tuned = cifar.build("naive", PROFILE, pipeline=tuned_loader)
loader_ab = ab("naive -> tuned DataLoader", naive, tuned)

# %% md
## 2. Cache what does not change: tokenize once

The naive BERT recipe tokenizes the raw sentences of every batch, every epoch, inside its
DataLoader's `collate_fn`. The token ids never change: tokenize the corpus once and build each
batch from the cached ids. To isolate *caching* we produce exactly the same tensors both ways
(padded to 128; a later lesson drops the padding).

# %% code
spec = bert.PROFILES[PROFILE]
sst2 = bert.load_sst2(bert.prepare_data(PROFILE))["train"]
# A WordPiece tokenizer trained on the training sentences (cached on disk after the first call).
tokenizer = bert.trained_wordpiece(sst2.texts, spec.vocab_size)
collate = batching.TokenizeAndPadCollate(tokenizer, spec.max_length)
with StepTimer() as once:
    corpus = batching.encode_once(tokenizer, sst2.texts, sst2.labels, spec.max_length)
print(f"tokenizing all {len(corpus)} training sentences once: {once.seconds:.2f} s"
      f" on {device_name('cpu')}")

# %% code
def cached_batch(rows, length=spec.max_length):
    """The collate_fn's tensors, built from cached ids (pad_batch pads to the longest row)."""
    batch = batching.pad_batch(corpus, rows)
    pad = length - batch["input_ids"].shape[1]
    batch["input_ids"] = F.pad(batch["input_ids"], (0, pad), value=corpus.pad_id)
    batch["attention_mask"] = F.pad(batch["attention_mask"], (0, pad))
    return batch

generator = torch.Generator().manual_seed(0)
index_batches = [torch.randperm(len(corpus), generator=generator)[: spec.naive_batch].numpy()
                 for _ in range(SIZES["text_batches"])]
raw = collate([(sst2.texts[i], sst2.labels[i]) for i in index_batches[0]])
same = all(torch.equal(raw[k], cached_batch(index_batches[0])[k])
           for k in ("input_ids", "attention_mask", "labels"))
print(f"cached batch identical to the tokenized one: {same}")

# %% code
def tokenize_in_loop():
    for rows in index_batches:
        collate([(sst2.texts[i], sst2.labels[i]) for i in rows])
    return len(index_batches) * spec.naive_batch

def from_cache():
    for rows in index_batches:
        cached_batch(rows)
    return len(index_batches) * spec.naive_batch

text_ab = compare(tokenize_in_loop, from_cache, min_pairs=SIZES["pairs"], max_pairs=10)
print(f"batches/s of {spec.naive_batch} sentences on {device_name('cpu')}: "
      f"{text_ab.a_median / spec.naive_batch:.0f} tokenizing -> "
      f"{text_ab.b_median / spec.naive_batch:.0f} cached; {text_ab}")

# %% md
The one-off cost above buys every later epoch its batches for free. In the naive recipe this
work runs in worker processes: on a GPU box it costs cores the other pipelines need; on a 2-core
CPU it competes with the model itself.

## 3. The whole dataset on the device, augmented there

CIFAR-10 is 150 MB as uint8 — it fits on any accelerator. `DevicePipeline` keeps it there,
pre-padded, and does shuffle + random crop + flip for a whole batch with one indexing op, then
normalises in the training dtype. No workers, no per-image Python, no host-to-device copies.
Its defaults reproduce the naive augmentation (4 px zero padding, random flips).

# %% code
on_device = cifar.build("naive", PROFILE, pipeline=DevicePipeline)
device_ab = ab("tuned DataLoader -> DevicePipeline", tuned, on_device)

# %% code
variants = ["naive\n(2 workers)", f"tuned DataLoader\n({best_workers} workers)",
            "DevicePipeline"]
speeds = [loader_ab.a_median, loader_ab.b_median, device_ab.b_median]
fig, ax = plt.subplots(figsize=(7, 3.5))
bars = ax.bar(variants, speeds, color=["tab:gray", "tab:blue", "tab:green"])
ax.bar_label(bars, labels=[f"{s:.0f}" for s in speeds])
ax.set(ylabel="training images/s (median)",
       title=f"Naive CIFAR recipe, input pipeline only changed — {DEVICE_NAME}")
plt.show()
total_speedup = loader_ab.ratio * device_ab.ratio
print(f"naive -> DevicePipeline: {total_speedup:.2f}x (product of the two median ratios)")

# %% md
## 4. Same accuracy?

A faster pipeline must feed the *same* training: same augmentation, every image once per epoch.
Train the recipe from scratch with the naive pipeline and with `DevicePipeline` (same seeds)
and compare held-out accuracy. Two kinds of noise blur the answer: the test set (an accuracy
`p` on `n` images has a standard error of `sqrt(p(1-p)/n)`), and training itself — other random
crops and flips give a different model, by several points in a run this short. One run per
pipeline only rules out test-set noise; to rule out training noise, train several seeds
(`SIZES["seeds"]`) and compare the means against their spread.

# %% code
epochs = {} if SIZES["epochs"] is None else {"epochs": SIZES["epochs"]}
accuracy = {"naive": [], "DevicePipeline": []}
runs = [(seed, name) for seed in range(SIZES["seeds"]) for name in accuracy]
for seed, name in tqdm(runs, desc="train to the end", unit="run"):
    pipeline = TorchvisionPipeline if name == "naive" else DevicePipeline
    trainer = cifar.build("naive", PROFILE, pipeline=pipeline, seed=seed, **epochs)
    result = train_to_target(trainer, eval_every=trainer.eval_every, progress=False,
                             device_label=DEVICE_NAME)
    accuracy[name].append(result.accuracy)
    print(f"seed {seed}, {name:15}: accuracy {result.accuracy:.1%} after"
          f" {result.train_seconds:.1f} s of training ({result.steps} steps), {DEVICE_NAME}")

# %% code
n_test = result.config["n_test"]
base, fast = (statistics.mean(accuracy[name]) for name in ("naive", "DevicePipeline"))
delta_pp = 100 * (fast - base)
if SIZES["seeds"] > 1:  # seed-to-seed spread: training noise and test-set noise together
    se_pp = 100 * sum(statistics.variance(a) / len(a) for a in accuracy.values()) ** 0.5
    noise = "seed-to-seed noise"
else:
    se_pp = 100 * (2 * base * (1 - base) / n_test) ** 0.5
    noise = "test-set noise (one seed: training noise not covered)"
same = abs(delta_pp) <= 2 * se_pp
verdict = f"within {noise}" if same else f"beyond {noise}: train more seeds before concluding"
print(f"DevicePipeline - naive: {delta_pp:+.1f} pp, standard error {se_pp:.1f} pp: {verdict}")

# %% md
## Summary

# %% code [summary]
print(f"Summary — lesson 2, profile {PROFILE!r}, measured on {DEVICE_NAME}")
print(f"* naive recipe, 2-worker DataLoader: {loader_ab.a_median:.0f} images/s")
print(f"* tuned DataLoader ({tuned_desc}):"
      f" {loader_ab.ratio:.2f}x [{loader_ab.ci_low:.2f}, {loader_ab.ci_high:.2f}]")
print(f"* DevicePipeline on top: {device_ab.ratio:.2f}x"
      f" [{device_ab.ci_low:.2f}, {device_ab.ci_high:.2f}]; {total_speedup:.2f}x overall")
print(f"* BERT batches from cached ids: {text_ab.ratio:.1f}x faster than tokenizing each time")
print(f"* accuracy naive {base:.1%} vs DevicePipeline {fast:.1%} ({SIZES['seeds']} seed(s)):"
      f" {delta_pp:+.1f} pp, {verdict}")

# %% md
### What to try next

* The exercise in `exercises/lesson2/`: write your own on-device pipeline (`FastPipeline`);
  the grader times it against the naive one and checks the accuracy.
* Give `DevicePipeline` a lower-precision `dtype` (the optimized recipe feeds bf16 images to a
  bf16 model) and measure with `compare`.
* On a GPU, measure pinned vs pageable memory on its own: the copy is where it shows.
'''

# --------------------------------------------------------------------------------------------
# Lesson 3
# --------------------------------------------------------------------------------------------

LESSON_3 = r'''
# %% md
# Lesson 3 — Mixed precision

**Goal:** run the bulk of the arithmetic in 16-bit floats where the hardware is faster at it,
keep what needs range and precision in fp32, and know when it does not pay. We will:

1. pick fp16 or bf16 per device with `effkit.amp.choose_precision` (and simulate a T4);
2. see what `torch.autocast` runs in low precision and what it keeps in fp32;
3. watch an fp16 gradient underflow to zero — and survive with loss scaling; watch the
   `GradScaler` skip a step on `inf` and halve its scale;
4. measure fp32 against autocast, A/B, on a conv net and on the naive BERT recipe.

# %% code
%matplotlib inline
import os

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from effkit.abtest import compare
from effkit.amp import DeviceCaps, choose_precision
from effkit.measure import device_name
from effkit.workloads import bert

# %% code
PROFILE = "gpu" if torch.cuda.is_available() else os.environ.get("EFFKIT_PROFILE", "smoke")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DEVICE_NAME = device_name(DEVICE)
# This lesson's experiment sizes per profile; the BERT recipe's own sizes live in its profile.
SIZES = {
    "smoke": dict(conv_batch=64, conv_width=32, conv_steps=3, bert_steps=3, pairs=3),
    "cpu": dict(conv_batch=128, conv_width=64, conv_steps=5, bert_steps=5, pairs=5),
    "gpu": dict(conv_batch=512, conv_width=256, conv_steps=20, bert_steps=20, pairs=5),
}[PROFILE]
print(f"profile {PROFILE!r} on {DEVICE_NAME}")

# %% md
## 1. fp16 or bf16?

Both are 16 bits. **fp16** has 10 mantissa bits but only 5 exponent bits: small values
underflow and large ones overflow, so training needs *loss scaling*. **bf16** keeps fp32's 8
exponent bits (same range) with 7 mantissa bits: no scaler, a little less precision. Use bf16
where the hardware has it (Ampere and later GPUs, recent CPUs), fp16 + `GradScaler` where it
does not (T4, V100).

# %% code
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    info = torch.finfo(dtype)
    print(f"{str(dtype):15} max {info.max:9.3g}   smallest normal {info.tiny:9.3g}"
          f"   step at 1.0: {info.eps:.3g}")

# %% md
`choose_precision(device, "auto")` picks for the device it detects. Hand it a `DeviceCaps` to
see what it would pick on hardware you do not have:

# %% code
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
print(f"this lesson runs {here.mode} on {DEVICE_NAME}")
LOW = here.dtype or torch.bfloat16  # the 16-bit type of this device

# %% md
## 2. What autocast runs in low precision

Autocast does not convert the model. Parameters stay fp32 ("master weights"); each op casts its
inputs on the fly according to per-device lists: matmuls and convolutions run in 16 bits, ops
that need range or accumulate many values (losses; on CUDA also softmax, layer norm, exp, log)
run in fp32, and mixed-dtype arithmetic promotes to the wider type. Ops on neither list follow
their input. What does *this* device do?

# %% code
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

# %% md
One autocast context around the **forward pass and the loss**, never around `backward()`:
backward runs each op in the dtype its forward used.

## 3. Underflow, overflow and the loss scale

fp16's smallest positive value is about 6e-8. A gradient below that becomes exactly zero, and
the weights stop learning. Here a small loss (think: late in training, or a loss averaged over
many tokens) flows back through one fp16 layer:

# %% code
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
print(f"fp16, no scaling : {(plain == 0).float().mean():.0%} of the weight gradients are zero")
print(f"fp16, scale 2^16 : {(scaled == 0).float().mean():.0%} zero, max relative error vs fp32 "
      f"{((scaled - reference).abs() / reference.abs()).max():.1e}")

# %% md
`GradScaler` multiplies the loss by a large scale before `backward()`, so gradients live in
fp16's range, and divides them back (`unscale_`, in fp32) before the optimizer uses them. Which
scale? The scaler probes: it doubles the scale after every `growth_interval` clean steps, and
when a gradient overflows to `inf` it **skips** that optimizer step and halves the scale. So it
settles just below the largest scale the gradients tolerate. A short run, starting low, with one
loss spike (a bad batch) injected at step 20:

# %% code
net = nn.Linear(16, 1).to(DEVICE)
optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(DEVICE.type, init_scale=2.0**10, growth_interval=3)
history = []  # (step, scale used, skipped?)
for step in range(40):
    spike = 1e3 if step == 20 else 1.0
    with torch.autocast(DEVICE.type, dtype=torch.float16):
        loss = (net(inputs * spike).float() ** 2).mean()
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scale, weight = scaler.get_scale(), net.weight.detach().clone()
    scaler.step(optimizer)  # skipped when any gradient is inf/NaN
    scaler.update()  # halves the scale after an overflow, grows it after clean steps
    history.append((step, scale, torch.equal(weight, net.weight.detach())))
scales = [scale for _, scale, _ in history] + [scaler.get_scale()]
for step, scale, skipped in history:
    if skipped:
        print(f"step {step:2d}: scale {scale:8.0f} -> inf gradients, step SKIPPED,"
              f" next scale {scales[step + 1]:.0f}")

# %% code
fig, ax = plt.subplots(figsize=(8, 3))
steps = [s for s, _, _ in history]
ax.step(steps, [scale for _, scale, _ in history], where="post", label="loss scale")
ax.scatter([s for s, _, k in history if k], [c for _, c, k in history if k],
           color="red", zorder=3, label="step skipped")
ax.set(yscale="log", xlabel="step", ylabel="scale", title=f"GradScaler at work — {DEVICE_NAME}")
ax.legend()
plt.show()

# %% md
bf16 needs none of this: its range is fp32's. A gradient of 1e-8 and a value of 2e7 both
survive in bf16, while fp16 flushes the first to zero and turns the second into `inf`:

# %% code
values = torch.tensor([1e-8, 2e7])
print(f"fp16: {values.to(torch.float16).tolist()}   bf16: {values.to(torch.bfloat16).tolist()}")

# %% md
## 4. When does it pay?

16-bit math is faster only where the hardware has 16-bit units for the op *and* the op is
big enough for arithmetic to dominate. Otherwise autocast only adds casts. Measure, A/B: first a
small conv net (the CIFAR kind), fp32 against autocast in this device's 16-bit type.

# %% code
def conv_net(width=SIZES["conv_width"]):
    def block(c_in, c_out):
        return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*block(3, width), *block(width, 2 * width), *block(2 * width, 2 * width),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10))

def conv_trainer(policy):
    """Training steps on a fixed batch: compute only, no input pipeline."""
    torch.manual_seed(0)
    model = conv_net().to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = policy.make_scaler()  # enabled only for fp16
    images = torch.randn(SIZES["conv_batch"], 3, 32, 32, device=DEVICE)
    targets = torch.randint(0, 10, (SIZES["conv_batch"],), device=DEVICE)
    def steps():
        for _ in range(SIZES["conv_steps"]):
            with policy.autocast():
                loss = F.cross_entropy(model(images), targets)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return SIZES["conv_steps"] * len(targets)
    return steps

def ab(name, a, b):
    bar = tqdm(total=SIZES["pairs"], desc=name, unit="pair")
    def tick(done, ratio):
        bar.update(1)
        bar.set_postfix(ratio=f"{ratio:.2f}x")
    result = compare(a, b, device=DEVICE, min_pairs=SIZES["pairs"], max_pairs=SIZES["pairs"],
                     progress=tick)
    bar.close()
    print(f"{name} on {DEVICE_NAME}: {result.a_median:.0f} -> {result.b_median:.0f} samples/s;"
          f" {result}")
    return result

fp32 = choose_precision(DEVICE, "off")
conv_ab = ab(f"conv net fp32 -> {here.mode}", conv_trainer(fp32), conv_trainer(here))

# %% md
Now the naive BERT recipe, nothing changed but `precision=`. Its work is matrix
multiplications (attention and MLP), the op 16-bit units are built for — *if* the matrices are
big enough to outweigh the casts: the `smoke` model is 64 wide, bert-base (`gpu`) 768.

# %% code
bert_fp32 = bert.build("naive", PROFILE, precision="off")
bert_low = bert.build("naive", PROFILE, precision=here.mode)
k = SIZES["bert_steps"]
bert_ab = ab(f"naive BERT fp32 -> {here.mode}",
             lambda: bert_fp32.train_steps(k).samples, lambda: bert_low.train_steps(k).samples)

# %% code
def verdict(result):
    if result.faster():
        return f"pays: {result.ratio:.2f}x"
    if result.slower():
        return f"does not pay: {result.ratio:.2f}x (slower)"
    return f"no clear difference: {result.ratio:.2f}x"

fig, ax = plt.subplots(figsize=(6, 3))
names = [f"conv net\n{here.mode} vs fp32", f"naive BERT\n{here.mode} vs fp32"]
ratios = [conv_ab.ratio, bert_ab.ratio]
errors = [[r.ratio - r.ci_low for r in (conv_ab, bert_ab)],
          [r.ci_high - r.ratio for r in (conv_ab, bert_ab)]]
ax.bar(names, ratios, yerr=errors, capsize=6, color=["tab:orange", "tab:blue"])
ax.axhline(1.0, color="gray", ls="--")
ax.set(ylabel="speed-up (median, 95% CI)", title=f"Autocast {here.mode} — {DEVICE_NAME}")
plt.show()
print(f"conv net: {verdict(conv_ab)};  naive BERT: {verdict(bert_ab)}")

# %% md
## Summary

# %% code [summary]
low_ops = [name for name, out in outputs.items() if out.dtype == LOW]
fp32_ops = [name for name, out in outputs.items() if out.dtype == torch.float32]
skips = [step for step, _, skipped in history if skipped]
print(f"Summary — lesson 3, profile {PROFILE!r}, measured on {DEVICE_NAME}")
print(f"* auto precision here: {here.mode}; a simulated T4 gets fp16 + GradScaler")
print(f"* autocast {LOW}: {', '.join(low_ops)} in 16 bits; {', '.join(fp32_ops)} in fp32")
print(f"* tiny fp16 gradients: {(plain == 0).float().mean():.0%} zero unscaled,"
      f" {(scaled == 0).float().mean():.0%} zero with loss scaling")
print(f"* GradScaler: scale {history[0][1]:.0f} -> {scaler.get_scale():.0f},"
      f" skipped steps {skips} (each halved the scale)")
print(f"* conv net {here.mode} vs fp32: {verdict(conv_ab)}"
      f" [{conv_ab.ci_low:.2f}, {conv_ab.ci_high:.2f}]")
print(f"* naive BERT {here.mode} vs fp32: {verdict(bert_ab)}"
      f" [{bert_ab.ci_low:.2f}, {bert_ab.ci_high:.2f}]")

# %% md
### What to try next

* The exercise in `exercises/lesson3/`: write the mixed-precision training step yourself
  (autocast, scaler, unscale before clipping) and check it with the grader.
* Add `channels_last` to the conv net and measure again (`model.to(memory_format=...)`).
* Check that bf16 training reaches the same accuracy: `train_to_target` on both BERT trainers.
'''

LESSONS = {
    "01_measure_first": LESSON_1,
    "02_feed_the_accelerator": LESSON_2,
    "03_mixed_precision": LESSON_3,
}


def parse_cells(text: str) -> list[tuple[str, str, list[str]]]:
    """Split a percent-format lesson into (kind, source, tags) triples."""
    cells: list[tuple[str, list[str], list[str]]] = []
    for line in text.strip("\n").splitlines():
        match = MARKER.match(line)
        if match:
            tags = [t.strip() for t in (match.group(2) or "").split(",") if t.strip()]
            cells.append((match.group(1), [], tags))
        elif not cells:
            raise ValueError(f"text before the first '# %%' marker: {line!r}")
        else:
            cells[-1][1].append(line)
    return [(kind, "\n".join(lines).strip("\n"), tags) for kind, lines, tags in cells]


def build(name: str, text: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNEL
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, source, tags) in enumerate(parse_cells(text)):
        new = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        cell = new(source, id=f"{name[:2]}-{i:02d}")  # stable ids: no churn on regeneration
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    switches = sum(PROFILE_SWITCH in c.source.splitlines() for c in nb.cells)
    if switches != 1:
        raise ValueError(f"{name}: the PROFILE switch line must appear once, found {switches}")
    nbformat.validate(nb)
    return nb


def main() -> None:
    for name, text in LESSONS.items():
        path = HERE / f"{name}.ipynb"
        nbformat.write(build(name, text), path)
        print(f"wrote {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
