"""Monte Carlo error rates of an accuracy gate (:mod:`grader.timed.gate`): ``python -m grader gate-sim``.

Only as good as its pairs; for a gate set by gradings the measured bounds decide, not this model.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from grader.timed.gate import Gate


@dataclass(frozen=True)
class SimResult:
    repeats: int
    threshold_pp: float
    false_fail: float  # P(fail | true difference 0)
    false_pass: float  # P(pass | true difference -drop_pp)
    drop_pp: float
    trials: int
    method: str

    def ok(self, max_false_fail: float = 0.01, max_false_pass: float = 0.05) -> bool:
        return self.false_fail < max_false_fail and self.false_pass < max_false_pass


def simulate(
    gate: Gate,
    *,
    drop_pp: float = 1.5,
    trials: int = 200_000,
    seed: int = 0,
    residuals_pp: list[float] | tuple[float, ...] = (),
) -> SimResult:
    """Monte Carlo error rates of ``gate``. With ``residuals_pp`` (measured paired differences),
    resample them centred (a bootstrap, keeping their real shape); else draw normals."""
    rng = random.Random(seed)
    if residuals_pp:
        centre = statistics.fmean(residuals_pp)
        pool = [r - centre for r in residuals_pp]

        def draw() -> float:
            return rng.choice(pool)

        method = f"bootstrap of {len(pool)} measured paired differences"
    else:

        def draw() -> float:
            return rng.gauss(0.0, gate.sd_pair_pp)

        method = f"normal, sd {gate.sd_pair_pp:.3f} pp"
    fails = passes = 0
    t = gate.threshold_pp
    looks = 2 if gate.from_gradings else 1  # the second look: fail only when both fall below
    for _ in range(trials):
        noise = [sum(draw() for _ in range(gate.repeats)) / gate.repeats for _ in range(looks)]
        fails += all(x < t for x in noise)
        passes += any(x - drop_pp >= t for x in noise)
    return SimResult(gate.repeats, t, fails / trials, passes / trials, drop_pp, trials, method)
