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
# # Lesson 2 — Feed the accelerator
#
# **Goal:** make the naive CIFAR-10 recipe stop waiting for data, one change at a time, and
# measure whether each change made training faster: the loader's knobs in steady state and at
# epoch starts, BERT's caching as the cost of building batches, the on-device pipeline in all
# three and over whole runs, with accuracy beside it (over several seeds: one run cannot tell a change from run-to-run
# noise).
# Lesson 1 measured two things: the time the loop waits in `next()`, and the whole cost of the
# input pipeline (an A/B without it), which also counts the cores its workers take. Here we:
#
# 1. tune the `DataLoader`: `num_workers`, `persistent_workers`, `prefetch_factor`, and
#    `pin_memory` with `non_blocking` copies;
# 2. cache work that does not change between epochs (BERT: tokenize once, not in the loop);
# 3. keep the whole dataset on the device as uint8 and augment a batch at a time *there*;
#
# measuring every change A/B against the naive recipe with `effkit.lesson.ab`, only the input
# pipeline swapped (`cifar.build(..., pipeline=...)`).
#
# **Run time**: about 5 min in `cpu` (291 s recorded on a quiet 2-core Intel Xeon VM with AMX, no
# GPU, 2026-12-07: the outputs in `docs/recorded/`, each cell's seconds with them; the six whole
# training runs of section 4 take 40% of it; 514 s on the same VM 20 minutes earlier: its speed
# varies); about 60 s in `smoke`; `gpu`: not known (its one
# GPU run, on an H100 80GB HBM3 on 2026-11-23, was stopped at 235 s, unfinished, and the lesson has
# grown since).
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one),
# `smoke` (tests only). You will predict twice, and tune a loader yourself in *Your turn*. The
# quiz is in `exercises/lesson2/`.

# %%
# %matplotlib inline
import copy
import functools
import itertools
import math
import os
import statistics

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from effkit import lesson
from effkit.measure import StepTimer, device_name
from effkit.seed_compare import separation
from effkit.workloads import bert, cifar
from effkit.workloads.bert import batching
from effkit.workloads.cifar import DevicePipeline, TorchvisionPipeline
from effkit.workloads.common import train_to_target

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
# This lesson's experiment sizes per profile; the recipe's own sizes live in its profile.
# ab_steps: the timed training steps of one steady-state A/B burst (after untimed ones that reach
# the steady state, see steady_ab); max_pairs: where the pipeline A/Bs stop adding pairs;
# restarts: timed epoch starts per pipeline; epochs, seeds: the whole runs of section 4.
SIZES = {
    "smoke": dict(ab_steps=4, pairs=6, max_pairs=6, restarts=1, sweep_batches=6, text_batches=8,
                  epochs=1, seeds=1),
    "cpu": dict(ab_steps=6, pairs=6, max_pairs=6, restarts=5, sweep_batches=6, text_batches=10,
                epochs=1, seeds=3),
    "gpu": dict(ab_steps=100, pairs=8, max_pairs=16, restarts=5, sweep_batches=40,
                text_batches=50, epochs=5, seeds=3),
}[PROFILE]
print(f"profile {PROFILE!r} on {DEVICE_NAME}, {os.cpu_count()} CPU cores")


# %% [markdown]
# **Where the data comes from.** SST-2 is real in the `cpu` and `gpu` profiles: downloaded once, or
# read from a folder with GLUE SST-2's `train.tsv`/`dev.tsv`/`test.tsv` that `EFFKIT_SST2_DIR` points
# at. CIFAR-10 is real in `gpu` (downloaded once); `cpu` uses real CIFAR-10 only where it finds a copy
# (`EFFKIT_CIFAR_DIR` pointing at a folder holding `cifar-10-batches-py/`, or an earlier download) and
# otherwise a **synthetic stand-in** in CIFAR's format, and says so in its summary (the recorded outputs
# ran on the stand-in). Set the variables in the shell before `jupyter lab`, or in the cell below with
# `os.environ[...] = ...` before anything loads. `smoke` generates synthetic data for both.

# %%
for workload, source in lesson.data_location(PROFILE).items():
    print(f"{workload:9} <- {source}")

# %% [markdown]
# ## Where the time goes: three ways to feed a training loop
#
# A picture first. With no worker processes, preparing a batch and training on it take turns.
# DataLoader workers prepare the next batches *while* the model trains — if there are free cores
# for them. An on-device pipeline makes a batch with one gather on the accelerator, then a normalise.

# %%
fig, axes = plt.subplots(3, 1, figsize=(9, 3.6), sharex=True)
prep, train = 1.0, 1.6
layouts = {
    "no workers: prepare, then train": [("main", i * (prep + train), prep, "prepare")
                                        for i in range(4)]
    + [("main", i * (prep + train) + prep, train, "train") for i in range(4)],
    "2 workers: prepare in parallel (needs free cores)": [
        (f"worker {i % 2}", 0.5 * prep * i, prep, "prepare") for i in range(6)]
    + [("main", prep + i * train, train, "train") for i in range(5)],
    "on the device: one gather per batch": [("main", i * (train + 0.15), 0.15, "prepare")
                                            for i in range(5)]
    + [("main", i * (train + 0.15) + 0.15, train, "train") for i in range(5)],
}
colours = {"prepare": "tab:orange", "train": "tab:blue"}
for ax, (title, blocks) in zip(axes, layouts.items(), strict=True):
    lanes = sorted({lane for lane, *_ in blocks}, reverse=True)
    for lane, start, width, kind in blocks:
        ax.barh(lanes.index(lane), width, left=start, color=colours[kind], edgecolor="white")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_title(title, fontsize=9, loc="left")
axes[-1].set(xlabel="time →", xlim=(0, 9.5), xticks=[])
axes[0].legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
               labels=list(colours), loc="upper right", fontsize=8)
