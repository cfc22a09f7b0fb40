"""Lesson 1 - measure first: graded out of the kernel, against a device the grader simulates.

The learner's throughput, data-wait share and bottleneck name are run on a `RemoteTrainer` whose
every step waits on `DeviceServer` here, which picks secret costs and records the truth: nothing
in the learner's process knows the answer. Waits are sleeps, so the record (not a schedule) is
the truth; 3 calls and a median absorb a descheduled learner process.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

from grader.assignments.lesson1.task import BOTTLENECKS, TOLERANCE  # the setup cell's (worker side)
from grader.kit.assignment import Assignment
from grader.kit.checks import CheckFailed, Context, expect, quiz_check, stub_reason

SHARE_TOLERANCE = 0.15  # |learner's data-wait share - the recorded share|
CALLS = 3
RETRIES = 3
# A timed window is the steps at work, not a clock of the learner's making: a figure read off a known
# sleep S instead of the steps is within the ±25% band only when the window W <= 1.25 S, i.e. the
# device sat idle >= 80% of it. Half is the line: the reference's own idle (the channel's round trips
# and the step's host work, which a busy machine stretches) read 12-17% at load 3 on a 2-core Xeon.
IDLE_SHARE = 0.5
CALL_SECONDS = 60.0
COLD_FACTOR = 1.5  # the cold start costs 1.5x the timed steps: timing it gives < 0.45x
INPUT_BOUND = (2.0, 4.0)  # data time per step / compute time per step
COMPUTE_BOUND = (0.03, 0.12)
# No single duration may name the bottleneck: a learner must set two measurements side by side (a
# step with the pipeline against one without, or next() against the step). Two fixes, both found by
# fresh reviews: when input-bound steps lasted longer (compute 50-100 ms with data 2-4x on top,
# against 52-112 ms in all for compute-bound), a 0.13 s line on the step time named every
# bottleneck; with one step range for every kind, a line on one forward pass's time did (compute
# 24-80 ms input-bound, 107-233 ms compute-bound), each with two constants for the data-wait share:
# 6 of the 10 function points without a ratio. So the checks draw trainers in matched pairs: a
# compute-bound and an input-bound trainer with the same compute time, and a compute-bound and a
# hidden-pipeline (or input-bound) trainer with the same step time and the same next() time. A line
# on any one of these durations gives both trainers of a pair the same answer, so it fails one.
# Each step is two round trips on the grader's channel, whose scheduling delay the learner's timer
# sees and the record does not: at 15-30 ms a step, a host at load 7.5 put the reference's
# compute-bound share at 30% against 17% recorded (tolerance 15 points): steps stay >= 60 ms.
STEP_S = (0.08, 0.32)  # a step's whole time (data + compute), log-uniform
# the compute time a compute-matched pair shares, log-uniform: at 40-80 ms the compute-bound
# twin's share read up to 11 points above the record at load 4-5.6 (tolerance 15)
PAIR_COMPUTE_S = (0.06, 0.10)

SETUP_SOURCE = """\
import itertools
import time

import torch

