"""Robust A/B timing: warm-up, interleaved repeats, median ratio with a confidence interval.

`compare(a, b)` runs two callables in ABBA order so drift hits both alike, and reports the median of the
per-pair speed ratios B/A with an order-statistic interval and its real coverage; `verdict` says only what
that interval supports. Each call should last >= ~50 ms and synchronise its device (or pass ``device=``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from itertools import islice

import torch

from effkit.measure import sync
from effkit.percentiles import closed_ranks

# perf_counter is captured at import so a later monkeypatch of time.perf_counter (in a learner's
# notebook, say) cannot bend our clock.
_clock = time.perf_counter


@dataclass
class ABResult:
    """Speed of B relative to A: ``ratio`` > 1 means B is faster."""

    ratio: float  # median of per-pair speed ratios B/A
    ci_low: float
    ci_high: float
    confidence: float  # the coverage asked for
    pairs: int
    a_speeds: list[float]  # work units per second, per repeat
    b_speeds: list[float]
    ratios: list[float]
    seconds: float  # wall time of the whole comparison
    coverage: float = float("nan")  # the interval's real coverage (see `median_ci_coverage`)

    @property
    def spread(self) -> tuple[float, float]:
        """(min, max) of the per-pair ratios."""
        return min(self.ratios), max(self.ratios)

    @property
    def a_median(self) -> float:
        return statistics.median(self.a_speeds)

    @property
    def b_median(self) -> float:
        return statistics.median(self.b_speeds)

    def faster(self, threshold: float = 1.0) -> bool:
        """True when B is faster than ``threshold`` x A with the stated confidence."""
        return self.ci_low > threshold

    def slower(self, threshold: float = 1.0) -> bool:
        return self.ci_high < threshold

    def to_dict(self) -> dict:
        return asdict(self) | {"spread": list(self.spread)}

    def __str__(self) -> str:
        return (
            f"B/A = {self.ratio:.3f}x  (interval {self.ci_low:.3f}-{self.ci_high:.3f} covers the "
            f"median {self.coverage:.0%} of the time, {self.pairs} pairs)"
        )


def median_ci_coverage(n: int, confidence: float = 0.95) -> float:
    """Real coverage of `median_ci` for ``n`` values (`effkit.percentiles.closed_ranks` at q = 50).

    Order-statistic intervals come in steps: with n = 3 the widest one, [min, max], covers the
    true median only 75% of the time, with 5 values 94%, with 6 values 97%. A "95% CI" from
    fewer than 6 pairs is not one; say the coverage you have. For a fixed n only: `compare` stops
    early once the interval is narrow, and `effkit.stopping_coverage` measures what that costs.
    """
    return 0.0 if n < 1 else closed_ranks(n, 50, confidence)[2]


def median_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI for the median from order statistics (binomial, p = 1/2): the one
    implementation, `effkit.percentiles`, with an unbounded end closed at the extreme value.

    Its real coverage is `median_ci_coverage(len(values), confidence)`, which is below
    ``confidence`` for fewer than 6 values (the interval is then [min, max]).
    """
    xs = sorted(values)
    low, high, _ = closed_ranks(len(xs), 50, confidence)
    return xs[low - 1], xs[high - 1]


def _timed(fn: Callable[[], object], device: torch.device | str | None) -> tuple[float, float]:
    sync(device)
    t0 = _clock()
    work = fn()
    sync(device)
    seconds = _clock() - t0
    units = float(work) if isinstance(work, int | float) and work > 0 else 1.0
    return units, seconds


def compare(
    a: Callable[[], object],
    b: Callable[[], object],
    *,
    device: torch.device | str | None = None,
    warmup: int = 1,
    min_pairs: int = 5,
    max_pairs: int = 15,
    rel_ci: float = 0.05,
    max_seconds: float | None = None,
    confidence: float = 0.95,
    progress: Callable[[int, float], None] | None = None,
    before: Callable[[str], None] | None = None,
    after: Callable[[str], None] | None = None,
) -> ABResult:
    """Time ``a`` and ``b`` interleaved and return the median speed ratio B/A.

    Each callable runs once per repeat and may return its work count (samples) so throughput is
    compared; otherwise the ratio is of 1/time. Stops after ``min_pairs`` once the CI half-width is
    within ``rel_ci`` of the ratio, or at ``max_pairs`` / ``max_seconds``. ``before(side)`` and
    ``after(side)`` ("a" or "b") run untimed around each burst: e.g. a trainer's ``resume()`` and
    ``pause()``, so a DataLoader's worker start-up stays out of a steady-state burst.
    """
    if min_pairs < 1 or max_pairs < min_pairs:
        raise ValueError(f"need 1 <= min_pairs <= max_pairs, got {min_pairs}, {max_pairs}")
    start = _clock()
    a_speeds: list[float] = []
    b_speeds: list[float] = []
    ratios: list[float] = []
    for i, (sa, sb) in enumerate(
        islice(
            speed_pairs(a, b, device=device, warmup=warmup, before=before, after=after),
            max_pairs,
        )
    ):
        a_speeds.append(sa)
        b_speeds.append(sb)
        ratios.append(sb / sa)
        ratio = statistics.median(ratios)
        lo, hi = median_ci(ratios, confidence)
        if progress is not None:
            progress(i + 1, ratio)
        if len(ratios) >= min_pairs:
            if (hi - lo) / 2 <= rel_ci * ratio:
                break
            if max_seconds is not None and _clock() - start > max_seconds:
                break
    return ab_result(a_speeds, b_speeds, confidence, seconds=_clock() - start)


