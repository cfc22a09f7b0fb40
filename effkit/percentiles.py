"""Distribution-free confidence intervals for percentiles (P50, P95, P99) of measured latencies.

**What it does.** `percentile_ci(values, 95)` returns the sample P95 and an interval between two
order statistics, [x_(l), x_(u)], with the interval's *real* coverage. Whatever the (continuous)
distribution, the number of values below its true p-quantile is Binomial(n, p), so the interval
covers the true quantile with probability exactly P(l <= B <= u - 1). The ranks are chosen so that
each tail holds at most (1 - confidence) / 2; coverage then comes in steps and is at least the
confidence asked for, and the exact figure is reported. `median_ci` (effkit.abtest) is the p = 1/2
case of the same construction. `slo_verdict` says "meets", "misses" or "cannot tell" from the
interval alone.

**Why.** A P95 from 70 requests is the 4th-slowest request: one interrupt moves it. An SLO verdict
should follow from how well the percentile is known, and with too few requests the interval has
no upper end at all (P99 of 50 requests is not bounded by anything measured): then this says so
(``high`` = inf) instead of inventing one.

**Pitfalls.** The binomial argument needs independent draws from one distribution. Requests timed
one after another on a shared machine are not quite that (a neighbour's burst slows several in a
row), and requests of a queue under load are strongly correlated (one slow request delays the
ones behind it): the interval is then narrower than the truth, the more so the heavier the load.
Pool several independent rounds (different seeds, interleaved with the rival configuration) and
read the interval as "what this run supports", not more.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def _binom_cdf(n: int, p: float) -> list[float]:
    """[P(B <= k) for k = 0..n], B ~ Binomial(n, p), summed from log-space terms.

    Log space because comb(n, k) p^k overflows or underflows a float for n in the thousands;
    no scipy, which effkit does not depend on.
    """
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n = math.lgamma(n + 1)
    cdf, total = [], 0.0
    for k in range(n + 1):
        total += math.exp(
            log_n - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p + (n - k) * log_q
        )
        cdf.append(min(total, 1.0))
    return cdf


def percentile_ranks(
    n: int, q: float, confidence: float = 0.95
) -> tuple[int | None, int | None, float]:
    """(l, u, coverage): 1-based ranks of the interval [x_(l), x_(u)] for the ``q``-th percentile
    of ``n`` values, and its real coverage. ``None`` for an end no order statistic can bound
    (too few values): that end is open (-inf or +inf)."""
    if n < 1:
        raise ValueError(f"need at least one value, got n={n}")
    if not 0 < q < 100:
        raise ValueError(f"q is a percentile in (0, 100), got {q}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence in (0, 1), got {confidence}")
    p, tail = q / 100, (1 - confidence) / 2
    cdf = _binom_cdf(n, p)

    def below(k: int) -> float:  # P(B <= k - 1): the chance that x_(k) lies above the quantile
        return 0.0 if k <= 0 else 1.0 if k > n else cdf[k - 1]

    # x_(l) <= quantile iff B >= l: the largest l whose miss probability P(B < l) fits the tail
    lows = [k for k in range(1, n + 1) if below(k) <= tail]
    low = lows[-1] if lows else None
    # x_(u) >= quantile iff B <= u - 1: the smallest u with P(B >= u) within the tail
    highs = [k for k in range(1, n + 1) if 1 - below(k) <= tail]
    high = highs[0] if highs else None
    coverage = below(n + 1 if high is None else high) - below(0 if low is None else low)
    return low, high, coverage


@functools.cache  # pure, and called once per pair of every A/B and every simulated one
def closed_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int, int, float]:
    """`percentile_ranks`, but an end no order statistic can bound becomes the extreme value (rank 1
    or n) and the coverage is that closed interval's, lower than asked: what an A/B of a few pairs has.
    """
    low, high, _ = percentile_ranks(n, q, confidence)
    low, high = low or 1, high or n
    cdf = _binom_cdf(n, q / 100)
    return low, high, cdf[high - 1] - cdf[low - 1]  # P(low <= B <= high - 1)


@dataclass(frozen=True)
class PercentileCI:
    """The ``q``-th percentile of ``n`` values: its estimate, interval and the interval's coverage."""

    q: float
    value: float  # numpy's percentile (linear interpolation), inside the interval
    low: float  # -inf when no order statistic bounds it below
    high: float  # +inf when no order statistic bounds it above (too few values for this q)
    coverage: float  # the real probability that [low, high] covers the true percentile
    n: int

    def describe(self, unit: str = "ms", fmt: str = "{:.1f}") -> str:
        """e.g. ``P95 12.3 ms [11.9-12.8] (covers 95.4%, 2000 values)``."""
        hi = "no upper bound" if math.isinf(self.high) else fmt.format(self.high)
        lo = "-inf" if math.isinf(self.low) else fmt.format(self.low)
        return (
            f"P{self.q:g} {fmt.format(self.value)} {unit} [{lo}-{hi}] "
            f"(covers {self.coverage:.1%}, {self.n} values)"
        )


def percentile_ci(values: Sequence[float], q: float, confidence: float = 0.95) -> PercentileCI:
    """The ``q``-th percentile of ``values`` with its order-statistic interval (module doc)."""
    xs = np.sort(np.asarray(values, dtype=float))
    if xs.size == 0:
        raise ValueError("no values")
    low, high, coverage = percentile_ranks(xs.size, q, confidence)
    return PercentileCI(
        q=q,
        value=float(np.percentile(xs, q)),
        low=float(xs[low - 1]) if low is not None else -math.inf,
        high=float(xs[high - 1]) if high is not None else math.inf,
        coverage=coverage,
        n=int(xs.size),
    )


def percentile_cis(
    values: Sequence[float], qs: Sequence[float] = (50, 95, 99), confidence: float = 0.95
) -> dict[float, PercentileCI]:
    """`percentile_ci` for each of ``qs``, keyed by q."""
    return {q: percentile_ci(values, q, confidence) for q in qs}


def slo_verdict(ci: PercentileCI, limit: float) -> str:
    """ "meets" when the whole interval is within ``limit``, "misses" when it is all above, else
    "cannot tell": the percentile is not known well enough to say which side of the limit it is.
    An open upper end (too few values) can never meet."""
    if ci.high <= limit:
        return "meets"
    if ci.low > limit:
        return "misses"
    return "cannot tell"