fig.suptitle("Schematic (not measured): batch preparation vs training", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## How we measure: steady state and epoch starts apart, then whole runs
#
# `lesson.ab` times a burst of training steps of each recipe, interleaved A B B A …, and says
# *faster*, *slower* or *no clear difference* only as far as its interval (≥ 6 pairs) allows. Its
# ratio is the median of the per-pair ratios B/A, not the ratio of the two sides' median speeds it
# also prints (the two can differ when the machine's pace drifts between pairs). The
# pipeline A/Bs below take `max_pairs` at most: 6 in `cpu`, where the interval then runs from the
# smallest pair's ratio to the largest and covers the median 97% of the time. Training steps, not
# batches alone: a pipeline that is fast on its own but steals the cores the model needs is not
# faster.
#
# A pipeline costs time in two ways (lesson 1, section 4): in **every step** (the workers'
# batches, the loop's waits) and at **every epoch start** (starting the workers, waiting for the
# first batch). We measure the two apart, then check both against whole training runs:
#
# * **steady state**: each burst is `ab_steps` steps of the recipe's own pass over the full
#   training set. One trap: *worker processes keep working while the other recipe's burst runs*,
#   on its cores. So, as `effkit.bench` does, each trainer's `resume()` starts its workers and
#   fills their prefetch queue before its burst and `pause()` stops them after it, both off the
#   clock (`lesson.ab`'s `before`/`after`). (A persistent loader keeps its worker processes
#   across `pause()`; they finish the batches already asked for, then idle.) `resume()` fills the
#   queue by taking its batches from the loader, which asks the workers for as many again; so,
#   still off the clock, each side then trains through as many steps as the deeper of the two
#   queues holds (at least one: the two sides train different models, and each starts its burst
#   warm; the same number on both sides, so neither burst starts further into its warm-up). Every timed step then
#   takes a prepared batch and asks for one more, as in the middle of an epoch, and whatever the
#   first steps after a worker start cost — once per epoch in a real run — stays off the timer:
#   bursts timed straight after `resume()` charged it to every burst, the more the shorter the
#   burst. Timing whole 2-step epochs of a small subset instead would charge every burst a worker
#   start-up and a full prefetch queue: start-ups read as a per-step cost;
# * **epoch start** (section 3): a new pass started right after the previous one ran to its end,
#   as in training, timed on its own: to its first batch, and over its first batches against the
#   loader's steady pace;
# * **whole runs** (section 4): what a learner actually gets, from several seeds.

# %%
def loader_settings(pipeline):
    """A pipeline's DataLoader knobs; without worker processes none prefetch or persist."""
    loader = getattr(pipeline, "loader", None)
    workers = getattr(loader, "num_workers", 0)
    return {"num_workers": workers,
            "prefetch_factor": loader.prefetch_factor if workers else None,
            "persistent_workers": bool(workers) and loader.persistent_workers,
            "pin_memory": bool(getattr(loader, "pin_memory", False))}


def queue_depth(pipeline):
    """The batches `resume()` takes ahead: workers x prefetch_factor (0 without workers)."""
    knobs = loader_settings(pipeline)
    return knobs["num_workers"] * (knobs["prefetch_factor"] or 1)


def steady_ab(name, pipeline_a, pipeline_b, a_label, b_label):
    """A/B of the naive recipe with two input pipelines, `ab_steps`-step bursts in steady state."""
    a = cifar.build("naive", PROFILE, pipeline=pipeline_a)
    b = cifar.build("naive", PROFILE, pipeline=pipeline_b)
    trainers, k = {"a": a, "b": b}, SIZES["ab_steps"]
    # both sides train as many untimed steps before each burst: the deeper of the two queues
    warm = max(1, queue_depth(a.pipeline), queue_depth(b.pipeline))
    for trainer in trainers.values():
        trainer.pause()  # no worker runs until its own burst

    def steady_pass(side):  # off the clock: workers started, queue full, the taken batches trained
        trainers[side].resume()
        trainers[side].train_steps(warm)

    return lesson.ab(name, lambda: a.train_steps(k).samples, lambda: b.train_steps(k).samples,
                     pairs=SIZES["pairs"], max_pairs=SIZES["max_pairs"], a_label=a_label,
                     b_label=b_label, unit="images/s", before=steady_pass,
                     after=lambda side: trainers[side].pause())


naive = cifar.build("naive", PROFILE)
naive.describe()["pipeline"], naive.describe()["num_workers"], naive.describe()["batch_size"]


# %% [markdown]
# ## 1. Tune the DataLoader
#
# The naive pipeline (`TorchvisionPipeline`) runs PIL crops and flips per image in 2 worker
# processes. Here it is with the `DataLoader`'s other knobs exposed — same transforms
# [PyTorch data loading docs]:
#
# * `num_workers`: processes preparing batches in parallel with training;
# * `persistent_workers`: keep them alive between epochs instead of starting new ones (so it acts
#   only where a pass starts);
# * `prefetch_factor`: batches each worker prepares ahead (default 2);
# * `pin_memory` + `non_blocking=True`: page-locked host memory, so the copy to the GPU can run
#   asynchronously, overlapped with compute [CUDA best practices, pinned memory].

# %%
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


# %% [markdown]
# How many workers? Time the loader alone (no model) for a few counts, skipping the first batch
# (worker start-up).
#
# **Predict.** Which `num_workers` will give the loader alone the most images/s on this machine?

# %%
GUESS_BEST_WORKERS = None  # your guess, an integer

# %%
train_set = cifar.load_cifar(cifar.prepare_data(PROFILE), train=True)


def loader_images_per_s(workers, batches=SIZES["sweep_batches"], prefetch_factor=4):
    pipe = LoaderPipeline(train_set, 128, DEVICE, num_workers=workers,
                          prefetch_factor=prefetch_factor)
    stream = iter(pipe)
    next(stream)  # start-up: not timed
    with StepTimer(DEVICE) as timer:
        images = sum(len(y) for _, y in itertools.islice(stream, batches))
    return images / timer.seconds


# For CPU-bound in-memory transforms like these, worker processes beyond the free cores share those
# cores rather than add to them (the DataLoader itself warns when asked for more workers than the
# cores the process may use: `_check_worker_number_rationality` in its source); loaders that wait on
# disk or network can use more.
counts = sorted({0, 1, 2, 4, 8, 12, 16} & set(range(os.cpu_count() + 1)))
sweep = {w: loader_images_per_s(w) for w in tqdm(counts, desc="num_workers")}
for w, speed in sweep.items():
    print(f"num_workers={w:2d}: {speed:7.0f} images/s from the loader alone, on {DEVICE_NAME}")
# A single timing each: a count wins only by more than 5% over naive's own 2 workers, else the tuned
# loader keeps naive's count (a 1-2% lead among single timings is noise, not a choice).
fastest = max(sweep, key=sweep.get)
best_workers = fastest if sweep[fastest] > 1.05 * sweep.get(2, 0.0) else 2
print(f"fastest alone: num_workers={fastest}; the tuned loader takes {best_workers}"
      + ("" if best_workers == fastest else " (naive's count: the lead is within 5%)"))
lesson.check_guess(GUESS_BEST_WORKERS, fastest, "fastest num_workers (loader alone)", "{}")

# %% [markdown]
# These are single timings (no interval) over a few batches right after the workers start, while
# their first batches are still being prepared: not a steady state, so treat small differences as
# noise. On a GPU machine more workers help until the loader outpaces the training step or the
# free cores run out (on one H200, in one grading while another shared the GPU, the exercise's
# reference on-device pipeline made the naive recipe about 1.9x faster, its chunk pairs 1.12-2.25x:
# `grader/assignments/lesson2/README.md`; nothing there timed the data wait, so that the 2-worker
# loader was the limit is an inference). On a 2-core CPU the workers
# compete with the model for the same two cores, so the loader-alone winner is only a guess: the
# A/B with training running decides.
#
# The tuned loader takes the sweep's winner for `num_workers` where it leads naive's 2 workers by
# more than 5% (a smaller lead among single timings is noise: it keeps naive's 2), keeps its workers
# (`persistent_workers=True`), lets each prepare 4 batches ahead, and pins memory where there is a
# GPU. Its A/B compares only the settings that differ from naive's, and its steady-state bursts see
# only those that act within a pass: `persistent_workers` acts where a pass starts, which the
# bursts keep off the clock (section 3 times it). Where the sweep's winner is naive's own 2
# workers, `num_workers` is not compared at all. The cell below prints what differs on this host.
#
# Pinned memory only matters when there is a copy to a GPU. With the CPU as the training device,
# `.to(DEVICE)` returns the very same tensor — no copy, nothing to overlap — and PyTorch warns
# that pinning needs an accelerator. So we pin only on CUDA:

# %%
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
BATCH = naive.describe()["batch_size"]
naive_knobs = loader_settings(naive.pipeline)
tuned_example = tuned_loader(train_set, BATCH, DEVICE)  # built; no worker starts before iter()
tuned_knobs = loader_settings(tuned_example)
changed = {knob: (v, tuned_knobs[knob]) for knob, v in naive_knobs.items()
           if v != tuned_knobs[knob]}
unchanged = ", ".join(f"{knob}={v}" for knob, v in naive_knobs.items() if knob not in changed)
# What the steady-state A/B can see: persistent_workers acts only where a pass starts.
AB_COMPARES = ", ".join(f"{knob} {a} -> {b}" for knob, (a, b) in changed.items()
                        if knob != "persistent_workers") or "no setting that acts within a pass"
print("the tuned-vs-naive A/B changes, on this host: "
      + (", ".join(f"{knob} {a} -> {b}" for knob, (a, b) in changed.items()) or "nothing")
      + f" (the same in both: {unchanged or 'nothing'}). Its steady-state bursts can see"
      f" {AB_COMPARES}"
      + ("; persistent_workers acts only where a pass starts (section 3 times that)."
         if "persistent_workers" in changed else "."))

# %%
loader_ab = steady_ab("naive -> tuned DataLoader, steady state", TorchvisionPipeline, tuned_loader,
                      "naive (2 workers)", "tuned DataLoader")

# %% [markdown]
# **What should that show?** On a 2-core CPU the steady-state bursts compare `prefetch_factor`
# 2 -> 4 (and `num_workers`, where the sweep picked another count). A deeper queue helps only when
# the loader sometimes falls behind and a stock of ready batches bridges it. Section 3 sets a
# training step beside the loader's pace; where the step is much the slower (many times, in the
# recorded `cpu` run: the ratio is printed there), both queues are full at every step and the depth should
# change nothing. A few percent either way can then be the design's own error: two
# models trained side by side, each with its worker processes, on a shared machine. So measure
# that error directly: the same A/B with naive on **both** sides (an A/A control). If its interval
# holds 1x, no bias between the two sides is seen, though one as large as the interval's ends is
# not ruled out; if it misses 1x, the two sides differ with nothing changed. Either way the
# control's interval is how far the design alone moved a ratio here. A conservative reading,
# used below: an A/B shows a change beyond that error where its own interval clears the control's
# (two intervals that overlap can still differ: the rule misses small real changes rather than
# claim false ones); one whose interval overlaps it (even one that excludes 1x) leans on the
# whole-run check of section 4.

# %%
aa_ab = steady_ab("naive -> naive (A/A control), steady state", TorchvisionPipeline,
                  TorchvisionPipeline, "naive (2 workers)", "naive again")


AA_UNBIASED = aa_ab.ci_low <= 1 <= aa_ab.ci_high
CONTROL_WORDS = (
    f"A/A control {aa_ab.ratio:.2f}x, interval {aa_ab.ci_low:.2f}-{aa_ab.ci_high:.2f}: "
    + ("it holds 1x: no bias between the sides is seen, though one as large as its ends is not"
       " ruled out" if AA_UNBIASED else "it misses 1x: the two sides differ with nothing changed")
    + "; read conservatively, an A/B shows a change beyond the design's own error where its interval"
    " clears this one")


def against_control(result):
    """What an A/B's interval says once the A/A control is taken into account: whether it holds 1x
    or not, the control's interval is how far the design alone can move a ratio here."""
    if result.ci_low > aa_ab.ci_high or result.ci_high < aa_ab.ci_low:
        return "its interval clears the A/A control's: more than the design's own error"
    return ("its interval overlaps the A/A control's: not told apart from the design's own error"
            " (section 4's whole runs are the check)")


print(CONTROL_WORDS)
print(f"tuned DataLoader: {loader_ab.ratio:.2f}x, interval {loader_ab.ci_low:.2f}-"
      f"{loader_ab.ci_high:.2f}: {against_control(loader_ab)}")

# %% [markdown]
# ## 2. Cache what does not change: tokenize once
#
# The naive BERT recipe tokenizes the raw sentences of every batch, every epoch, inside its
# DataLoader's `collate_fn`. The token ids never change: tokenize the corpus once and build each
# batch from the cached ids [HF tokenizers docs]. To isolate *caching* we produce exactly the
# same tensors both ways (padded to 128; lesson 7 drops the padding).
#
# **Predict.** How many times faster is building a batch from cached ids than tokenizing it?

# %%
GUESS_CACHE_SPEEDUP = None  # your guess, e.g. 3.0

# %%
spec = bert.PROFILES[PROFILE]
sst2 = bert.load_sst2(bert.prepare_data(PROFILE))["train"]
# The recipe's own model and tokenizer: the pretrained encoder's where one is found (the packaged
# MiniLM in `cpu`), else a WordPiece trained on the training sentences, as the recipe falls back.
bert_model, tokenizer, bert_note = bert.recipe_model(spec, sst2.texts)
print(f"tokenizer: the recipe's, {type(tokenizer).__name__} ({bert_note})")
collate = batching.TokenizeAndPadCollate(tokenizer, spec.max_length)
with StepTimer() as once:
    corpus = batching.encode_once(tokenizer, sst2.texts, sst2.labels, spec.max_length)
print(f"tokenizing all {len(corpus)} training sentences once: {once.seconds:.2f} s"
      f" on {device_name('cpu')}")


# %%
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


# %%
def tokenize_in_loop():
    for rows in index_batches:
        collate([(sst2.texts[i], sst2.labels[i]) for i in rows])
    return len(index_batches) * spec.naive_batch


def from_cache():
    for rows in index_batches:
        cached_batch(rows)
    return len(index_batches) * spec.naive_batch


text_ab = lesson.ab("BERT batches: tokenize each time vs cached ids", tokenize_in_loop,
                    from_cache, pairs=SIZES["pairs"], a_label="tokenizing",
                    b_label="cached ids", unit="sentences/s", dev=torch.device("cpu"))
lesson.check_guess(GUESS_CACHE_SPEEDUP, text_ab.ratio, "caching speed-up", "{:.1f}x")


# %% [markdown]
# What is that worth to training? Set one batch's tokenizing beside one naive training step of the
# same model on the same batch (fp32, AdamW, clipped, as the naive recipe trains; the median of a
# few steps after a warm-up one).

# %%
def naive_bert_step_seconds(steps=3):
    opt = torch.optim.AdamW(bert_model.parameters(), lr=spec.lr)
    bert_model.train()
    batch = cached_batch(index_batches[0])
    times = []
    for _ in range(steps + 1):  # the first step allocates AdamW's state: warm-up, not timed
        with StepTimer() as t:
            bert_model(**batch).loss.backward()
            torch.nn.utils.clip_grad_norm_(bert_model.parameters(), bert.MAX_GRAD_NORM)
            opt.step()
            opt.zero_grad(set_to_none=True)
        times.append(t.seconds)
    return statistics.median(times[1:])


step_s = naive_bert_step_seconds()
tokenize_s = spec.naive_batch / text_ab.a_median  # one batch at the tokenizing side's median rate
print(f"one naive BERT step (batch {spec.naive_batch}, padded to {spec.max_length}): "
      f"{1e3 * step_s:.0f} ms; tokenizing its batch: {1e3 * tokenize_s:.1f} ms = "
      f"{tokenize_s / step_s:.1%} of a step, on {device_name('cpu')}")

# %% [markdown]
# This A/B times **building batches only**, not training steps: it says how much cheaper the
# loader's work becomes, not how much faster training gets. Training gains only the part of that
# work that was on the step's critical path — with enough workers on otherwise idle cores, none
# of it (a
# data-wait timer, as lesson 1 used for CIFAR, measures that part). The one-off cost above buys
# every later epoch its batches at a small fraction of the tokenizing cost. In the naive recipe this work runs in worker processes:
# on a GPU box it costs cores the other pipelines need; on a 2-core CPU it shares the cores with the
# model, here for the small share of a step printed above.
#
# ## 3. The whole dataset on the device, augmented there
#
# CIFAR-10's 50,000 training images are 150 MB as uint8 (240 MB padded to 40 x 40, as kept here) — they fit on any accelerator. `DevicePipeline` keeps it there,
# pre-padded, and does shuffle + random crop + flip for a whole batch with one indexing op, then
# normalises in the training dtype — the idea of the fast CIFAR loaders [Page 2018; hlb-CIFAR10;
# Jordan 2024], here with naive's augmentation (airbench pads 2 pixels by reflection and alternates
# flips; `DevicePipeline` can, with `pad=2, padding_mode="reflect", flip="alternating"`). No workers, no
# per-image Python, no host-to-device copies. Its defaults reproduce the naive augmentation
# (4 px zero padding, random flips). On the `cpu` profile the device is the host: neither
# pipeline copies anything, and what the A/B below can measure is the workers' per-image work
# leaving the model's two cores; the cell after the plot sets the two figures side by side.

# %%
device_ab = steady_ab("naive -> DevicePipeline, steady state", TorchvisionPipeline, DevicePipeline,
                      "naive (2 workers)", "DevicePipeline")

# %%
lesson.plot_ab({"naive vs naive\n(A/A control)": aa_ab,
                f"tuned DataLoader\n({best_workers} workers)\nvs naive": loader_ab,
                "DevicePipeline\nvs naive": device_ab},
               f"Naive CIFAR recipe, input pipeline only changed — {DEVICE_NAME}")
plt.show()
for name, result in (("tuned DataLoader", loader_ab), ("DevicePipeline", device_ab)):
    print(f"{name}: {result.verdict} Against the A/A control: {against_control(result)}")
# The two bars are two A/Bs, each with its *own* measurement of the naive baseline. Their ratios
# can be set side by side only if the baseline ran at about the same speed in both.
# A rule of thumb: each ratio is taken against its own interleaved baseline, so a uniform shift of the
# machine cancels; what can still differ is the machine's state, which the baseline's speed hints at.
# A baseline that moved by less than half the gap between the two bars is unlikely to have made it.
baselines = [r.a_median for r in (aa_ab, loader_ab, device_ab)]  # the control's baseline too
base_gap = max(baselines) / min(baselines)
bar_gap = max(loader_ab.ratio, device_ab.ratio) / min(loader_ab.ratio, device_ab.ratio)
bars_overlap = loader_ab.ci_low <= device_ab.ci_high and device_ab.ci_low <= loader_ab.ci_high
print(f"the naive baseline measured {', '.join(f'{b:,.0f}' for b in baselines)} images/s in the A/A"
      f" control and the two A/Bs ({base_gap - 1:.0%} apart), while the two bars differ by"
      f" {bar_gap - 1:.0%}: "
      + ("the baseline moved by half that or more, so the bars cannot be compared with each other —"
         " each says only how its pipeline did against the baseline measured beside it"
         if base_gap - 1 >= (bar_gap - 1) / 2 else
         "the baseline moved by less than half that, but the two bars' intervals overlap: a gap these"
         " intervals do not establish" if bars_overlap else
         "the baseline moved by less than half that and the two intervals do not overlap: the bars"
         " may be set side by side"))
# If there is a gain, why, with the loader many times faster than a step? On the CPU its work is not
# free: it runs on the model's cores. The sweep's no-worker pace is that work's CPU time per batch.
loader_ms = 1e3 * BATCH / sweep[0] if sweep.get(0) else float("nan")
saved_ms = 1e3 * (BATCH / device_ab.a_median - BATCH / device_ab.b_median)
# the saving per naive step the A/B's interval allows: a step of naive's median time, shortened by 1 - 1/ratio
saved_range = [1e3 * BATCH / device_ab.a_median * (1 - 1 / r) for r in (device_ab.ci_low, device_ab.ci_high)]
print(f"per batch of {BATCH}: the naive loader's own work {loader_ms:.0f} ms of CPU (the sweep's"
      f" no-worker pace); DevicePipeline's steps {saved_ms:.0f} ms shorter than"
      f" naive's (steady-state medians): " + (
          "the A/B's interval holds 1x, so the saving may be nothing: no comparison"
          if device_ab.ci_low <= 1 <= device_ab.ci_high else
          "the A/B's interval overlaps the A/A control's, so the saving is not told apart from the"
          " design's own error: no comparison"
          if not (device_ab.ci_low > aa_ab.ci_high or device_ab.ci_high < aa_ab.ci_low) else
          f"consistent with taking that work off the model's cores (the A/B's interval puts the saving"
          f" at {saved_range[0]:.0f}-{saved_range[1]:.0f} ms)"
          if DEVICE.type == "cpu" and saved_range[0] <= loader_ms <= saved_range[1] else
          f"not what that work alone predicts (the A/B's interval puts the saving at"
          f" {saved_range[0]:.0f}-{saved_range[1]:.0f} ms): on this device the saving is not only the"
          " loader's CPU work" if DEVICE.type == "cpu" else
          "on an accelerator the loader's CPU work runs beside the model's, not in its place"))

# %% [markdown]
# Each bar is **one** A/B, interleaved against its own run of the baseline; green means the
# interval lies above 1 (faster), red below (slower), grey that it straddles 1 (no clear
# difference). The first bar changes nothing: its spread is the design's own error, and a bar
# whose interval overlaps it is not shown to differ by more than that error, whatever its colour. Whether the two pipelines'
# bars may be compared with *each other* depends on whether the baseline ran at the same speed in
# both, as measured against the gap between the bars — the cell above checks, rather than assumes
# it (and a bar gap inside both bars' intervals is no gap whatever the baseline did).
#
# ### Epoch starts
#
# The bursts above never start a pass. In training a pass ends when its last batch has been taken,
# and the next `iter()` starts the next pass: a non-persistent loader (naive) lets its workers exit
# at the end of the pass and starts new ones; a persistent loader (the tuned one, where it has workers) keeps its workers
# and sends them the new pass's indices [PyTorch data loading docs, `persistent_workers`];
# `DevicePipeline` draws a new permutation on the device. So each start below comes right after a
# pass that ran to its end, the pass's last `next()` included (where a non-persistent loader's
# workers exit). Abandoning each pass after its first batch instead, which a run does not do
# between its epochs, would time something else: a persistent loader's next `iter()` first waits
# for its workers to finish what they were still preparing for the abandoned pass [PyTorch
# `DataLoader` source, `_reset`].
#
# Each pipeline is timed alone, without the model, and each start gives two numbers:
#
# * **first batch**: seconds from the end of a pass to the next pass's first batch; a training loop
#   has nothing to compute meanwhile;
# * **extra over the first k batches**: seconds to the new pass's k-th batch minus k times the
#   loader's steady seconds per batch, timed on the same pass's next (and last) k batches; k is the
#   deepest prefetch queue of the two loaders (workers x `prefetch_factor`).
#
# To keep this cheap, each pipeline reads a 2k-batch subset of the same training images, built with
# the same settings: a pass over the whole set costs an epoch of data loading per start. Apart from
# drawing the new pass's order (and, for `DevicePipeline`, its crops and flips: a few vectorised
# operations over the whole set), a restart does the same work whatever the pass's length where
# the workers are forked: a persistent loader sends its workers the new pass's first indices, and a
# non-persistent one forks new workers from the training process, whose memory is the same
# whichever subset the loader reads. Under the `spawn` or `forkserver` start methods (`forkserver`
# is Python's default on Linux from 3.14) each new worker is sent a pickled copy of the dataset
# instead, and the length could matter. The cell prints the start method and checks the claim for
# naive and `DevicePipeline` against the recipe's whole training set. Those check passes are each
# closed off the clock, so naive's first batch there leaves out its old workers' exit, which the
# starts above time (they end the previous pass on the clock): a likely reason it comes out
# shorter, not tested here.
#
# Which of the two numbers a run pays depends on which side is slower. Where a training step takes
# longer than the loader needs for a batch, the workers get ahead again after the first batch and
# a start costs the loop about its first batch; where the loader is the slower, every step waits
# anyway and a start costs about the extra over the first k. The cell sets the steady-state step
# (from the A/Bs' medians) beside the loader's pace alone and says which case the numbers point
# to. The pace alone is the loader's best: with training running beside it, it should be no faster,
# so the cell asks for a 2x margin before it calls training the slower side. Section 4's
# prediction charges each epoch the median the case names (within the margin, the larger).
#
# Not timed here: where the workers share the model's cores, the batches they prepare ahead during
# a pass's first steps slow those steps. That work is not extra (every step needs its batch), but
# whether the pass's last steps, whose batches are then ready while the workers idle, win the time
# back is left open here: the whole runs of section 4 check the sum.

# %%
def subset(dataset, n):
    """The first `n` images of `dataset`: a shallow copy, arrays sliced (as `cifar.build` caps)."""
    part = copy.copy(dataset)
    part.data, part.targets = dataset.data[:n], dataset.targets[:n]
    return part


def read_s(stream, n):
    """Seconds to take `n` batches from `stream` (device synchronised)."""
    with StepTimer(DEVICE) as timer:
        for _ in itertools.islice(stream, n):
            pass
    return timer.seconds


def epoch_starts(make_pipeline, k, repeats=SIZES["restarts"]):
    """`repeats` epoch starts of a pipeline over a 2k-batch subset, each right after a pass that ran
    to its end. Per start: seconds to the first batch; seconds to the k-th batch beyond k steady
    batches; the steady seconds per batch (the pass's last k). Returns the three lists."""
    pipe = make_pipeline(subset(train_set, 2 * k * BATCH), BATCH, DEVICE)
    stream = iter(pipe)
    read_s(stream, len(pipe))  # the first pass, untimed: a persistent loader starts its workers
    rows = []
    for _ in range(repeats):
        with StepTimer(DEVICE) as start:
            next(stream, None)  # the pass ends (a non-persistent loader's workers exit) ...
            stream = iter(pipe)  # ... and the next one starts, as the trainer's _next_batch does
            next(stream)
        rest = read_s(stream, k - 1)
        steady = read_s(stream, k) / k
        rows.append((start.seconds, start.seconds + rest - k * steady, steady))
    return [list(column) for column in zip(*rows, strict=True)]


def first_batch_s(pipe):
    """Seconds from `iter()` to a new pass's first batch; the pass is then closed, off the clock.
    (A non-persistent loader starts new workers at every `iter()`, whether a pass ended or not.)"""
    with StepTimer(DEVICE) as timer:
        stream = iter(pipe)
        next(stream)
    stream.close()  # its workers exit here
    return timer.seconds


def spread(xs, fmt="{:.3f}"):
    """'median (min to max)' of a few timings."""
    return (f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))} to"
            f" {fmt.format(max(xs))})")


