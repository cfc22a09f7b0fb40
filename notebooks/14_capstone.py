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
# # Lesson 14 — The capstone speedrun
#
# **Goal:** combine what lessons 1-4 taught (lesson 1's data-wait split, lesson 2's input pipeline,
# lesson 3's precision, lesson 4's batch and LR, plus the channels-last layout lesson 3 left to try)
# on one recipe, and be judged the way the job is (the grader's tiers reward time to target, not the
# number of techniques: in five recorded gradings' ablations the reference's own pipeline with
# channels-last, nothing of lesson 4's, measured 1.24-1.85x to the target, above the nominal 1.7x top
# tier in three of them, and in its setup much of a recipe's gain can be fewer samples to the target rather
# than faster steps: on 8 data seeds naive reached the grader's target after 5-7 quarter epochs and
# the recipe with the pipeline, channels-last and batch 32 after 2 in 7 of them
# (`grader/assignments/lesson14/README.md` for the ablations, `calibration/README.md` there for the
# curves); the combination is
# what this lesson measures, with intervals that say when its few seeds cannot tell):
# on **time to target** — every step and every evaluation until the model reaches its accuracy —
# not on steps per second. We will:
#
# 1. time the naive CIFAR recipe to its target, evaluations on the clock, and probe it for a
#    waste (a probe can miss where a cost hides: the A/B is the judge);
# 2. walk a disciplined two-iteration search: change the suspected waste, let an A/B judge it,
#    change the next candidate, judge again, stop;
# 3. measure a change whose sign can depend on the device (lesson 3): bf16 autocast, timed here beside whether
#    this device multiplies bf16 in hardware;
# 4. attribute the gain: leave each change out in turn and measure what the recipe loses.
#
# **Run time**: about 2 min in `cpu` (114 s on a quiet 2-core Intel Xeon with AMX, no GPU, 2026-12-06, 80 s and 111 s in earlier quiet runs there:
# the outputs in `docs/recorded/`; 83-85 s on a quiet 2-core AMD EPYC Zen 4, AVX512-BF16; 460 s on a 2-core AVX2-only EPYC shared with other
# jobs at load 8-13) and about 30 s in `smoke`.
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one),
# `smoke` (tests only: its numbers show the code runs, not what is true). The CIFAR images here
# are the course's **synthetic stand-in** in the CIFAR-10 format (the `smoke` data, offline):
# the times are real, the accuracies say nothing about real CIFAR-10. You will predict twice and
# run your own recipe in *Your turn*. The quiz and the graded exercise are in
# `exercises/lesson14/`.

# %%
# %matplotlib inline
import math
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from tqdm.auto import tqdm

from effkit import lesson
from effkit.abtest import ABResult, median_ci, median_ci_coverage, verdict
from effkit.amp import cpu_native_bf16, cuda_native_bf16
from effkit.measure import DataWaitSplit, device_name
from effkit.workloads import cifar
from effkit.workloads.cifar.pipelines import DevicePipeline

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
# The naive recipe (narrow ResNet, per-image DataLoader, fp32, SGD 0.1, batch 128) on the synthetic
# CIFAR stand-in; its schedule in epochs, the evaluation cadence (a quarter epoch: every
# evaluation counts) and the target it must reach. `pairs`: naive/recipe pairs per comparison.
SIZES = {
    "smoke": dict(n_train=600, n_test=300, epochs=2, chunks=2, target=0.16, pairs=6),
    "cpu": dict(n_train=2000, n_test=1000, epochs=2, chunks=4, target=0.55, pairs=6),
    "gpu": dict(n_train=4000, n_test=1000, epochs=2, chunks=4, target=0.6, pairs=6),
}[PROFILE]
# The synthetic stand-in in the CIFAR-10 format, sized for six pairs per comparison.
DATA = Path(tempfile.mkdtemp(prefix="lesson14-"))
cifar.make_synthetic_cifar(DATA, SIZES["n_train"], SIZES["n_test"], seed=0)
print(f"profile {PROFILE!r} on {DEVICE_NAME}; data {DATA}")

