"""More than two arms timed in one interleaved run, and paired differences over seeds.

`time_arms` runs every arm once per round in the order A B C, then C B A, ...: each arm's
neighbours alternate, so a drift in the machine's speed hits all arms alike (ABBA for n arms).
Every ratio between two arms is then paired within rounds of the *same* run
(`ArmsResult.versus`, an `effkit.abtest.ABResult`), never medians of separate runs divided.
`lesson_arms` prints each arm's median with its interval and real coverage, and the lesson verdict
of each comparison asked for. `paired_difference` and `difference_verdict` do the same for an
outcome measured per seed on two arms (an accuracy): the median difference, its order-statistic
interval with its real coverage, and only the conclusion that interval supports.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from effkit import lesson
from effkit.abtest import ABResult, Verdict, _timed, ab_result, median_ci, median_ci_coverage
from effkit.measure import device_name

_clock = time.perf_counter  # captured at import, as in effkit.abtest


def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """The arms' order in round ``round_index``: forward in even rounds, reversed in odd ones."""
    return list(names) if round_index % 2 == 0 else list(reversed(names))


@dataclass
class ArmsResult:
    """Per-round speeds of each arm (work units per second), all from one interleaved run."""

    speeds: dict[str, list[float]]
    confidence: float
    seconds: float
    verdicts: dict[tuple[str, str], Verdict] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return len(next(iter(self.speeds.values())))

    def median(self, arm: str) -> float:
        return statistics.median(self.speeds[arm])

    def interval(self, arm: str) -> tuple[float, float]:
        """Order-statistic interval of the arm's median speed; coverage is `coverage`."""
        return median_ci(self.speeds[arm], self.confidence)

    @property
    def coverage(self) -> float:
        return median_ci_coverage(self.rounds, self.confidence)

    def versus(self, a: str, b: str) -> ABResult:
        """Speed of ``b`` relative to ``a``, per-round ratios paired within this run."""
        return ab_result(self.speeds[a], self.speeds[b], self.confidence, self.seconds)


def time_arms(
    arms: dict[str, Callable[[], object]],
    *,
    device: torch.device | str | None = None,
    warmup: int = 1,
    min_rounds: int = lesson.MIN_PAIRS,
    max_rounds: int | None = None,
    rel_ci: float = 0.10,
    pairs_to_settle: Sequence[tuple[str, str]] = (),
    confidence: float = 0.95,
    progress: Callable[[int], None] | None = None,
) -> ArmsResult:
    """Time each arm (a callable returning its work units) once per round, interleaved.

    ``warmup`` rounds are discarded. After ``min_rounds``, stops once every ratio in
    ``pairs_to_settle`` has an interval half-width within ``rel_ci`` of itself, or at ``max_rounds``
    (default ``min_rounds``).
    """
    if len(arms) < 2:
        raise ValueError("time_arms compares at least two arms")
    max_rounds = max(min_rounds, max_rounds or min_rounds)
    names = list(arms)
    for r in range(warmup):
        for name in round_order(names, r):
            _timed(arms[name], device)
    start = _clock()
    speeds: dict[str, list[float]] = {name: [] for name in names}
    result = ArmsResult(speeds, confidence, 0.0)
    for r in range(max_rounds):
        for name in round_order(names, r + warmup):
            units, seconds = _timed(arms[name], device)
            speeds[name].append(units / seconds)
        if progress is not None:
            progress(r + 1)
        if r + 1 >= min_rounds:
            settled = True
            for a, b in pairs_to_settle:
                ratio = result.versus(a, b)
                settled &= (ratio.ci_high - ratio.ci_low) / 2 <= rel_ci * ratio.ratio
            if settled:
                break
    result.seconds = _clock() - start
    return result


