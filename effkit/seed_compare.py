"""Two recipes over a few seeds each: what a handful of training runs can say, and no more.

**What it does.** `separation(a, b)` compares per-seed results (e.g. seconds to the target; None for
a run that never reached it, counted as later than every run that did) and says whether every run
of one recipe lies on one side of every run of the other. Under no difference the 2n runs are
exchangeable, so that ordering happens by chance with probability 1 / C(2n, n) for a given side (a
one-sided permutation test): 1/2 with one seed each, 1/6 with two, 1/20 with three. `words()`
states the result with that probability, and says "no difference these seeds can show" when the
ranges overlap.

**When to use it.** Time-to-target and final accuracy: one training run per recipe is one draw
from the seed-to-seed spread, and lessons 1 and 4 compare recipes on a few seeds.

**Pitfalls.** Separation is the only thing it tests: with overlapping ranges it does not say the
recipes are equal. Seeds must be paired by nothing: each recipe's runs are a sample of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

NOT_REACHED = math.inf  # a run that never reached the target came later than any that did


@dataclass(frozen=True)
class Separation:
    a: tuple[float, ...]
    b: tuple[float, ...]
    side: str  # "b above" (every b > every a), "b below", or "overlap"
    p_one_sided: float  # chance of that side's separation with no difference

    def words(self, a_label: str, b_label: str, above: str, below: str) -> str:
        """e.g. "every batch-1000 run later than every batch-250 run (3 seeds each, one-sided
        permutation p = 0.050)" with ``above``="later", ``below``="earlier"."""
        n = f"{len(self.a)} seed(s) of {a_label}, {len(self.b)} of {b_label}"
        if self.side == "overlap":
            return f"the ranges overlap: no difference these seeds can show ({n})"
        word = above if self.side == "b above" else below
        chance = f"one-sided permutation p = {self.p_one_sided:.3f}"
        if self.p_one_sided > 0.05:
            return (
                f"every {b_label} run {word} than every {a_label} run, but with {n} that happens"
                f" by chance {self.p_one_sided:.0%} of the time: not evidence ({chance})"
            )
        return f"every {b_label} run {word} than every {a_label} run ({n}; {chance})"


def _values(xs: Sequence[float | None]) -> tuple[float, ...]:
    if not xs:
        raise ValueError("no runs")
    return tuple(NOT_REACHED if x is None else float(x) for x in xs)


def separation(a: Sequence[float | None], b: Sequence[float | None]) -> Separation:
    """Does every value of ``b`` lie above (or below) every value of ``a``? None counts as +inf."""
    va, vb = _values(a), _values(b)
    p = 1 / math.comb(len(va) + len(vb), len(va))
    if min(vb) > max(va):
        side = "b above"
    elif max(vb) < min(va):
        side = "b below"
    else:  # ties (two runs that both never reached the target) separate nothing
        side = "overlap"
    return Separation(va, vb, side, p)


def seed_range(xs: Sequence[float | None], fmt: str = "{:.1f}") -> str:
    """A per-seed range for printing: "5.1-6.0", "5.1-not reached", or one value."""
    vals = sorted(_values(xs))
    shown = ["not reached" if math.isinf(v) else fmt.format(v) for v in (vals[0], vals[-1])]
    return shown[0] if len(vals) == 1 or shown[0] == shown[1] else f"{shown[0]}-{shown[1]}"