# %% [markdown]
# ## 1. Time to target, evaluations on the clock
#
# A recipe is faster only if it reaches the target sooner. Steps per second miss a change that
# makes steps cheaper but needs more of them; a run that stops being evaluated looks fast until
# you ask when it got there. So the clock below runs from the first step to the first evaluation
# at or above the target, evaluations included. The grader's clock counts these too, with
# differences: it also times building the recipe (inside its first chunk) and, at the end of every chunk,
# saving the training state and the batches it trained on (its proof that the chunk did the work);
# it runs each recipe in a worker pinned to one core; and it charges every evaluation the median
# evaluation time of the whole grading, the same on both sides, so that a load spike during one
# evaluation is not read as speed. The CIFAR speedruns [Jordan 2024] also
# race to a fixed accuracy, but differently: airbench trains a fixed schedule, chosen so that its
# runs reach the target on average; its timer includes the whitening layer's set-up and the final
# test-time-augmented evaluation, but not the evaluations it logs after each epoch.
#
# Write the loop yourself: train a quarter epoch, evaluate, stop the clock at the target.

# %%
def time_to_target(changes: dict, seed: int = 0) -> dict:
    """Train the naive recipe with ``changes`` (cifar.build hooks) from scratch; seconds until the
    first evaluation at or above the target (None if never), and the accuracy curve."""
    trainer = cifar.build("naive", "smoke", data_dir=DATA, device=DEVICE, seed=seed,
                          epochs=SIZES["epochs"], target=SIZES["target"], **changes)
    spe, parts = trainer.steps_per_epoch, SIZES["chunks"]
    clock, reached, curve = 0.0, None, []
    for c in range(SIZES["epochs"] * parts):
        j = c % parts
        t0 = time.perf_counter()
        trainer.train_steps(round((j + 1) * spe / parts) - round(j * spe / parts))
        accuracy = trainer.evaluate()  # on the clock: the recipe cannot know it is there otherwise
        clock += time.perf_counter() - t0
        curve.append((clock, accuracy))
        if accuracy >= SIZES["target"]:
            reached = clock
            break
    trainer.pause()  # no DataLoader worker outlives the run
    return {"seed": seed, "seconds": reached, "curve": curve, "final": curve[-1][1]}  # final: where it stopped


def compare(name: str, changes: dict, baseline: dict | None = None, base_name: str = "naive") -> ABResult:
    """``baseline`` (naive unless given) and ``changes`` run back to back, ``pairs`` times (same
    seed per pair): the ratio of their times to target, its interval and that interval's coverage
    (exact for continuous times; at least that with the ties that whole evaluation chunks make). A run of ``changes`` that misses the target counts as a failure (ratio 0, below every
    pair that got there): dropping it would flatter the recipe (the grader is stricter: one missed
    run costs all its speed points). A seed on which the baseline misses is replaced by the next: if
    the change reached the target there, that seed was a win this count leaves out, so the ratio
    printed likely errs low (the grader sets its target where naive arrived in every run of its
    calibration, and refuses a grading
    in which its naive run misses). The pairs alternate which recipe runs first (A B, then B A), so
    a drift of the machine's speed during a comparison does not favour either."""
    ratios, runs, missed, skipped, seed = [], {"naive": [], name: []}, 0, 0, 0
    bar = tqdm(total=SIZES["pairs"], desc=name, leave=False)
    while len(ratios) < SIZES["pairs"] and seed < 2 * SIZES["pairs"]:
        change_first = len(ratios) % 2 == 1  # A B, B A, A B, ...
        b = time_to_target(changes, seed) if change_first else None
        a = time_to_target(baseline or {}, seed)
        runs["naive"].append(a)
        if a["seconds"] is None:
            skipped, seed = skipped + 1, seed + 1
            continue
        b = b or time_to_target(changes, seed)
        runs[name].append(b)
        seed += 1
        missed += b["seconds"] is None
        ratios.append(a["seconds"] / b["seconds"] if b["seconds"] else 0.0)
        bar.update()
    bar.close()
    if skipped:
        print(f"{name}: {base_name} missed the target on {skipped} seed(s), each replaced by the next"
              " seed (a seed where only the change got there was its win, left out: the ratio errs low)")
    RUNS[name], BASE_RUNS[name] = runs[name], runs["naive"]
    if baseline is None:
        RUNS.setdefault("naive", []).extend(runs["naive"])
    if missed:
        print(f"{name}: missed the target {SIZES['target']:.0%} in {missed} of {len(ratios)} pairs,"
              " each counted as a failure (the grader gives such a recipe no speed points)")
    if not ratios:
        print(f"{name}: {base_name} never reached the target {SIZES['target']:.0%}: no pair to compare")
        return None
    low, high = median_ci(ratios)
    res = ABResult(statistics.median(ratios), low, high, 0.95, len(ratios), [], [], ratios,
                   0.0, median_ci_coverage(len(ratios)))
    print(verdict(res, base_name, name).sentence)
    return res