def order_words(a, b, a_label, b_label, longer="longer", shorter="shorter"):
    """Whether every timing of `b` lies above or below every timing of `a`, with the chance of that
    order when nothing differs (a one-sided permutation p, effkit.seed_compare)."""
    sep = separation(a, b)
    n = f"{len(a)} + {len(b)} timings"
    if sep.side == "overlap":
        return f"the {a_label} and {b_label} ranges overlap: no difference {n} can show"
    word = longer if sep.side == "b above" else shorter
    chance = f"one-sided permutation p = {sep.p_one_sided:.3f}"
    if sep.p_one_sided > 0.05:
        return (f"every {b_label} timing {word} than every {a_label} one, but with {n} that"
                f" happens by chance {sep.p_one_sided:.0%} of the time: not evidence ({chance})")
    return f"every {b_label} timing {word} than every {a_label} one ({n}; {chance})"


# %%
first_k = max(1, queue_depth(naive.pipeline), queue_depth(tuned_example))
first_k = max(1, min(first_k, len(train_set) // (2 * BATCH)))  # the subset holds 2k batches
repeats = SIZES["restarts"]
pipelines = {"naive (2 workers)": TorchvisionPipeline, "tuned DataLoader": tuned_loader,
             "DevicePipeline": DevicePipeline}
measured = {name: epoch_starts(make, first_k)
            for name, make in tqdm(pipelines.items(), desc="epoch starts")}
whole_n = naive.describe()["n_train"]  # the recipe's training set
by_length = {}
for name in ("naive (2 workers)", "DevicePipeline"):
    small, whole = (pipelines[name](subset(train_set, n), BATCH, DEVICE)
                    for n in (2 * first_k * BATCH, whole_n))
    by_length[name] = {"subset": [], "whole": []}
    for _ in range(repeats):  # interleaved: the two see the same machine
        by_length[name]["subset"].append(first_batch_s(small))
        by_length[name]["whole"].append(first_batch_s(whole))

print(f"epoch starts, each after a pass read to its end; loader alone over {2 * first_k} batches"
      f" ({2 * first_k * BATCH} images); median (min to max) of {repeats} starts, on {DEVICE_NAME}"
      f"{lesson.cifar_data_note(naive)}")
for name, (first, extra, per_batch) in measured.items():
    print(f"  {name:18}: first batch {spread(first)} s; first {first_k} batches"
          f" {spread(extra, '{:+.3f}')} s beyond {first_k} x its steady"
          f" {spread([1e3 * t for t in per_batch], '{:.1f}')} ms a batch")
print(f"tuned DataLoader ({tuned_desc}) vs naive, first batch: "
      + order_words(measured["naive (2 workers)"][0], measured["tuned DataLoader"][0], "naive",
                    "tuned"))
print(f"first batch over the subset vs the recipe's whole training set ({whole_n} images), each"
      f" pass closed after it; workers started by {torch.multiprocessing.get_start_method()}:")
for name, times in by_length.items():
    print(f"  {name:18}: subset {spread(times['subset'])} s, whole {spread(times['whole'])} s: "
          + order_words(times["subset"], times["whole"], "subset", "whole-set"))

# Which number a run pays: a training step (the steady-state A/Bs' medians) against the loader's
# pace alone, its best (2x margin, see above). Section 4 charges each epoch that median.
step_s = {"naive (2 workers)": BATCH / device_ab.a_median,
          "tuned DataLoader": BATCH / loader_ab.b_median,
          "DevicePipeline": BATCH / device_ab.b_median}
epoch_cost = {}
for name, (first, extra, per_batch) in measured.items():
    ratio = step_s[name] / statistics.median(per_batch)
    first, extra = statistics.median(first), statistics.median(extra)
    epoch_cost[name], case = (
        (first, "training is the slower side: the loop loses about the first batch") if ratio >= 2
        else (extra, "the loader is the slower side even at its best: a start costs about the"
              f" extra over the first {first_k} batches") if ratio <= 1
        else (max(first, extra), "within the 2x margin: a start costs between the extra over the"
              " first batches and the first batch"))
    epoch_s = naive.steps_per_epoch * step_s[name]
    print(f"  {name:18}: a training step takes {1e3 * step_s[name]:.0f} ms, {ratio:.1f}x the"
          f" loader's best pace: {case}; section 4 charges {epoch_cost[name]:.3f} s per epoch of"
          f" {naive.steps_per_epoch} steps ({epoch_cost[name] / epoch_s:.1%} of its"
          f" {epoch_s:.1f} s in steady state)")

# %% [markdown]
# ## 4. Does accuracy change — and do whole runs tell the same story?
#
# A faster pipeline must feed the *same* training: same augmentation, every image once per
# epoch. Train the recipe from scratch with the naive pipeline and with `DevicePipeline` (same
# seeds) on the recipe's training set (10,000 images in `cpu`) and compare held-out accuracy —
# and, as a cross-check of the A/B above, their training times. Two kinds of noise blur the accuracy: the test set (an
# accuracy `p` on `n` images has a standard error of `sqrt(p(1-p)/n)`), and training itself —
# other random crops and flips give a different model. With one run per pipeline only test-set
# noise can be estimated; to see training noise, train several seeds (`SIZES["seeds"]`: 3 in
# `cpu` and `gpu`), each evaluated once, at its end. Every run pays one epoch start per epoch (a
# one-epoch `cpu` run, its first), which the prediction below charges at section 3's figure.
# Three seeds can show a large difference, never sameness: equal accuracy is argued from the same
# augmentation: `DevicePipeline`'s defaults (zero padding of 4, a flip with probability 1/2) were
# written to match naive's, and its unit tests check each output is a padded crop or its mirror
# and every image comes once per epoch (`tests/test_cifar_workload.py`).

# %%
epochs = {} if SIZES["epochs"] is None else {"epochs": SIZES["epochs"]}
accuracy = {"naive": [], "DevicePipeline": []}
seconds = {"naive": [], "DevicePipeline": []}
# A B, then B A, ...: whichever runs second in a seed's pair (a warmer machine, a fuller page cache)
# is not always the same pipeline
runs = [(seed, name) for seed in range(SIZES["seeds"])
        for name in (list(accuracy) if seed % 2 == 0 else list(reversed(list(accuracy))))]
for seed, name in tqdm(runs, desc="train to the end", unit="run"):
    pipeline = TorchvisionPipeline if name == "naive" else DevicePipeline
    trainer = cifar.build("naive", PROFILE, pipeline=pipeline, seed=seed, **epochs)
    # One evaluation, at the end: only the final accuracy is compared here (train_seconds
    # counts training steps only, with or without evaluations between them).
    result = train_to_target(trainer, eval_every=trainer.total_steps, progress=False,
                             device_label=DEVICE_NAME)
    accuracy[name].append(result.accuracy)
    seconds[name].append(result.train_seconds)
    print(f"seed {seed}, {name:15}: accuracy {result.accuracy:.1%} after"
          f" {result.train_seconds:.1f} s of training ({result.steps} steps), {DEVICE_NAME}"
          f"{lesson.cifar_data_note(trainer)}")

# %%
n_test = result.config["n_test"]
base, fast = (statistics.mean(accuracy[name]) for name in ("naive", "DevicePipeline"))
# Paired by seed (same initial weights, same images; the crops, flips and order differ): one difference per
# seed, its spread the noise
diffs_pp = [100 * (f - n) for n, f in zip(accuracy["naive"], accuracy["DevicePipeline"],
                                          strict=True)]
delta_pp = statistics.mean(diffs_pp)
# Student's t for a 95% interval of a mean of n values (n - 1 degrees of freedom): with 3 seeds
# the interval is 4.3 standard errors each way, not 2
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
if SIZES["seeds"] > 1:  # seed-to-seed spread of the paired differences: training and test noise
    se_pp = statistics.stdev(diffs_pp) / len(diffs_pp) ** 0.5
    t95 = T95.get(len(diffs_pp) - 1, 2.0)
    noise = f"Student's t over {len(diffs_pp)} paired differences"
else:
    se_pp = 100 * (2 * base * (1 - base) / n_test) ** 0.5
    t95 = 2.0
    noise = "test-set noise only (one seed: training noise not covered)"
acc_low, acc_high = delta_pp - t95 * se_pp, delta_pp + t95 * se_pp
# an interval holding 0 is no evidence of a difference, and no evidence of sameness either
accuracy_verdict = (
    f"95% interval {acc_low:+.1f} to {acc_high:+.1f} pp ({noise}): "
    + (f"it holds 0, inconclusive: {len(diffs_pp)} seed(s) show neither a difference nor that"
       " there is none" if acc_low <= 0 <= acc_high else
       "it misses 0: a difference these seeds show; train more before concluding how large"))
one_side = len(diffs_pp) > 1 and (all(d > 0 for d in diffs_pp) or all(d < 0 for d in diffs_pp))
sign_p = 2 / 2 ** len(diffs_pp)  # two-sided: all on one side, either side
sign_words = (f"; every seed on one side, which a sign test puts at p = {sign_p:.2f} (two-sided) when"
              " nothing differs" + (": not evidence of a difference" if sign_p > 0.05 else "")
              if one_side else "")
print("DevicePipeline - naive, per seed: " + ", ".join(f"{d:+.1f}" for d in diffs_pp)
      + f" pp; mean {delta_pp:+.1f} pp, standard error {se_pp:.1f} pp; {accuracy_verdict}{sign_words}")
run_ratio = statistics.mean(seconds["naive"]) / statistics.mean(seconds["DevicePipeline"])
per_seed = [n / d for n, d in zip(seconds["naive"], seconds["DevicePipeline"], strict=True)]
run_order = separation(seconds["naive"], seconds["DevicePipeline"]).words(
    "naive", "DevicePipeline", "slower", "faster")
# What the two parts predict for a whole run: its steps at the steady-state speeds, plus one
# epoch start per epoch (what section 3 says a start costs each), at the A/B's median ratio and at
# its interval's two ends.
n_steps, n_epochs = result.steps, max(1, math.ceil(result.steps / naive.steps_per_epoch))
batch = naive.describe()["batch_size"]


def predict(ratio):
    naive_s = n_steps * batch / device_ab.a_median + n_epochs * epoch_cost["naive (2 workers)"]
    device_s = (n_steps * batch / (device_ab.a_median * ratio)
                + n_epochs * epoch_cost["DevicePipeline"])
    return naive_s / device_s


predicted, p_low, p_high = (predict(r) for r in (device_ab.ratio, device_ab.ci_low, device_ab.ci_high))
low, high = min(per_seed), max(per_seed)
agrees = (p_low <= high and low <= p_high) if len(per_seed) > 1 else None  # the two ranges overlap
whole_run_words = (
    f"whole runs ({SIZES['seeds']} seed(s), {n_steps} steps): DevicePipeline trained"
    f" {run_ratio:.2f}x as fast as naive (per seed {low:.2f}-{high:.2f}x; {run_order})")
print(whole_run_words)
print(f"steady-state A/B {device_ab.ratio:.2f}x [{device_ab.ci_low:.2f}-{device_ab.ci_high:.2f}]"
      f" plus {n_epochs} epoch start(s) predict {predicted:.2f}x for these runs"
      f" ({p_low:.2f}-{p_high:.2f}x over the A/B's interval): "
      + ("one seed: no per-seed range to hold the prediction against" if agrees is None else
         "it overlaps the per-seed range: at this precision the parts do not contradict the whole"
         if agrees else
         "it misses the per-seed range: the parts do not add up to the whole here; something the"
         " bursts and the epoch-start timing leave out differs between whole runs"))

# %% [markdown]
# ## Your turn
#
# Tune the loader yourself: change `MY_WORKERS` and `MY_PREFETCH` below, run, and see what the
# loader alone delivers. Then A/B your setting with training running: copy the `steady_ab` call
# from section 1 with `functools.partial(LoaderPipeline, num_workers=..., ...)`. Does the winner
# of the loader-alone sweep win with training running, too?

# %%
MY_WORKERS, MY_PREFETCH = 1, 2  # your turn: change these
mine = loader_images_per_s(MY_WORKERS, prefetch_factor=MY_PREFETCH)
print(f"num_workers={MY_WORKERS}, prefetch_factor={MY_PREFETCH}: {mine:.0f} images/s from the"
      f" loader alone on {DEVICE_NAME} (sweep best: {sweep[best_workers]:.0f})")

# %% [markdown]
# ### In your own words
#
# Section 3 A/B'd the naive `DataLoader` against `DevicePipeline` (the whole dataset on the device,
# augmented a batch at a time there) with training running. Explain in 2–3 sentences what work
# `DevicePipeline` takes out of each step and each epoch, and why the accuracy should not change.
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=2)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(2, DEVICE_NAME, lesson.cifar_data_note(naive)))
print(f"* {whole_run_words}")
print(f"* steady state ({SIZES['ab_steps']}-step bursts, no epoch start): naive recipe, 2-worker"
      f" DataLoader {loader_ab.a_median:.0f} images/s; tuned DataLoader ({tuned_desc}; the bursts"
      f" compare {AB_COMPARES}): {loader_ab.verdict} Against the A/A control: {against_control(loader_ab)}")