from effkit.measure import DataWaitSplit, device_name, sync
from effkit.workloads import cifar
from grader.assignments.lesson1.task import BOTTLENECKS, TOLERANCE"""


class DeviceServer:
    """The learner trainer's "device": each request waits ``data_s`` or ``compute_s`` here.

    ``hidden_s``: pipeline time paid during the *next* forward pass after a batch was served
    (workers preparing batches on the cores the model computes on): a step on a batch fetched once
    does not pay it, and a data-wait timer does not see it.
    """

    def __init__(self, data_s: float, compute_s: float, cold_s: float = 0.0, hidden_s: float = 0.0):
        self.data_s, self.compute_s, self.cold_s, self.hidden_s = (
            data_s,
            compute_s,
            cold_s,
            hidden_s,
        )
        self._owed = 0.0  # hidden pipeline time the next forward pass pays
        self.events: list[tuple[str, int, float, float]] = []  # kind, samples, arrived, answered

    def __call__(self, msg: dict, blobs=()) -> dict:
        kind = msg.get("kind")
        n = msg.get("n")
        if kind not in ("data", "compute") or not isinstance(n, int) or not 0 < n <= 4096:
            raise CheckFailed(f"malformed request from the worker: {str(msg)[:80]}")
        t0 = time.perf_counter()
        cost = self.data_s if kind == "data" else self.compute_s + self._owed
        if kind == "data" and not any(e[0] == "data" for e in self.events):
            cost += self.cold_s
        self._owed = self.hidden_s if kind == "data" else 0.0
        time.sleep(cost)
        self.events.append((kind, n, t0, time.perf_counter()))
        return {}

    def throughput(self, warmup: int) -> float | None:
        """Samples/s of the steps after the first ``warmup``: from the first of their batch
        requests to the last answer."""
        data = [e for e in self.events if e[0] == "data"]
        if len(data) <= warmup:
            return None
        start = data[warmup][2]
        end = self.events[-1][3]
        return sum(e[1] for e in data[warmup:]) / (end - start)

    def data_share(self) -> float | None:
        data = sum(e[3] - e[2] for e in self.events if e[0] == "data")
        total = sum(e[3] - e[2] for e in self.events)
        return data / total if total > 0 else None

    def steps(self) -> int:
        return sum(1 for e in self.events if e[0] == "data")

    def training_steps(self, trailing_batch: bool = False) -> int | None:
        """How many training steps the events are (a batch, then one forward pass on it, repeated), or
        None when they are anything else; ``trailing_batch`` allows one batch asked for after the last
        step (a loop that stops on its next ``next()``)."""
        kinds = [e[0] for e in self.events]
        if trailing_batch and len(kinds) % 2 and kinds[-1] == "data":
            kinds = kinds[:-1]
        n = len(kinds) // 2
        return n if kinds == ["data", "compute"] * n else None

    def idle_share(self, warmup: int) -> float | None:
        """Share of the throughput window (see ``throughput``) in which the device served nothing."""
        data = [e for e in self.events if e[0] == "data"]
        if len(data) <= warmup:
            return None
        start, end = data[warmup][2], self.events[-1][3]
        busy = sum(e[3] - e[2] for e in self.events if e[2] >= start)
        return max(0.0, 1 - busy / (end - start)) if end > start else None


def _log_uniform(ctx: Context, bounds: tuple[float, float]) -> float:
    return math.exp(ctx.rng.uniform(math.log(bounds[0]), math.log(bounds[1])))


def _server(
    ctx: Context,
    truth: str = "compute",
    cold_steps: int = 0,
    hidden: bool = False,
    step: float | None = None,
    compute: float | None = None,
    prefetch: float | None = None,
) -> DeviceServer:
    """A trainer of kind ``truth`` whose step lasts ``step`` (drawn unless given), or whose compute
    lasts ``compute``; a hidden pipeline's next() costs ``prefetch`` (drawn unless given)."""
    ratio = ctx.rng.uniform(*(INPUT_BOUND if truth == "input pipeline" else COMPUTE_BOUND))
    if compute is None:
        compute = (step if step is not None else _log_uniform(ctx, STEP_S)) / (1 + ratio)
    data = compute * ratio
    if hidden:  # the pipeline's time moves into the forward pass; next() costs what a prefetch does
        if prefetch is None:
            prefetch = compute * ctx.rng.uniform(*COMPUTE_BOUND)
        return DeviceServer(prefetch, compute, hidden_s=data - prefetch)  # the step still lasts
    return DeviceServer(data, compute, COLD_FACTOR * cold_steps * (data + compute))


def matched_trainers(ctx: Context, hidden: bool) -> list[tuple[str, bool, Callable]]:
    """Four (kind, hidden, make a device) in two matched pairs: a compute-bound and an input-bound
    trainer sharing their compute time; a compute-bound and an input-bound one (its pipeline's time
    hidden in the forward pass where ``hidden``) sharing their step time and next() time. A retry
    makes a fresh device with the same shared times, so a line on one duration errs every time."""
    shared_compute = _log_uniform(ctx, PAIR_COMPUTE_S)
    step = _log_uniform(ctx, STEP_S)
    r = ctx.rng.uniform(*COMPUTE_BOUND)
    next_s = step * r / (1 + r)  # the compute-bound twin's data time, the hidden one's prefetch
    return [
        ("compute", False, lambda: _server(ctx, "compute", compute=shared_compute)),
        ("input pipeline", False, lambda: _server(ctx, "input pipeline", compute=shared_compute)),
        ("compute", False, lambda: DeviceServer(next_s, step - next_s)),
        (
            "input pipeline",
            hidden,
            lambda: (
                _server(ctx, "input pipeline", hidden=hidden, step=step, prefetch=next_s)
                if hidden
                else _server(ctx, "input pipeline", step=step)
            ),
        ),
    ]


