"""effkit.percentiles: order-statistic intervals for P50/P95/P99 cover as often as they say, and an SLO
verdict never claims more than its interval supports."""

import math

import numpy as np
import pytest

from effkit.abtest import median_ci, median_ci_coverage
from effkit.percentiles import percentile_ci, percentile_cis, percentile_ranks, slo_verdict


@pytest.mark.parametrize("n", [6, 7, 10, 17, 24, 51, 80])
def test_the_median_case_is_abtests_median_ci(n):
    values = list(np.random.default_rng(n).lognormal(size=n))
    ci = percentile_ci(values, 50)
    assert (ci.low, ci.high) == median_ci(values)
    assert ci.coverage == pytest.approx(median_ci_coverage(n), abs=1e-9)


@pytest.mark.parametrize(("n", "q"), [(200, 95), (1000, 95), (3000, 99), (500, 50), (73, 95)])
def test_coverage_is_the_binomial_probability_and_at_least_asked(n, q):
    stats = pytest.importorskip("scipy.stats")
    low, high, coverage = percentile_ranks(n, q)
    assert low is not None and high is not None and 1 <= low < high <= n
    exact = stats.binom.cdf(high - 1, n, q / 100) - stats.binom.cdf(low - 1, n, q / 100)
    assert coverage == pytest.approx(exact, abs=1e-9)
    assert coverage >= 0.95
    # each end is as tight as the tails allow: one rank further in breaks a tail's bound
    assert stats.binom.cdf(low, n, q / 100) > 0.025
    assert 1 - stats.binom.cdf(high - 2, n, q / 100) > 0.025


def test_intervals_cover_a_skewed_latency_distribution_as_often_as_stated():
    """Samples of a lognormal (a long right tail, like latencies): the true P95 is known exactly."""
    rng = np.random.default_rng(0)
    n, q, trials = 400, 95, 2000
    truth = math.exp(1.6448536269514722)  # P95 of lognormal(0, 1)
    stated = percentile_ranks(n, q)[2]
    hits = 0
    for _ in range(trials):
        ci = percentile_ci(rng.lognormal(size=n), q)
        hits += ci.low <= truth <= ci.high
    assert abs(hits / trials - stated) < 0.02, (hits / trials, stated)  # ~4 standard errors


def test_too_few_values_leave_the_upper_end_open_and_never_meet_an_slo():
    ci = percentile_ci(
        list(range(1, 51)), 99
    )  # P99 of 50 values: the max is below it 61% of the time
    assert ci.high == math.inf and ci.low <= 50
    assert slo_verdict(ci, limit=1e9) == "cannot tell"
    assert "no upper bound" in ci.describe()
    assert 0.95 <= ci.coverage <= 1


def test_verdicts_follow_the_interval():
    values = np.random.default_rng(1).exponential(size=2000)
    ci = percentile_cis(values)[95]
    assert ci.low < ci.value < ci.high
    assert slo_verdict(ci, ci.high) == "meets"
    assert slo_verdict(ci, ci.low - 1e-9) == "misses"
    assert slo_verdict(ci, ci.value) == "cannot tell"
    assert slo_verdict(ci, (ci.low + ci.high) / 2) == "cannot tell"


def test_bad_input():
    with pytest.raises(ValueError, match="percentile"):
        percentile_ranks(10, 100)
    with pytest.raises(ValueError, match="no values"):
        percentile_ci([], 95)
    with pytest.raises(ValueError, match="confidence"):
        percentile_ranks(10, 50, confidence=1.0)