RUNS: dict[str, list[dict]] = {}  # each comparison's runs of its recipe, by comparison
BASE_RUNS: dict[str, list[dict]] = {}  # and of its baseline
naive = time_to_target({})
NAIVE_S = "never" if naive["seconds"] is None else f"{naive['seconds']:.1f} s"
print(f"naive: target {SIZES['target']:.0%} reached after {NAIVE_S}; accuracy where it stopped {naive['final']:.1%}")

# %% [markdown]
# **Predict.** Lesson 1 split a step into data wait and compute. What share of the naive
# recipe's training loop is spent waiting for its per-image DataLoader, once it has started (the
# probe below skips the first two batches, the workers' start-up, which the run to the target pays
# again at every epoch: the DataLoader's workers are not persistent)?

# %%
GUESS_DATA_SHARE = None  # your guess, a fraction, e.g. 0.3

# %%
probe = cifar.build("naive", "smoke", data_dir=DATA, device=DEVICE, seed=0)
split = DataWaitSplit(DEVICE)
loss_fn = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(probe.model.parameters(), lr=0.1, momentum=0.9)


def step(x, y):
    loss = loss_fn(probe.model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


batches = iter(probe.pipeline)
for _ in range(2):  # the DataLoader's start-up (its workers' first batches): not the steady state
    step(*next(batches))
for i, (x, y) in enumerate(split.wrap(batches)):
    step(x, y)
    if i == 9:
        break
probe.pause()
lesson.check_guess(GUESS_DATA_SHARE, split.data_share, "share of the loop waiting for data", "{:.0%}")

# %% [markdown]
# A small steady-state wait does not by itself point at the pipeline, and the probe leaves out two
# of its costs: the workers' start-up, paid again at every epoch on the clock of time to target, and
# the worker processes sharing the host's cores with the model (lesson 2), which on a host with few
# cores puts some of the pipeline's cost into the compute time (not measured apart here). The A/B
# below sees all of it: whether the pipeline was a waste worth removing is for it to say, not the
# probe.
#
# ## 2. Two iterations: change a suspected waste, let the A/B judge, stop
#
# **Iteration 1.** The input pipeline: a batched, device-resident pipeline (lesson 2; here
# effkit's `DevicePipeline` — the exercise asks for your own).

# %%
ITER1 = {"pipeline": DevicePipeline}
iter1 = compare("device pipeline", ITER1)

# %% [markdown]
# **Iteration 2.** A hypothesis, not yet a measurement: with the data wait gone, the model's own
# compute, mostly its convolutions, is the largest cost left (a step profile, lesson 10, is how to
# check it; this lesson does not run one). Intel's documentation states that oneDNN, PyTorch's CPU
# convolution library, performs much better in the channels-last (NHWC) layout than in the
# default NCHW [Intel, *Channels Last*] (a statement of its design, not a measurement here), so
# channels-last, which lesson 3 left under "what to try next", is the candidate. The comparison
# below tests it on this device, which need not be an Intel CPU: if the layout buys nothing here,
# the hypothesis or its premise was wrong on this device.
#
# **Predict.** How much faster to the target will the recipe with both changes be than naive?

# %%
GUESS_BOTH = None  # your guess, e.g. 1.6

# %%
ITER2 = {**ITER1, "channels_last": True}
iter2 = compare("pipeline + channels_last", ITER2)
if iter2 is not None:
    lesson.check_guess(GUESS_BOTH, iter2.ratio, "time-to-target speed-up, both changes", "{:.2f}x")
# The hypothesis's own test: iteration 2 against iteration 1, not against naive (whose gap the
# pipeline already explains). Not a bar of its own in the plots below: the same recipe as above.
layout = compare("+ channels_last", ITER2, baseline=ITER1, base_name="the device pipeline")
LAYOUT_RUNS = RUNS.pop("+ channels_last", [])  # kept for section 4, not a bar of the plots
if iter2 is not None:
    print("both changes together: " + ("faster than naive to the target, the whole interval above 1x"
          if iter2.faster() else "not shown faster than naive with these seeds: the interval reaches"
          f" {iter2.ci_low:.2f}x, so section 4 has no saved time to share out"))

# %% [markdown]
# The first comparison says how far both changes got together, where its interval clears 1x (the
# line above says whether it did); the second is the hypothesis's test: what channels-last adds on
# top of the pipeline, read through its interval. If that test says "no clear difference", it has
# neither confirmed nor refuted the hypothesis: a recipe that keeps channels-last then keeps a change
# not shown to pay here, which is a choice to state, and more pairs (or the grader's own runs) are
# what would settle it; section 4's share of channels-last asks the same question another way.
#
# Stop here, for this lesson's two iterations: a third change is worth making only if a measurement
# shows a waste it removes. The exercise's challenge (this course's own) is 1.5x with no worse than
# −0.2 pp; chasing the last percent without a measured reason fits a recipe to the noise of the few
# runs that judged it.
# One lever this section did not pull is lesson 4's batch size: it changes how many samples reach
# the target, not only what a step costs, so only time to target can judge it (*Your turn*).
#
# ## 3. Gains depend on the device: bf16 here
#
# bf16 autocast halves the bytes of each matmul's operands. Whether that pays depends on the
# hardware (lesson 3): CPUs with AMX or AVX512-BF16 and GPUs with bf16 tensor cores (Ampere on)
# multiply bf16 natively; elsewhere it is emulated, with casts on top. The cell below says which
# this device is, and times it: the measurement, not the rule, is the answer for this device.
# Native units do not guarantee a gain: on a small network the casts autocast inserts and
# the fixed cost of each bf16 call can outweigh the faster multiplies (the course's calibration of
# lesson 10's doctor measured oneDNN's bf16 call at about 16 µs even for a 16 x 16 `Linear` on an
# AMD EPYC Zen 4: `benchmarks/results/doctor-calibration.md`).

# %%
def burst(changes: dict):
    """One burst of training steps of the two-change recipe with ``changes``: for `lesson.ab`."""
    trainer = cifar.build("naive", "smoke", data_dir=DATA, device=DEVICE, seed=0, **ITER2, **changes)
    trainer.train_steps(2)  # warm-up: first-call costs are not the step's

    def run():
        trainer.train_steps(4)
        return 4 * trainer.describe()["batch_size"]

    return run


if DEVICE.type == "cuda":
    NATIVE_BF16 = cuda_native_bf16(torch.cuda.get_device_capability(DEVICE))
else:
    NATIVE_BF16 = cpu_native_bf16()
print(f"{DEVICE_NAME}: bf16 {'native' if NATIVE_BF16 else 'emulated (no bf16 units found)'}")
bf16 = lesson.ab("bf16 on this device", burst({}), burst({"precision": "bf16"}), pairs=6,
                 a_label="fp32", b_label="bf16", dev=DEVICE)
OUTCOME = "faster" if bf16.faster() else "slower" if bf16.slower() else "no clear difference"
print(f"bf16 here ({'native' if NATIVE_BF16 else 'emulated'}): {OUTCOME} per step")

# %% [markdown]
# (Per step, not to the target: a change that slows every step cannot reach the target sooner
# with the same samples.)
#
# ## 4. Attribution: leave each change out
#
# Solo gains do not add up: two changes that shrink the same cost overlap. What a change is worth
# *in your recipe* is what the recipe loses without it — a leave-one-out ablation. Its share of
# the saved time is `(1/s_without - 1/s_full) / (1 - 1/s_full)`, with `s` the speed-ups over naive;
# in times to target, `(T_without - T_full) / (T_naive - T_full)`: the part of the saved time that
# leaving the change out gives back. It is not bounded by 0% and 100%: above 100%, the recipe without
# the change is slower than naive (what is left loses on its own, and the change more than pays for
# it); below 0%, the recipe is faster without the change (it costs time here). Near a full recipe
# barely faster than naive the denominator is small, so shares there swing widely: read the interval.

# %%
def share(full: float, without: float) -> float:
    return (1 / without - 1 / full) / (1 - 1 / full)


def pct(x: float) -> str:  # a missed ablation's share is infinite: more than all the saved time
    if math.isinf(x):
        return "more than all"
    return f"{x:.1%}" if abs(x) < 0.01 else f"{x:.0%}"  # -0.3% is not "-0%"


def ratios_by_seed(runs: list[dict], base: list[dict]) -> dict[int, float]:
    """One comparison's time-to-target ratios (its baseline's time / its recipe's), by seed: each
    from two runs made back to back, so a change in the machine's speed between comparisons (a
    neighbour's job starting) cancels out of it. A recipe run that missed the target: 0."""
    base_s = {r["seed"]: r["seconds"] for r in base if r["seconds"] is not None}
    return {r["seed"]: base_s[r["seed"]] / r["seconds"] if r["seconds"] else 0.0
            for r in runs if r["seed"] in base_s}


def share_interval(samples: dict[int, float | None]) -> tuple[float, float, float, float, int] | None:
    """Median, interval, coverage and seed count of per-seed shares; None with fewer than 2 seeds,
    or where a seed's share is undefined (the full recipe saved no time there: an interval over the
    other seeds would be chosen by their outcome)."""
    if len(samples) < 2 or any(v is None for v in samples.values()):
        return None
    values = list(samples.values())
    low, high = median_ci(values)
    return statistics.median(values), low, high, median_ci_coverage(len(values)), len(values)


# The shares per seed, each from ratios measured within one comparison (`share_interval` says why).
# s_full: naive / the full recipe. Without the pipeline is new: its share is the formula above, from
# s_full and s_without (naive / the recipe without it), an ablation run that missed the target
# giving back more than all the saved time (an infinite share, kept in the median). Without
# channels-last is iteration 1's recipe, and section 2's layout test ran it beside the full recipe
# on each seed: with r = T_without / T_full from that test's own pairs, the share is
# (r - 1) / (s_full - 1), the same formula, with s_full from another comparison than r (an
# estimate across two sets of runs, not one run's ratio), and its sign is that pair's verdict. Each
# interval below covers the median of the per-seed shares, not the share at the median times.
compare("without the pipeline", {"channels_last": True})
s_full = ratios_by_seed(RUNS["pipeline + channels_last"], BASE_RUNS["pipeline + channels_last"])
s_without = ratios_by_seed(RUNS["without the pipeline"], BASE_RUNS["without the pipeline"])
r_layout = ratios_by_seed(LAYOUT_RUNS, BASE_RUNS.get("+ channels_last", []))  # T_iter1 / T_iter2


def defined(f):  # a share exists only where the full recipe saved time on that seed
    return f is not None and f > 1


without = {
    "device pipeline": {k: (share(s_full.get(k), w) if w > 0 else math.inf) if defined(s_full.get(k)) else None
                        for k, w in s_without.items() if k in s_full},
    "channels_last": {k: (r - 1) / (s_full[k] - 1) if defined(s_full.get(k)) and r > 0 else None
                      for k, r in r_layout.items() if k in s_full},
}
misses = {"device pipeline": sum(r["seconds"] is None for r in RUNS["without the pipeline"]),
          "channels_last": sum(r["seconds"] is None for r in BASE_RUNS.get("+ channels_last", []))}
shares = {}
for change, samples in without.items():
    if iter2 is None or not iter2.faster() or not samples:
        print(f"  {change}: no share: the full recipe is not shown faster than naive (section 2)")
        continue
    # a run of the pipeline's ablation that missed is among its samples (a share of infinity); the
    # layout test's base is its comparison's baseline, whose misses were skipped, not sampled
    runs_made = len(samples) + (misses[change] if change == "channels_last" else 0)
    if 2 * misses[change] >= runs_made:  # then the median is no time to target, and no share
        print(f"  {change}: without it the recipe missed the target in {misses[change]} of "
              f"{runs_made} runs: it gives back more than a share can say")
        continue
    found = share_interval(samples)
    if found is None:
        print(f"  {change}: no share: on some seed the full recipe was not faster than naive")
        continue
    shares[change] = found
    mid, low, high, cover, seeds = found
    said = "not resolved from zero" if low <= 0 <= high else "resolved from zero"
    print(f"  {change}: {pct(mid)} of the saved time ({pct(low)} to {pct(high)}, covering the median "
          f"{cover:.0%} of the time over {seeds} seeds: {said})")

# %%
# The attribution as a picture: each recipe's median time to target; the saved time is the gap
# between naive and the full recipe, and a change's share is how much of it its absence gives back.
# A run that missed the target counts as never getting there (as `compare` counts it), so a
# recipe that missed in at least half its runs has no median: it is drawn as a red "missed" mark.
def median_seconds(runs: list[dict]) -> float | None:
    middle = statistics.median(math.inf if r["seconds"] is None else r["seconds"] for r in runs)
    return None if math.isinf(middle) else middle


medians = {name: median_seconds(runs) for name, runs in RUNS.items() if runs}
labels = [f"{name} ({sum(r['seconds'] is None for r in RUNS[name])}/{len(RUNS[name])} missed)"
          for name in medians]
fig, ax = plt.subplots(figsize=(7, 2.8))
ax.barh(labels, [m or 0.0 for m in medians.values()], color="tab:blue")
for y, m in enumerate(medians.values()):
    if m is None:
        ax.text(0, y, "  missed the target in at least half its runs", va="center", color="tab:red")
if medians.get("naive") and medians.get("pipeline + channels_last"):
    ax.axvspan(medians["pipeline + channels_last"], medians["naive"], color="tab:green", alpha=0.15,
               label="time saved by both changes")
    ax.legend(fontsize=7)
ax.set(xlabel="median seconds to the target, evaluations included", title="Where the time went")
plt.show()

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
for name, runs in RUNS.items():
    t, acc = zip(*runs[0]["curve"], strict=True)
    ax.plot(t, acc, marker="o", ms=3, label=name)
ax.axhline(SIZES["target"], color="grey", ls="--", lw=1, label="target")
ax.set(xlabel="seconds, evaluations included", ylabel="held-out accuracy",
       title=f"Time to target on {DEVICE_NAME}")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# A share belongs to its recipe, its data and its machine. The grader measures in another setup:
# one core per worker, its own synthetic set to a 0.95 target, your batch size. There the
# exercise's reference recipe (its own pipeline, channels-last, batch 32) measured channels-last's
# share at 3% (−26% to 13%) quiet and −12% (−34% to −11%) beside a busy process on a 2-core AMD EPYC
# Zen 4, and 17% (−111% to 21%) in a quiet grading on the 2-core AMX Xeon this lesson was recorded
# on (`grader/assignments/lesson14/calibration/README.md`): three pairs give wide intervals. Predict the grader's shares from the
# grader's setup, not from the lines above.
#
# ## Your turn
#
# Build your own recipe from the hooks `cifar.build` takes (`batch_size`, `lr`, `precision`,
# `channels_last`, `compile`, `pipeline`) and time it to the target. A first try: twice the batch
# with lesson 4's linear LR rule (twice the LR). Does it still reach the target sooner, or does it
# need more samples? Then half the batch at half the LR: more, cheaper steps per epoch. Which way
# pays here is for the clock to say, not the cost of one step.

# %%
MY_CHANGES = {**ITER2, "batch_size": 256, "lr": 0.2}  # your turn: change these
mine_run, base_run = time_to_target(MY_CHANGES), time_to_target({})
def _to_target(run):  # None: the schedule ended before the target
    return "never reached the target" if run["seconds"] is None else f"{run['seconds']:.1f} s to the target"


print(f"my recipe: {_to_target(mine_run)}, naive {_to_target(base_run)} (one pair: run `compare` for an"
      " interval)")

# %% [markdown]
# ### In your own words
#
# Section 4 left each change out of the two-change recipe. Explain in 2–3 sentences why the
# capstone is judged on time to target, and why a change's leave-one-out share can differ from
# the gain it gives alone.
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=14)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(14, DEVICE_NAME, " (synthetic CIFAR stand-in)"))
print(f"* naive: {NAIVE_S} to {SIZES['target']:.0%} (evaluations included), where it stopped "
      f"{naive['final']:.1%}; data wait {split.data_share:.0%} of its loop")