# The data-wait check's third pair shares next()'s time: the first two share a compute or a step time,
# while the kinds' waits never overlapped (1.8-34 ms against 53-400 ms), so one timed next() against
# a line, with two constant shares, passed every grading (a review, 2026-12-07). 30-50 ms: the
# input-bound twin's step stays >= 37 ms, the compute-bound twin's 0.25-1.7 s.
PAIR_NEXT_S = (0.03, 0.05)


def next_matched_pair(ctx: Context) -> list[tuple[str, bool, Callable]]:
    """A compute-bound and an input-bound trainer whose batches take the same time to arrive."""
    wait = _log_uniform(ctx, PAIR_NEXT_S)
    return [
        ("compute", False, lambda: DeviceServer(wait, wait / ctx.rng.uniform(*COMPUTE_BOUND))),
        ("input pipeline", False, lambda: DeviceServer(wait, wait / ctx.rng.uniform(*INPUT_BOUND))),
    ]


def _call(ctx: Context, probe: str, server: DeviceServer, shown: str, **args) -> dict:
    r = ctx.session.call(probe, CALL_SECONDS, server, seed=ctx.rng.randrange(1 << 30), **args)
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"{shown} {r.failure}")
    return r.data


def _number(data: dict, shown: str, what: str) -> float:
    ok = data.get("type") == "number" and isinstance(data.get("value"), int | float)
    expect(
        ok,
        f"expected {shown} to return {what} (a finite number), got {data.get('repr', data.get('type'))}",
    )
    return float(data["value"])


def _throughput_hint(ratio: float, batch_size: int) -> str:
    if abs(ratio * batch_size - 1) < 0.5:
        return f" Off by the batch size ({batch_size}): count samples (work.samples), not steps."
    if ratio < 1:
        return (
            " Too low: are the warm-up steps (and the trainer's cold start) inside your "
            "timed region, or do you time more steps than you count?"
        )
    return " Too high: do you count more samples than the steps you timed, or skip steps?"


def throughput_once(ctx: Context, batch_size: int, warmup: int, steps: int) -> None:
    shown = f"measure_throughput(trainer, steps={steps}, warmup={warmup})"
    theirs, ours, idles = [], [], []
    for _ in range(CALLS):
        server = _server(ctx, "compute", cold_steps=steps)
        theirs.append(
            _number(
                _call(
                    ctx,
                    "throughput",
                    server,
                    shown,
                    batch_size=batch_size,
                    steps=steps,
                    warmup=warmup,
                ),
                shown,
                "samples/s",
            )
        )
        truth = server.throughput(warmup)
        ran = server.training_steps()
        expect(
            truth is not None and ran == warmup + steps,
            f"expected {shown} to run {warmup} warm-up steps, then {steps} timed steps "
            f"with trainer.train_steps; it ran {server.steps()} steps"
            + ("" if ran is not None else ", not each a batch then a forward pass on it"),
        )
        idle = server.idle_share(warmup)
        expect(
            idle <= IDLE_SHARE,
            f"{shown}: between the first timed step's batch and the last step, the grader's device "
            f"sat idle {idle:.0%} of the time (up to {IDLE_SHARE:.0%} is allowed for the channel's round trips): "
            "time the steps back to back, with nothing else inside the timed region",
        )
        idles.append(idle)
        ours.append(truth)
    ratios = [t / o for t, o in zip(theirs, ours, strict=True)]
    ratio = statistics.median(ratios)
    summary = (
        f"{shown}: yours {statistics.median(theirs):.1f} samples/s, the grader's record of the same "
        f"steps {statistics.median(ours):.1f} samples/s (batch {batch_size}, ratios "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + ")"
    )
    # every call, not their median: each call draws its own step time, so a figure guessed from a
    # typical step lands in the band in about 37% of calls: 1 in 20 for all three, 1 in 400 for both
    # sizes (the median let 53% and 28% through: a review, 2026-12-07). Honest ratios read 0.96-1.00.
    worst = max(ratios, key=lambda r: abs(r - 1))
    expect(
        abs(worst - 1) <= TOLERANCE,
        f"expected your throughput within ±{TOLERANCE:.0%} of the grader's record in every call; "
        f"{summary}: ratio {worst:.2f} in one." + _throughput_hint(worst, batch_size),
    )
    ctx.ok(f"{summary}: median ratio {ratio:.2f}; the device idle {max(idles):.0%} at most")


def check_throughput(ctx: Context) -> None:
    throughput_once(ctx, batch_size=32, warmup=2, steps=8)
    throughput_once(ctx, batch_size=16, warmup=1, steps=6)  # hard-coded sizes show here


