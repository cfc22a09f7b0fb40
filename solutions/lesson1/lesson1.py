# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 1 — Measure first: exercise
#
# Before speeding anything up, measure where the time goes. You will write three small tools and the
# grader will run them on training runs it builds itself, where it knows the answer:
#
# 1. `measure_throughput(trainer, steps, warmup)` — samples/s of training;
# 2. `data_wait_share(trainer, steps)` — the share of a training loop spent waiting for data;
# 3. `name_bottleneck(trainer)` — which part to optimise first: `"input pipeline"` or `"compute"`.
#
# Every `trainer` is a course `Trainer` (see `effkit.workloads.common`): `trainer.train_steps(n)` runs
# `n` optimizer steps, input pipeline included, and returns a `Work` whose `.samples` is the number of
# training samples processed; `trainer.device`, `trainer.pipeline` (iterating it yields `(x, y)`
# batches already on the device: one epoch for the course's pipelines, an endless stream for the
# grader's trainers, so take what you need with `itertools.islice`), `trainer.model`,
# `trainer.loss_fn` and `trainer.optimizer` are there too.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import itertools
import time

import torch

from effkit.measure import DataWaitSplit, device_name, sync
from effkit.workloads import cifar
from grader.assignments.lesson1.task import BOTTLENECKS, TOLERANCE


# %% [markdown]
# ## 1. Throughput
#
# Write `measure_throughput(trainer, steps, warmup)`: run `warmup` steps **untimed**, then time
# `steps` steps with `time.perf_counter`, calling `sync(trainer.device)` right before starting and
# right before stopping the clock (GPU work is asynchronous: without a sync you time the kernel
# launches). Return **samples** per second (`Work.samples`, not steps) as a float.
#
# **How it is graded.** While your function runs, the grader times the same steps with its own
# clock (from the moment the first step after your warm-up asks for its batch until the last step's
# forward pass is answered) and counts their samples itself. Your figure must lie within
# **±25%** of the grader's (`TOLERANCE`) in each of three calls, at batch 32 (2 warm-up steps, then 8)
# and again at batch 16 (1, then 6). It also checks what ran: exactly
# `warmup` + `steps` steps, each a batch then a forward pass on it, and its device busy for at least
# half of the timed window (the rest is allowed for the round trips to the grader and the step's own
# host work): a window padded with a sleep is not a measurement of the steps. The grader's trainers pay a
# *cold start* on the first step of each call — as a fresh trainer pays for starting DataLoader
# workers, allocating memory or autotuning — that costs more than the timed steps themselves: a
# measurement that times its warm-up comes out less than half as fast. The grader's steps last
# 0.08-0.32 s each, drawn per call, and every one of the three calls must land in the band (a figure
# guessed from a typical step lands in about a third of them), it asks for 6 or 8 timed steps, and
# it runs torch on one thread during the checks. Time one burst: the grader repeats the call itself
# (repeating inside your function runs more steps than it asked for).

# %% nbgrader={"grade": false, "grade_id": "measure_throughput", "locked": false, "schema_version": 3, "solution": true, "task": false}
def measure_throughput(trainer, steps, warmup):
    """Samples/s of `trainer.train_steps` over `steps` steps, after `warmup` untimed steps."""
    ### BEGIN SOLUTION
    trainer.train_steps(warmup)
    sync(trainer.device)
    start = time.perf_counter()
    work = trainer.train_steps(steps)
    sync(trainer.device)
    return work.samples / (time.perf_counter() - start)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_throughput", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_throughput", "lesson1.ipynb")


# %% [markdown]
# ## 2. How long do we wait for data?
#
# Write `data_wait_share(trainer, steps)`: run `steps` training steps **yourself** over
# `trainer.pipeline` — forward with `trainer.model`, loss with `trainer.loss_fn`, `backward`, then
# `trainer.optimizer.step()` — and return the fraction of the loop's wall time spent *inside
# `next()`*, waiting for the next batch (a number between 0 and 1). `effkit.measure.DataWaitSplit`
# does the bookkeeping (it books the loop's total when the wrapped iterator ends or you break out
# of the loop), or time `next()` yourself.
#
# **How it is graded.** On six trainers, in random order, each at batch 32 with `steps=5`: three
# compute-bound ones, whose batch takes 3-12% of a step's compute time to arrive, and three
# input-bound ones, whose batch takes 2 to 4 times a step's compute time. They come in pairs
# that share a duration (the same compute time; the same step time; the same time inside
# `next()`), so no single duration tells the kinds apart: the share you return needs the wait set
# beside the whole loop's time. The grader records how long it spent
# serving batches and computing steps, and your share must lie within **15 percentage points** of
# the share it recorded, over the training steps your loop ran (at least `steps`, each a batch then a
# forward pass on it). A share outside that band is measured twice more and the medians decide,
# so one run disturbed by other jobs on a shared machine does not cost you the points.

# %% nbgrader={"grade": false, "grade_id": "data_wait_share", "locked": false, "schema_version": 3, "solution": true, "task": false}
def data_wait_share(trainer, steps):
    """Fraction of a `steps`-step training loop's wall time spent waiting for batches."""
    ### BEGIN SOLUTION
    model, loss_fn, optimizer = trainer.model, trainer.loss_fn, trainer.optimizer
    model.train()
    split = DataWaitSplit(trainer.device)
    for x, y in split.wrap(itertools.islice(trainer.pipeline, steps)):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return split.data_share
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_data_wait", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_data_wait", "lesson1.ipynb")