def lesson_arms(
    name: str,
    arms: dict[str, Callable[[], object]],
    comparisons: Sequence[tuple[str, str]],
    *,
    rounds: int = lesson.MIN_PAIRS,
    max_rounds: int | None = None,
    settle: Sequence[tuple[str, str]] | None = None,
    rel_ci: float = 0.10,
    unit: str = "tokens/s",
    dev: torch.device | None = None,
) -> ArmsResult:
    """`time_arms` with a progress bar, up to ``max_rounds`` (default twice ``rounds``; ``rounds``
    in smoke) until the ratios in ``settle`` (default: all ``comparisons``) settle; prints every
    arm's median with its
    interval, then each comparison's `effkit.lesson.lesson_verdict` (kept in
    ``result.verdicts[(a, b)]``)."""
    from tqdm.auto import tqdm

    if rounds < lesson.MIN_PAIRS:
        raise ValueError(f"{rounds} rounds: fewer than {lesson.MIN_PAIRS} cover the median < 95%")
    dev = dev or lesson.device()
    most = rounds if lesson.profile() == "smoke" else max(rounds, max_rounds or 2 * rounds)
    bar = tqdm(total=most, desc=name, unit="round")
    result = time_arms(
        arms,
        device=dev,
        min_rounds=rounds,
        max_rounds=most,
        rel_ci=rel_ci,
        pairs_to_settle=comparisons if settle is None else settle,
        progress=lambda done: bar.update(1),
    )
    bar.close()
    print(
        f"{name}, on {device_name(dev)}: {result.rounds} interleaved rounds, medians with intervals"
        f" covering each median {result.coverage:.0%} of the time"
    )
    for arm in arms:
        lo, hi = result.interval(arm)
        print(f"  {arm:28} {result.median(arm):9,.0f} {unit} ({lo:,.0f}-{hi:,.0f})")
    for a, b in comparisons:
        said = lesson.lesson_verdict(result.versus(a, b), a, b)
        result.verdicts[(a, b)] = said
        print(f"  -> {said}")
    return result


@dataclass
class PairedDifference:
    """Per-seed differences ``b - a`` of an outcome, their median and its interval."""

    diffs: list[float]
    median: float
    ci_low: float
    ci_high: float
    coverage: float


def paired_difference(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> PairedDifference:
    """``b[i] - a[i]`` per seed (same seed, same index), with `effkit.abtest.median_ci`."""
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    lo, hi = median_ci(diffs, confidence)
    return PairedDifference(
        diffs, statistics.median(diffs), lo, hi, median_ci_coverage(len(diffs), confidence)
    )


def rows_half_width(right_a: Sequence[bool], right_b: Sequence[bool]) -> float:
    """About 95% half-width of the accuracy difference of two models scored on the same rows.

    Only rows where they disagree carry information (McNemar): with ``b`` rows only A gets right
    and ``c`` only B, the difference's standard error is sqrt(b + c - (b - c)^2 / n) / n.
    """
    n = len(right_a)
    b = sum(x and not y for x, y in zip(right_a, right_b, strict=True))
    c = sum(y and not x for x, y in zip(right_a, right_b, strict=True))
    return 1.96 * math.sqrt(max(b + c - (b - c) ** 2 / n, 0.0)) / n if n else float("inf")


def difference_verdict(
    diff: PairedDifference, a: str, b: str, what: str = "accuracy", rows_error: float = 0.0
) -> str:
    """What the per-seed differences of ``what`` (``b - a``, in fractions) let one say, and no more.

    A difference is named only when the seeds' interval excludes 0; it is then also compared with
    ``rows_error`` (the shared held-out rows' own sampling error, which more seeds do not shrink).
    Otherwise the sentence says which differences the interval still allows.
    """
    pts = 100
    said = (
        f"median {b} - {a} {pts * diff.median:+.1f} points, interval {pts * diff.ci_low:+.1f} to"
        f" {pts * diff.ci_high:+.1f} covering the median {diff.coverage:.0%} of the time over"
        f" {len(diff.diffs)} seeds"
    )
    if diff.ci_low > 0 or diff.ci_high < 0:
        side = "higher" if diff.ci_low > 0 else "lower"
        claim = f"{b}'s {what} is {side} than {a}'s over these seeds ({said})"
        if abs(diff.median) <= rows_error:
            claim += (
                f", but within the held-out rows' own ±{pts * rows_error:.1f} points: a property"
                " of these rows as much as of the method"
            )
    else:
        claim = (
            f"no {what} difference between {b} and {a} that these seeds resolve ({said}): not"
            f" evidence that there is none, as the median difference may lie anywhere from"
            f" {pts * diff.ci_low:+.1f} to {pts * diff.ci_high:+.1f} points at this coverage"
        )
        if rows_error:
            claim += f", and the held-out rows add their own ±{pts * rows_error:.1f} points"
    return f"{claim} [{lesson.SMOKE_NOTE}]" if lesson.profile() == "smoke" else claim