def check_data_wait(ctx: Context) -> None:
    # both kinds, three times, in random order: in matched pairs (equal compute time; equal step time;
    # equal next() time), so constants picked by a line on one duration miss one trainer of a pair
    order = matched_trainers(ctx, hidden=False) + next_matched_pair(ctx)
    ctx.rng.shuffle(order)
    for truth, _, make in order:
        shown = "data_wait_share(trainer, steps=5)"
        shares, recorded = [], []
        while len(shares) < RETRIES and (
            not shares or abs(shares[0] - recorded[0]) > SHARE_TOLERANCE
        ):
            server = make()
            share = _number(
                _call(ctx, "data_wait", server, shown, batch_size=32, steps=5), shown, "a share"
            )
            expect(
                0 <= share <= 1,
                f"expected {shown} to return a fraction in [0, 1], got {share:.3g} "
                "(seconds instead of a share?)",
            )
            # training steps only: batches never trained on (or passes on no new batch) would move
            # the recorded share wherever a constant answer sits
            ran = server.training_steps(trailing_batch=True)
            expect(
                ran is not None and ran >= 5,
                f"expected {shown} to run 5 training steps over trainer.pipeline, each a batch then "
                f"a forward pass on it; it asked for {server.steps()} batches"
                + ("" if ran is not None else " and did not run a forward pass after each"),
            )
            shares.append(share)
            recorded.append(server.data_share())
        share, rec = statistics.median(shares), statistics.median(recorded)
        hint = (
            " Is that the compute share (1 - data share)?"
            if abs(1 - share - rec) <= SHARE_TOLERANCE
            else ""
        )
        expect(
            abs(share - rec) <= SHARE_TOLERANCE,
            f"on an {truth}-bound trainer the grader recorded a data-wait share of {rec:.0%}; your "
            f"{shown} returned {share:.0%} (allowed ±{SHARE_TOLERANCE:.0%}).{hint}",
        )
        ctx.ok(f"{truth}-bound trainer: data-wait share {share:.0%} (recorded {rec:.0%})")


def confirmed_answer(ask: Callable[[], str]) -> str:
    """The answer two calls agree on, or the majority of three. Every answer is confirmed, right or
    wrong, so a coin is right half the time (asking again only after a wrong answer gave it 5 in 8,
    and all four trainers in 15% of gradings: a review, 2026-12-07); a sound measurement that a busy
    moment turns once is outvoted."""
    names = [ask(), ask()]
    if names[0] != names[1]:
        names.append(ask())
    return max(set(names), key=names.count)


def check_bottleneck(ctx: Context) -> None:
    # both kinds, twice, in random order: a fixed answer fails; one input-bound trainer hides its
    # pipeline's time in the forward pass: a data-wait share misses it; matched pairs (equal compute
    # time; equal step and next() time): a line on one duration misses one trainer of a pair
    order = matched_trainers(ctx, hidden=True)
    ctx.rng.shuffle(order)
    for truth, hidden, make in order:

        def ask(make: Callable = make) -> str:
            data = _call(ctx, "bottleneck", make(), "name_bottleneck(trainer)", batch_size=32)
            value = data.get("value") if data.get("type") == "str" else None
            expect(
                isinstance(value, str) and value.strip().lower() in BOTTLENECKS,
                f"expected name_bottleneck(trainer) to return one of {BOTTLENECKS}, got "
                f"{data.get('repr', value)!r}",
            )
            return value.strip().lower()

        name = confirmed_answer(ask)
        hint = (
            " Its batches arrive at once: the pipeline's time is spent while the model computes"
            " (as DataLoader workers share its cores), where a data-wait timer cannot see it —"
            " time steps with and without the pipeline instead."
            if hidden
            else ""
        )
        expect(
            name == truth,
            f"on a trainer whose {'data' if truth != 'compute' else 'compute'} dominates "
            f"each step, expected {truth!r}, got {name!r}.{hint}",
        )
    ctx.ok(
        "input-bound (one with its pipeline's cost hidden from next()) and compute-bound trainers"
        " named right (each twice)"
    )


check_quiz = quiz_check("lesson1", ("q1", "q2", "q3", "q4"))


CELL_CHECKS = {
    "test_throughput": check_throughput,
    "test_data_wait": check_data_wait,
    "test_bottleneck": check_bottleneck,
    "test_quiz": check_quiz,
}


ASSIGNMENT = Assignment(
    "lesson1",
    "measure_throughput",
    SETUP_SOURCE,
    CELL_CHECKS,
    timeout_s=180,
    names=("measure_throughput", "data_wait_share", "name_bottleneck"),
)