def settle(
    a: Callable[[], object],
    b: Callable[[], object],
    *,
    no_gain: float,
    pairs: int = 8,
    rounds: int = 4,
    confidence: float = 0.99,
    device: torch.device | str | None = None,
) -> tuple[ABResult, str]:
    """Is B faster than A? Rounds of ``pairs`` interleaved pairs, pooled, until the interval answers:
    ``"faster"`` (low end above 1), ``"not faster"`` (high end below ``no_gain``: even that small a
    speed-up is ruled out) or, after ``rounds`` rounds, ``"inconclusive"``. A busy machine widens the
    interval; then it earns another round, not a verdict. Each look is at ``confidence`` (99%: up to four
    looks at one question keep a wrong verdict under about 2%)."""
    a_speeds: list[float] = []
    b_speeds: list[float] = []
    start = _clock()
    for _ in range(rounds):
        more = compare(a, b, device=device, min_pairs=pairs, max_pairs=pairs)
        a_speeds += more.a_speeds
        b_speeds += more.b_speeds
        result = ab_result(a_speeds, b_speeds, confidence, seconds=_clock() - start)
        if result.ci_low > 1.0:
            return result, "faster"
        if result.ci_high < no_gain:
            return result, "not faster"
    return result, "inconclusive"


def speed_pairs(
    a: Callable[[], object],
    b: Callable[[], object],
    *,
    device: torch.device | str | None = None,
    warmup: int = 1,
    before: Callable[[str], None] | None = None,
    after: Callable[[str], None] | None = None,
) -> Iterator[tuple[float, float]]:
    """``warmup`` discarded rounds, then (speed of A, speed of B) pair after pair, for as long as the
    caller iterates. ``before(side)`` and ``after(side)`` (side "a" or "b") run untimed around each call."""
    sides = {"a": a, "b": b}

    def run(side: str) -> tuple[float, float]:
        if before is not None:
            before(side)
        units, seconds = _timed(sides[side], device)
        if after is not None:
            after(side)
        return units, seconds

    for _ in range(warmup):
        run("a")
        run("b")
    i = 0
    while True:
        # ABBA ordering: whichever runs second in a pair alternates, cancelling linear drift.
        if i % 2 == 0:
            ua, sa = run("a")
            ub, sb = run("b")
        else:
            ub, sb = run("b")
            ua, sa = run("a")
        yield ua / sa, ub / sb
        i += 1


def ab_result(
    a_speeds: list[float], b_speeds: list[float], confidence: float, seconds: float
) -> ABResult:
    """The median ratio B/A of paired speeds, its order-statistic interval and that interval's real coverage."""
    ratios = [sb / sa for sa, sb in zip(a_speeds, b_speeds, strict=True)]
    lo, hi = median_ci(ratios, confidence)
    return ABResult(
        ratio=statistics.median(ratios),
        ci_low=lo,
        ci_high=hi,
        confidence=confidence,
        pairs=len(ratios),
        a_speeds=a_speeds,
        b_speeds=b_speeds,
        ratios=ratios,
        seconds=seconds,
        coverage=median_ci_coverage(len(ratios), confidence),
    )


@dataclass
class Verdict:
    """What an A/B comparison lets you say, and no more."""

    word: str  # "faster", "slower" or "no clear difference"
    sentence: str

    def __str__(self) -> str:
        return self.sentence


def verdict(result: ABResult, a: str = "A", b: str = "B", threshold: float = 1.0) -> Verdict:
    """Say "faster", "slower" or "no clear difference" only as far as the interval supports.

    B is called faster only when the whole interval lies above ``threshold`` (slower: below it),
    and the sentence states the interval's real coverage, so three pairs never pass for 95%.
    """
    interval = (
        f"{result.ratio:.2f}x, interval {result.ci_low:.2f}-{result.ci_high:.2f} "
        f"covering the median {result.coverage:.0%} of the time over {result.pairs} pairs"
    )
    if result.faster(threshold):
        word, claim = "faster", f"{b} is faster than {a}"
    elif result.slower(threshold):
        word, claim = "slower", f"{b} is slower than {a}"
    else:
        word, claim = "no clear difference", f"no clear difference between {b} and {a}"
    if threshold > 1.0 and word != "faster" and result.faster(1.0):
        # the word stays the threshold's; the sentence says what the interval does show (a review
        # read "no clear difference" printed over 1.22x, interval 1.10-1.33, at a 1.1x threshold)
        how = "by less than" if word == "slower" else "not shown beyond"
        claim = f"{b} is faster than {a}, but {how} {threshold:g}x"
    elif threshold != 1.0 and word != "no clear difference":
        claim += f" (beyond {threshold:g}x)"
    return Verdict(word, f"{claim}: {interval}.")
