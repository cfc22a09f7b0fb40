"""The stopping rule of `compare` is simulated for its real coverage (issue 51: lesson.ab stops when the
interval is narrow, then quoted the fixed-n coverage)."""

from effkit.abtest import median_ci_coverage
from effkit.stopping_coverage import stopping_rule_coverage

SE = 3 * (0.97 * 0.03 / 4000) ** 0.5  # three Monte Carlo standard errors at 4,000 trials


def test_a_fixed_number_of_pairs_covers_what_the_binomial_says():
    for n in (6, 9):
        coverage, used = stopping_rule_coverage(n, n, rel_ci=0.10)
        assert used == n and abs(coverage - median_ci_coverage(n)) < SE, (n, coverage)


def test_stopping_early_on_a_narrow_interval_costs_coverage():
    fixed, _ = stopping_rule_coverage(6, 6, rel_ci=0.10, spread=0.10)
    rule, used = stopping_rule_coverage(6, 12, rel_ci=0.10, spread=0.10)
    assert 6 < used < 12  # the rule did stop early in some trials and not in others
    assert rule < fixed - SE, (rule, fixed)
    assert rule > 0.90  # ... but not by much: the lessons can quote it