print(f"* steady state: DevicePipeline: {device_ab.verdict} Against the A/A control:"
      f" {against_control(device_ab)}")
print(f"* epoch start after a pass read to its end, loader alone, median of {repeats}: first batch "
      + ", ".join(f"{name} {statistics.median(m[0]):.3f} s" for name, m in measured.items())
      + f"; first {first_k} batches beyond the steady pace "
      + ", ".join(f"{name} {statistics.median(m[1]):+.3f} s" for name, m in measured.items())
      + "; tuned vs naive, first batch: "
      + order_words(measured["naive (2 workers)"][0], measured["tuned DataLoader"][0], "naive",
                    "tuned"))
print(f"* building BERT batches (not training steps) from cached ids: {text_ab.verdict}")
print(f"* accuracy naive {base:.1%} vs DevicePipeline {fast:.1%} ({SIZES['seeds']} seed(s),"
      f" paired by seed): {delta_pp:+.1f} pp, {accuracy_verdict}; equal accuracy is argued from the"
      " same augmentation (DevicePipeline's defaults match naive's: its unit tests check its crops and flips),"
      " not shown here")
print(f"* steady state, naive against itself: {CONTROL_WORDS}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson2/`: write your own on-device
# pipeline (`FastPipeline`); the grader times it against the naive one and checks the accuracy.
#
# ### References
#
# * PyTorch: [data loading, `DataLoader` and its workers](https://pytorch.org/docs/stable/data.html)
#   (`persistent_workers`, `prefetch_factor`), the
#   [`DataLoader` source](https://github.com/pytorch/pytorch/blob/main/torch/utils/data/dataloader.py)
#   (`_MultiProcessingDataLoaderIter._reset`: a persistent loader's new pass),
#   [pin_memory and non_blocking](https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html),
#   [performance tuning guide](https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html).
# * NVIDIA, [CUDA C++ Best Practices Guide, "Pinned Memory"](https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#pinned-memory):
#   page-locked host memory is what lets a host-to-device copy run asynchronously, overlapped with
#   kernels.
# * Hugging Face: [fast tokenizers](https://huggingface.co/docs/tokenizers/index) and
#   [`datasets.map` to tokenize once](https://huggingface.co/docs/datasets/process#map).
# * NVIDIA, [DALI](https://docs.nvidia.com/deeplearning/dali/) — GPU-side data pipelines.
# * D. Page, [How to train your ResNet](https://myrtle.ai/learn/how-to-train-your-resnet/), Myrtle.ai,
#   2018, and tysam-code, [hlb-CIFAR10](https://github.com/tysam-code/hlb-CIFAR10) — fast CIFAR-10
#   training with the data kept and augmented on the GPU, which airbench builds on.
# * K. Jordan, *94% on CIFAR-10 in 3.29 Seconds on a Single GPU*, 2024,
#   [arXiv:2404.00498](https://arxiv.org/abs/2404.00498), and
#   [cifar10-airbench](https://github.com/KellerJordan/cifar10-airbench) — the on-device CIFAR loader
#   this lesson's `DevicePipeline` follows.
#
# ### What to try next
#
# * Give `DevicePipeline` a lower-precision `dtype` and A/B it (lesson 3 says when that pays).
# * On a GPU, measure pinned vs pageable memory on its own: the copy is where it shows.
