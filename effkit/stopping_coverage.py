"""The real coverage of `effkit.abtest.compare`'s stopping rule, by simulation.

`median_ci_coverage(n)` holds for a fixed number of pairs. `compare` (and `lesson.ab`) instead keep adding
pairs until the interval's half-width falls within ``rel_ci`` of the median ratio: the rule looks at the data
before it stops, and it stops early exactly when the interval happens to be narrow, which is when it is more
likely to miss. Simulating the rule on ratios whose median is known gives the coverage it really has.
"""

from __future__ import annotations

import statistics

import numpy as np

from effkit.abtest import median_ci


def stopping_rule_coverage(
    min_pairs: int,
    max_pairs: int,
    rel_ci: float,
    *,
    confidence: float = 0.95,
    spread: float = 0.10,
    outliers: float = 0.0,
    trials: int = 4000,
    seed: int = 0,
) -> tuple[float, float]:
    """(coverage, mean pairs used) of the rule on ``trials`` simulated A/Bs. Each pair's log speed
    ratio is normal with SD ``spread`` around 0 (true median ratio 1); a share ``outliers`` of the pairs
    draws from a 5x wider normal instead (a burst hit by another job): symmetric, so the median stays 1."""
    rng = np.random.default_rng(seed)
    covered, used = 0, 0
    for _ in range(trials):
        wide = rng.random(max_pairs) < outliers
        ratios = np.exp(rng.normal(0.0, spread, max_pairs) * np.where(wide, 5.0, 1.0)).tolist()
        for n in range(1, max_pairs + 1):
            lo, hi = median_ci(ratios[:n], confidence)
            if n >= min_pairs and (hi - lo) / 2 <= rel_ci * statistics.median(ratios[:n]):
                break
        covered += lo <= 1.0 <= hi
        used += n
    return covered / trials, used / trials