# %% [markdown]
# ## 3. Name the bottleneck
#
# Write `name_bottleneck(trainer)`: measure, then return `"input pipeline"` when the input pipeline
# costs more than half of each training step, else `"compute"` (`BOTTLENECKS` holds both names).
# Decide from your measurement, not from the trainer's type or settings.
#
# Do not decide from `data_wait_share` alone. Why can that timer lie? It sees only the time spent
# inside `next()`. When a pipeline prepares each batch in the training process itself, that time is
# its whole cost. DataLoader worker processes prepare batches in parallel instead, on the cores the
# model computes on (lesson 1, section 4): `next()` returns at once, and the pipeline's cost shows
# up as slower steps, which the timer books as compute.
#
# Measure what removing the pipeline buys instead, as the lesson's A/B did: time a few steps over
# `trainer.pipeline`, then the same number of steps on one batch you fetched once (no pipeline at
# all), alternating the two a few times. The pipeline costs more than half a step when the steps
# without it run more than twice as fast.
#
# **How it is graded.** On four trainers at batch 32, in random order: two compute-bound and two
# input-bound, built as in part 2. One of the input-bound trainers works like DataLoader workers:
# its batches arrive almost at once (`next()` takes 3-11% of its step), and each batch's preparation
# time (2 to 4 times a step's compute) is paid during the first forward pass after the batch was
# fetched. Later passes on that same batch do not pay it, so train one untimed step on the batch you
# fetched once before timing steps on it. `data_wait_share` sees almost
# none of that cost, so an answer built on it names this trainer wrong. The four come in pairs
# that share a duration (a compute-bound and an input-bound trainer with the same compute time; the
# compute-bound one and the hidden one with the same step time and the same `next()` time), so a
# line drawn on any one duration names one of a pair wrong. All four must be named right, so an
# answer that never changes scores nothing. Each trainer is asked twice, and a third time when the
# two answers differ: the majority decides, so one run disturbed by a busy machine is outvoted, and
# a guess is right only half the time.

# %% nbgrader={"grade": false, "grade_id": "name_bottleneck", "locked": false, "schema_version": 3, "solution": true, "task": false}
def name_bottleneck(trainer):
    """Return "input pipeline" or "compute": the part of `trainer`'s time to optimise first."""
    ### BEGIN SOLUTION
    model, loss_fn, optimizer = trainer.model, trainer.loss_fn, trainer.optimizer
    model.train()

    def passes():  # one pass after another, as training runs: a burst starts no new pass
        while True:
            yield from trainer.pipeline

    stream = passes()
    fixed_x, fixed_y = next(stream)

    def seconds(batches):
        sync(trainer.device)
        start = time.perf_counter()
        for x, y in batches:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        sync(trainer.device)
        return time.perf_counter() - start

    seconds([(fixed_x, fixed_y)])  # warm-up: one-off costs out of the timed pairs
    ratios = []
    for _ in range(3):  # interleaved pairs: a burst of load slows both sides of one pair
        with_pipeline = seconds(itertools.islice(stream, 5))
        compute_only = seconds(itertools.repeat((fixed_x, fixed_y), 5))
        ratios.append(with_pipeline / compute_only)
    ratios.sort()
    return "input pipeline" if ratios[1] > 2 else "compute"
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_bottleneck", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_bottleneck", "lesson1.ipynb")

# %% [markdown]
# ## 4. Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. An A/B comparison reports a speedup with a *median-of-pairs interval*. It tells you:
#    (a) the range in which about 95% of single A/B pairs measured later will fall;
#    (b) the mean speedup over the pairs, plus or minus one standard deviation of their ratios;
#    (c) a range that holds the true median speed ratio with the coverage it states.
# 2. On a 2-core CPU, a loop with two DataLoader workers waits in `next()` for 4% of its time, and
#    the same steps on one batch fetched once (no pipeline) run 2.5x as fast. Which costs more of a step?
#    (a) compute: the loop waits for data only 4% of the time, so the model's step is the target;
#    (b) the input pipeline: the workers' per-image work slows the steps on the shared cores;
#    (c) neither: the fixed batch stays in cache, and that alone makes its steps 2.5x faster.
# 3. Why are warm-up steps left out of a throughput measurement?
#    (a) their learning rate is still ramping up, so each optimizer update does extra work;
#    (b) they pay one-off costs (allocation, worker start-up, lazy init) a long run does not;
#    (c) the timer needs a few readings to calibrate itself before its figures are trusted.
# 4. On a GPU, 5 steps timed without `sync(device)` give 3x the images/s of the same 5 steps timed
#    with a sync before each clock reading. Which figure is the training speed?
#    (a) the unsynchronised one: a sync stalls the GPU, which a real run never does, so it is slow;
#    (b) neither: both include the caching allocator's first allocations, which need a warm-up;
#    (c) the synchronised one: without it the clock stops when the work is queued, not finished.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "c", "q2": "b", "q3": "b", "q4": "c"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson1.ipynb")

# %% [markdown]
# ## 5. Your turn: the naive recipe (not graded)
#
# Point your tools at the course's naive CIFAR recipe, on this machine, at the lesson's profile
# (`cpu` here, `gpu` with CUDA: `smoke` only shows that code runs). Which bottleneck does it have
# here? Lesson 2 attacks the input pipeline; on a GPU the answer can differ from a laptop CPU's —
# measure before you decide. (Your `data_wait_share` starts a fresh pass, so its first `next()`
# includes the workers' start-up, which the lesson's section 4 keeps apart from the steady state.)

# %%
from effkit import lesson

naive = cifar.build("naive", lesson.profile())
print(f"naive CIFAR on {device_name(naive.device)}: "
      f"{measure_throughput(naive, steps=3, warmup=1):.0f} samples/s, "
      f"{data_wait_share(naive, steps=4):.0%} of the loop waiting for data; "
      f"bottleneck: {name_bottleneck(naive)}")