for name, res in (("device pipeline", iter1), ("pipeline + channels_last", iter2)):
    print("* " + (verdict(res, "naive", name).sentence if res else f"{name}: target not reached"))
if layout is not None:
    print("* " + verdict(layout, "the device pipeline", "+ channels_last").sentence)
print(f"* bf16 per step on this device ({'native' if NATIVE_BF16 else 'emulated'}): {bf16.verdict}")
for change, (mid, low, high, cover, _) in shares.items():
    said = "not resolved from zero" if low <= 0 <= high else "resolved from zero"
    print(f"* leaving out {change}: {pct(mid)} of the saved time ({pct(low)} to {pct(high)}, "
          f"{cover:.0%} coverage: {said})")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson14/`: declare your recipe as named
# changes to the naive recipe, with your own pipeline, and predict the share of the gain of your
# three most impactful changes. Your pipeline must gain on its own: the tiers need it, timed alone
# in the naive recipe, above lesson 2's floor (settings alone cleared the top tier in the grader's
# setup), against naive's DataLoader as written and against it without its worker processes: on
# the grader's one core those workers cost more than they hide, so dropping them alone cleared the
# floor against naive as written in one grading and in 1 of 3 later rounds (the other two had
# medians of 1.19x and 1.13x, the first with an interval reaching below 1x;
# `grader/assignments/lesson14/README.md`), and it
# is a setting, not a pipeline of your own.
# The grader times naive and your recipe to its target in its own
# sandbox, interleaved chunk by chunk (A B B A), and evaluates your committed weights itself. Its accuracy
# gate fails your recipe only when its final accuracy is confidently below naive's minus 0.2 pp: that
# tolerance widened by the run-to-run noise of its three pairs. On a 2-core AMX Xeon, where that
# noise was measured (30 pairs), a grading fails when its three pairs' mean drop is beyond about
# −0.52 pp, so by the grader's simulation a recipe that truly loses 0.5 pp still passes a third to
# over half of the time (36% resampling the measured pairs, 56% under a normal model) and one that loses 0.75 pp 5-10% of the time (`grader/assignments/lesson14/calibration/README.md`);
# on a CPU model whose noise it has not measured the gate assumes 1 pp per pair (more lenient to
# you): the mean drop must pass about −1.5 pp. And the grader's held-out set is easy: naive's final
# accuracy was 100% in 17 of those 30 runs, so a recipe that trains worse has little room to show
# it there. The −0.2 pp is the challenge's aim; what the gate holds out on that Xeon is drops of
# about 1 pp, and on a CPU model it has not measured only larger ones.
# It runs its own leave-one-out ablations and shows your predicted shares beside what they
# measured; that attribution earns no points yet (the grader's README says why).
#
# ### References
#
# * K. Jordan, *94% on CIFAR-10 in 3.29 Seconds on a Single GPU*, 2024,
#   [arXiv:2404.00498](https://arxiv.org/abs/2404.00498), and
#   [cifar10-airbench](https://github.com/KellerJordan/cifar10-airbench) — time to a fixed
#   accuracy as the measure (a fixed schedule whose runs reach it on average; the timer covers
#   training and the final evaluation, not the per-epoch logging evaluations), and the optimized
#   CIFAR recipe this course's `optimized` recipe follows.
# * Intel, [*Channels Last*](https://intel.github.io/intel-extension-for-pytorch/cpu/2.5.0+cpu/tutorials/features/nhwc.html),
#   Intel Extension for PyTorch documentation — NHWC on CPU through oneDNN, "much better
#   performance than NCHW" on Intel's CPUs; and PyTorch's
#   [channels-last tutorial](https://docs.pytorch.org/tutorials/intermediate/memory_format_tutorial.html).
# * K. Jordan et al., [modded-nanogpt](https://github.com/KellerJordan/modded-nanogpt) — a
#   speedrun record board: each record a new time to a fixed validation loss and the changes that
#   set it. Its README's record table gives one time per record, and some records bundle several
#   changes under that one time (record 17: sparser value embeddings, a better rotary embedding and
#   one attention layer dropped); the table does not split a record's time among its changes.
# * The challenge (at least 1.5x time-to-target speed-up with no worse than −0.2 pp, the three
#   most impactful changes and their measured effects; 1.7x a second tier) is this course's own,
#   set in its design (issue 55), not taken from a published source.
# * R. Kohavi, D. Tang, Y. Xu, *Trustworthy Online Controlled Experiments*, Cambridge UP, 2020 —
#   read a comparison through its interval, and check an experiment's own noise with A/A tests.
#   (The paired runs here, alternating which recipe runs first, follow lesson 1's protocol, not
#   the book's.)
#
# ### What to try next
#
# * Run section 3 on a device with the other answer to "native bf16?" (an AMX or AVX512-BF16
#   CPU, an Ampere or later GPU, or an AVX2-only CPU): does the sign of bf16's gain follow it?
# * Add `compile=True`: here, in `time_to_target`, nothing is warmed up, so compilation is on the
#   clock of the first run (later runs in this kernel may reuse its caches). The grader first runs
#   an unscored warm-up with your hooks in the same worker, so what that caches is off its clock.
#   When does compiling pay back, and on which clock?
