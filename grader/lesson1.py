"""Lesson 1 - measure first: the checks of the notebook exercise (no out-of-kernel grading).

**What it does.** The learner writes ``measure_throughput``, ``data_wait_share`` and
``name_bottleneck``; the locked test cells call ``check_throughput``, ``check_data_wait`` and
``check_bottleneck`` (plus ``*_hidden`` variants with other sizes). They run the learner's code on
trainers the grader builds, where it knows the truth by construction: the naive CIFAR recipe fed
by a `GraderPipeline`, effkit's device-resident pipeline plus costs the grader chooses - a cold
start paid by the first batch (like DataLoader workers starting), and optionally CPU work per
batch worth ``SLOW_FACTOR`` training steps (an input-bound trainer). Throughput is compared with
the grader's own timing of the very steps the learner timed: its clock reads when the first step
after the warm-up asked for its batch and when the last ``train_steps`` call returned (synced), and
it counts the samples of those batches itself. Median ratio over ``CALLS`` calls, within
``TOLERANCE``.

**When to use it.** In ``solutions/lesson1/lesson1.ipynb`` (and the generated exercise). Import
this module in the locked setup cell, before any learner code runs: ``_clock`` is captured then.

**Expected gain.** A learner who times warm-up, counts batches instead of samples, or always
blames the same part gets a message naming what was expected and what came out.

**Pitfalls.** A shared 2-core CPU is noisy. So the checks run torch on one thread (two OpenMP
threads stall at every barrier when one is preempted: single steps then vary 100x), the per-batch
work is *CPU time* (``time.thread_time``), which a busy machine stretches like the training step
itself (a ``sleep`` would not), and the slow pipeline's work is calibrated on a measured step.
Timing the same steps matters most: separate, interleaved measurements of the learner's
function and the grader's disagreed by up to 19x in single pairs here, under bursts of load from
other jobs, where simultaneous ones agree within a few percent. A wrong share or name is asked
again (``RETRIES`` calls, median or majority): a process descheduled while inside ``next()``
must not fail a right answer, and a consistently wrong answer is wrong every time. In-kernel checks cannot stop a learner who patches this module
from their own cells; the clock, at least, is taken before their code runs.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from functools import partial

import torch

from effkit.measure import sync
from effkit.workloads import cifar
from effkit.workloads.cifar import DevicePipeline
from grader.pipeline_checks import expect, time_limit
from grader.quiet import quiet

_clock = time.perf_counter  # captured at import, in the locked setup cell: before learner code

BOTTLENECKS = ("input pipeline", "compute")
TOLERANCE = 0.25  # learner's samples/s / grader's must lie in [1 - TOLERANCE, 1 + TOLERANCE]
CALLS = 3  # calls of measure_throughput; the verdict uses the median ratio
RETRIES = 3  # calls of a learner's function whose first answer was wrong; the median/majority wins
WINDOW_S = 0.25  # the timed window the grader asks for (more steps on faster devices)
MAX_STEPS = 100
COLD_FACTOR = 1.5  # the cold start costs 1.5 timed windows: timing it gives ~0.4x the samples/s
SLOW_FACTOR = 3.0  # the input-bound trainer's per-batch CPU work, in training steps (share ~75%)
MAX_DATA_SHARE_COMPUTE_BOUND = 0.35  # measured 5-19% here, the input-bound one 73-98%
MIN_DATA_SHARE_INPUT_BOUND = 0.5
CALL_SECONDS = 120  # per call of learner code (an infinite loop fails the check, not the notebook)


def burn_cpu(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time: a busy machine stretches it like real work."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sum(range(500))


class GraderPipeline(DevicePipeline):
    """`DevicePipeline` plus costs the grader controls: ``cold_cpu_s`` before the first batch after
    `rearm`, ``batch_cpu_s`` before every batch."""

    def __init__(self, dataset, batch_size, device, seed, *, batch_cpu_s=0.0, cold_cpu_s=0.0):
        super().__init__(dataset, batch_size, device, seed)
        self.batch_cpu_s, self.cold_cpu_s = batch_cpu_s, cold_cpu_s
        self.cold = True
        self.requests: list[tuple[float, int]] = []  # (time a batch was asked for, its size)

    def rearm(self) -> None:
        self.cold, self.requests = True, []

    def __iter__(self):
        batches = super().__iter__()
        while True:
            asked = _clock()  # the trainer asks for a batch: a training step begins
            batch = next(batches, None)
            if batch is None:
                return
            self.requests.append((asked, len(batch[1])))
            if self.cold:
                self.cold = False
                burn_cpu(self.cold_cpu_s)
            burn_cpu(self.batch_cpu_s)
            yield batch


@contextlib.contextmanager
def _grading():
    """quiet() (stderr would zero the cell) and one torch thread (steady timings when shared)."""
    threads = torch.get_num_threads()
    with quiet():
        torch.set_num_threads(1)
        try:
            if time.perf_counter is not _clock:
                print("  note: time.perf_counter was replaced; the grader uses its own clock")
            yield
        finally:
            torch.set_num_threads(threads)


def build_trainer(batch_size: int, seed: int = 0, **costs):
    """The naive CIFAR recipe (smoke profile) fed by a `GraderPipeline` with ``costs``."""
    return cifar.build("naive", "smoke", batch_size=batch_size, seed=seed,
                       pipeline=partial(GraderPipeline, **costs))  # fmt: skip


def step_seconds(trainer, steps: int = 3) -> float:
    """Median wall time of one training step, after one warm-up step."""
    trainer.train_steps(1)
    times = []
    for _ in range(steps):
        sync(trainer.device)
        t0 = _clock()
        trainer.train_steps(1)
        sync(trainer.device)
        times.append(_clock() - t0)
    return statistics.median(times)


def watch_train_steps(trainer) -> list[float]:
    """Record (with the grader's clock, after a sync) when each ``train_steps`` call returns."""
    ends: list[float] = []
    train_steps = type(trainer).train_steps

    def watched(n):
        work = train_steps(trainer, n)
        sync(trainer.device)
        ends.append(_clock())
        return work

    trainer.train_steps = watched
    return ends


def grader_throughput(requests: list[tuple[float, int]], ends: list[float], warmup: int):
    """The grader's timing of the steps the learner timed: samples of the batches asked for after
    the first ``warmup``, from when the first of them was asked for until the last
    ``train_steps`` returned. None if the call ran no step after its warm-up."""
    if len(requests) <= warmup or not ends:
        return None
    return sum(n for _, n in requests[warmup:]) / (ends[-1] - requests[warmup][0])


def _call(fn, *args, **kwargs):
    """Call learner code under a time limit; a raise becomes a failed check naming the call."""
    shown = ", ".join(["trainer"] * len(args) + [f"{k}={v!r}" for k, v in kwargs.items()])
    call = f"{getattr(fn, '__name__', 'your function')}({shown})"
    with time_limit(CALL_SECONDS, call):
        try:
            return fn(*args, **kwargs), call
        except Exception as err:
            raise AssertionError(f"{call} raised {type(err).__name__}: {err}") from err


def _number(value, call: str, what: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    expect(ok, f"expected {call} to return {what} (a finite number), got {value!r}")
    return float(value)


def _throughput_hint(ratio: float, batch_size: int) -> str:
    if abs(ratio * batch_size - 1) < 0.5:
        return f" Off by the batch size ({batch_size}): count samples (work.samples), not steps."
    if ratio < 1:
        return (" Too low: are the warm-up steps (and the trainer's cold start) inside your "
                "timed region, or do you time more steps than you count?")  # fmt: skip
    return " Too high: do you count more samples than the steps you timed, or skip steps?"


def check_throughput(measure_throughput, batch_size=32, warmup=2, min_steps=6, seed=0) -> None:
    """The learner's samples/s agree with the grader's timing of the same steps, within
    TOLERANCE: both clocks run during the same call, so load on the machine hits both alike."""
    with _grading():
        trainer = build_trainer(batch_size, seed)
        step = step_seconds(trainer)
        steps = max(min_steps, min(MAX_STEPS, math.ceil(WINDOW_S / step)))  # fast devices: more
        trainer.pipeline.cold_cpu_s = COLD_FACTOR * step * steps
        ends = watch_train_steps(trainer)
        theirs, ours = [], []
        for _ in range(CALLS):
            trainer.pipeline.rearm()  # every call starts cold, as a fresh trainer would
            ends.clear()
            value, call = _call(measure_throughput, trainer, steps=steps, warmup=warmup)
            theirs.append(_number(value, call, "samples/s"))
            ours.append(grader_throughput(trainer.pipeline.requests, ends, warmup))
            expect(ours[-1] is not None,
                   f"expected {call} to run {warmup} warm-up steps, then {steps} timed steps, with "
                   f"trainer.train_steps; it ran {len(trainer.pipeline.requests)} steps with "
                   f"it")  # fmt: skip
        ratios = [t / o for t, o in zip(theirs, ours, strict=True)]
        ratio = statistics.median(ratios)
        shown = ", ".join(f"{r:.2f}" for r in ratios)
        summary = (f"{call}: yours {statistics.median(theirs):.1f} samples/s, the grader's timing "
                   f"of the same steps {statistics.median(ours):.1f} samples/s (batch "
                   f"{batch_size}, {CALLS} calls, ratios {shown})")  # fmt: skip
        hint = _throughput_hint(ratio, batch_size)
        expect(abs(ratio - 1) <= TOLERANCE,
               f"expected your throughput within ±{TOLERANCE:.0%} of the grader's measurement; "
               f"{summary}: median ratio {ratio:.2f}.{hint}")  # fmt: skip
        print(f"  ok  {summary}: median ratio {ratio:.2f}, within ±{TOLERANCE:.0%}")


def _pair(batch_size: int, seed: int):
    """A compute-bound and an input-bound trainer, the latter calibrated on the former's step."""
    compute_bound = build_trainer(batch_size, seed)
    step = step_seconds(compute_bound)
    input_bound = build_trainer(batch_size, seed + 1, batch_cpu_s=SLOW_FACTOR * step)
    return {"compute": compute_bound, "input pipeline": input_bound}, step


def _share_is_right(share: float, truth: str) -> bool:
    if truth == "input pipeline":
        return share >= MIN_DATA_SHARE_INPUT_BOUND
    return share <= MAX_DATA_SHARE_COMPUTE_BOUND


def check_data_wait(data_wait_share, batch_size=32, steps=5, seed=0) -> None:
    """The share of time waiting for data: high where the pipeline is slow, low where it is not."""
    with _grading():
        trainers, step = _pair(batch_size, seed)
        print(f"  (a training step takes {step * 1e3:.0f} ms here; the input-bound trainer's "
              f"pipeline spends {SLOW_FACTOR:.0f}x that preparing each batch)")  # fmt: skip
        for truth, trainer in trainers.items():
            shares = []
            # One wrong share is re-measured twice and the median decides: the process being
            # descheduled while inside next() on a busy machine must not fail a right answer.
            while len(shares) < RETRIES and (not shares or not _share_is_right(shares[0], truth)):
                value, call = _call(data_wait_share, trainer, steps=steps)
                share = _number(value, call, "a share of time")
                expect(0 <= share <= 1,
                       f"expected {call} to return a fraction in [0, 1], got {share:.3g} "
                       "(seconds instead of a share?)")  # fmt: skip
                shares.append(share)
            share = statistics.median(shares)
            got = f"got {share:.0%}" + (f" (median of {len(shares)} calls)" if shares[1:] else "")
            if truth == "input pipeline":
                expect(share >= MIN_DATA_SHARE_INPUT_BOUND,
                       f"on a trainer whose pipeline takes ~{SLOW_FACTOR:.0f}x a training step "
                       f"per batch (data wait ~{SLOW_FACTOR / (1 + SLOW_FACTOR):.0%}), expected "
                       f"a data-wait share >= {MIN_DATA_SHARE_INPUT_BOUND:.0%}, {got}")  # fmt: skip
            else:
                expect(share <= MAX_DATA_SHARE_COMPUTE_BOUND,
                       f"on a trainer with its data already on the device (a gather per batch), "
                       f"expected a data-wait share <= {MAX_DATA_SHARE_COMPUTE_BOUND:.0%}, {got}: "
                       f"is the training step inside your data wait?")  # fmt: skip
            print(f"  ok  {truth}-bound trainer: data-wait share {share:.0%}")


def check_bottleneck(name_bottleneck, batch_size=32, seed=0, order=("input pipeline", "compute")):
    """The named bottleneck is right on an input-bound and on a compute-bound trainer."""
    with _grading():
        trainers, _ = _pair(batch_size, seed)
        for truth in order:
            names = []
            # A wrong name is asked twice more and the majority decides (see check_data_wait).
            while len(names) < RETRIES and (not names or names[0] != truth):
                value, call = _call(name_bottleneck, trainers[truth])
                choices = f"expected {call} to return one of {BOTTLENECKS}, got {value!r}"
                expect(isinstance(value, str), choices)
                expect(value.strip().lower() in BOTTLENECKS, choices)
                names.append(value.strip().lower())
            name = max(BOTTLENECKS, key=names.count)
            votes = f" in {names.count(name)} of {len(names)} calls" if len(names) > 1 else ""
            expect(name == truth,
                   f"on the {truth}-bound trainer (built so: {_how(truth)}), expected "
                   f"{truth!r}, got {name!r}{votes}")  # fmt: skip
            print(f"  ok  {truth}-bound trainer named {name!r}")


def _how(truth: str) -> str:
    if truth == "compute":
        return "data resident on the device, one gather per batch"
    return f"its pipeline spends ~{SLOW_FACTOR:.0f}x a training step preparing each batch"


def check_throughput_hidden(measure_throughput) -> None:
    """Other sizes: hard-coded batch sizes, step counts or warm-ups show here."""
    check_throughput(measure_throughput, batch_size=16, warmup=1, min_steps=5, seed=3)


def check_bottleneck_hidden(name_bottleneck) -> None:
    """Another batch size and seed, compute-bound first."""
    check_bottleneck(name_bottleneck, batch_size=64, seed=7, order=("compute", "input pipeline"))
