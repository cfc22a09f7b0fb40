"""The accuracy gate: no performance points when the learner's change costs accuracy.

Fails only confident drops beyond the tolerance, with a margin from measured paired noise (or,
given whole gradings, a second look on fresh data), so verdicts do not flip with noise. The
calibration is per workload, grading spec and device class: re-calibrate on new hardware.
"""

from __future__ import annotations

import functools
import json
import math
import random
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

BOOTSTRAP_TRIALS = 20_000
MIN_RESIDUALS = 10  # fewer measured pairs say too little about the shape: normal model only
MIN_GRADINGS = 100  # enough to bound a 5% tail: 0 of 100 below a threshold puts it under 2.9% (95%)
RECHECK_RATE = 0.05  # at most this share of correct gradings (95% bound) needs the second look
GRID_PP = 0.05  # a gradings-based threshold sits on this grid
EPS_PP = 1e-9  # float rounding: 100 * (2950/3000 - 2964/3000) and its pair averaged -0.5000000000000004, not -0.5
ASSIGNMENTS_DIR = Path(__file__).resolve().parents[1] / "assignments"


def calibration_dir(name: str) -> Path:
    """Calibration ``<assignment>-<spec>-<device class>`` lives in its assignment's package."""
    return ASSIGNMENTS_DIR / name.split("-", 1)[0] / "calibration"


TOLERANCE_PP = 0.5  # the course's promise: accuracy within 0.5 pp of the baseline
Z_ONE_SIDED_99 = 2.3263  # Phi^-1(0.99): false fails of a correct optimisation below 1%
Z_DROP = 1.7507  # Phi^-1(0.96): a real drop of DROP_PP passes in under 4% (margin below 5%)
DROP_PP = 1.5  # the drop the gate must catch
HIGH_FLAG_PP = 0.5  # flag (never penalise) a learner at least this much *above* the baseline


@dataclass(frozen=True)
class Calibration:
    """Paired per-run accuracy differences measured under H0 (a correct optimisation)."""

    name: str
    device: str
    sd_pair_pp: float  # SD of one paired difference acc_B - acc_A, in pp
    sd_run_pp: float  # SD of one baseline run's accuracy, in pp (for the report)
    mean_pair_pp: float  # should be ~0: the reference pipeline is statistically equivalent
    pairs: int
    differences_pp: tuple[float, ...] = ()
    baseline_pp: tuple[float, ...] = ()
    # Paired means of whole gradings of a correct solution on this device (``stress`` runs), each
    # the mean of ``grading_repeats`` pairs: the tail the few pairs above cannot show.
    grading_repeats: int = 0
    grading_means_pp: tuple[float, ...] = ()
    gradings_source: str = ""

    @classmethod
    def load(cls, name: str, directory: Path | None = None) -> Calibration:
        directory = directory or calibration_dir(name)
        path = directory / f"{name}.json"
        if not path.is_file():
            known = sorted(p.stem for p in directory.glob("*.json"))
            raise FileNotFoundError(
                f"no gate calibration {path}; run `python -m grader calibrate` on this device "
                f"class (known calibrations: {known})"
            )
        data = json.loads(path.read_text())
        data["differences_pp"] = tuple(data.get("differences_pp", ()))
        data["baseline_pp"] = tuple(data.get("baseline_pp", ()))
        data["grading_means_pp"] = tuple(data.get("grading_means_pp", ()))
        return cls(**data)

    @classmethod
    def from_runs(
        cls, name: str, device: str, baseline: list[float], other: list[float]
    ) -> Calibration:
        """From paired accuracies (fractions) of the baseline and a correct optimisation."""
        if len(baseline) != len(other) or len(baseline) < 3:
            raise ValueError(f"need >= 3 paired runs, got {len(baseline)} and {len(other)}")
        diffs = [100 * (b - a) for a, b in zip(baseline, other, strict=True)]
        return cls(
            name=name,
            device=device,
            sd_pair_pp=statistics.stdev(diffs),
            sd_run_pp=statistics.stdev([100 * a for a in baseline]),
            mean_pair_pp=statistics.fmean(diffs),
            pairs=len(diffs),
            differences_pp=tuple(round(d, 4) for d in diffs),
            baseline_pp=tuple(round(100 * a, 4) for a in baseline),
        )

    def save(self, directory: Path | None = None) -> Path:
        directory = directory or calibration_dir(self.name)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.json"
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")
        return path


@dataclass(frozen=True)
class Gate:
    repeats: int
    sd_pair_pp: float
    tolerance_pp: float = TOLERANCE_PP
    z: float = Z_ONE_SIDED_99
    z_drop: float = Z_DROP
    drop_pp: float = DROP_PP
    # the calibration's measured paired differences: the threshold must also hold for their real
    # (often heavy-tailed) shape, not only for a normal with their SD
    residuals_pp: tuple[float, ...] = ()
    # means of `repeats` pairs from whole gradings of a correct solution: with MIN_GRADINGS of
    # them they set the threshold, and a grading below it takes a second, independent look
    grading_means_pp: tuple[float, ...] = ()

    @classmethod
    def from_calibration(cls, repeats: int, cal: Calibration) -> Gate:
        means = tuple(cal.grading_means_pp) if cal.grading_repeats == repeats else ()
        return cls(
            repeats, cal.sd_pair_pp, residuals_pp=tuple(cal.differences_pp), grading_means_pp=means
        )

    @property
    def from_gradings(self) -> bool:
        """Set by measured gradings; then a grading below the threshold takes a second look."""
        return len(self.grading_means_pp) >= MIN_GRADINGS

    def gradings_rates(self, drop_pp: float | None = None) -> tuple[int, int, int]:
        """(gradings, correct ones below the threshold, ones that a real ``drop_pp`` drop would pass)."""
        t, means, drop = (
            self.threshold_pp,
            self.grading_means_pp,
            self.drop_pp if drop_pp is None else drop_pp,
        )
        return (
            len(means),
            sum(m < t - EPS_PP for m in means),
            sum(m - drop >= t - EPS_PP for m in means),
        )

    def gradings_bounds(self, drop_pp: float | None = None) -> tuple[float, float]:
        """95% upper bounds of (false fail, false pass) with the second look: correct work must fall
        below twice, independently; a real drop passes if either look reaches the threshold."""
        n, below, passed = self.gradings_rates(drop_pp)
        return upper_bound(below, n) ** 2, 1 - (1 - upper_bound(passed, n)) ** 2

    def gradings_to_power(self, limit: int = 10_000) -> int | None:
        """How many gradings, with no more below the gate or above it by a drop than now, would
        show both rates (the threshold held where it is); None beyond ``limit``."""
        _, below, passed = self.gradings_rates()
        for n in range(max(len(self.grading_means_pp), MIN_GRADINGS), limit + 1):
            if upper_bound(below, n) ** 2 < 0.01 and 1 - (1 - upper_bound(passed, n)) ** 2 < 0.05:
                return n
        return None

    @functools.cached_property
    def _gradings_threshold(self) -> float:
        """The highest grid point, at most -tolerance, with correct gradings below it in < RECHECK_RATE."""
        means, k = self.grading_means_pp, 0
        while (
            upper_bound(
                sum(m < -self.tolerance_pp - k * GRID_PP - EPS_PP for m in means), len(means)
            )
            > RECHECK_RATE
        ):
            k += 1  # ends below the lowest mean at the latest: 0 of >= 59 bounds the rate under 5%
        return round(-self.tolerance_pp - k * GRID_PP, 6)

    def needs_second_look(self, diffs_pp: list[float]) -> bool:
        """The first ``repeats`` pairs fell below a gradings-set threshold: train as many more."""
        return (
            self.from_gradings
            and len(diffs_pp) == self.repeats
            and not self.decide(diffs_pp).passed
        )

    @functools.cached_property
    def _bootstrap_means(self) -> list[float]:
        """Sorted means of ``repeats`` centred residuals, resampled (fixed seed: same gate every time)."""
        rng = random.Random(0)
        centre = statistics.fmean(self.residuals_pp)
        pool = [r - centre for r in self.residuals_pp]
        return sorted(
            statistics.fmean(rng.choice(pool) for _ in range(self.repeats))
            for _ in range(BOOTSTRAP_TRIALS)
        )

    @property
    def se_pp(self) -> float:
        return self.sd_pair_pp / math.sqrt(self.repeats)

    @property
    def threshold_pp(self) -> float:
        """Fail when the mean paired difference is below this (negative) number.

        "Confidently worse than the tolerance" (-tolerance - z * se), unless that would let a real
        ``drop_pp`` drop pass in 5% or more of gradings; then just high enough that it does not.
        """
        if self.from_gradings:
            return self._gradings_threshold
        strict = -(self.tolerance_pp + self.z * self.se_pp)
        if self.se_pp > self.max_se_pp:  # too noisy to promise both rates: favour correct work
            return strict
        normal = max(strict, -self.drop_pp + self.z_drop * self.se_pp)
        if len(self.residuals_pp) < MIN_RESIDUALS:
            return normal
        # The measured shape: raise the threshold until a real drop passes in < 5% of resampled
        # gradings (the same 96% quantile as z_drop), as long as correct work still fails in < 1%.
        means = self._bootstrap_means
        pass_bound = -self.drop_pp + means[int(0.96 * len(means))]
        fail_bound = means[int(0.01 * len(means))]
        return max(normal, pass_bound) if pass_bound < fail_bound else normal

    @property
    def max_se_pp(self) -> float:
        """Largest standard error at which both error-rate requirements can hold."""
        return self.drop_pp / (self.z + self.z_drop)

    @property
    def powered(self) -> bool:
        if self.from_gradings:  # both rates, with the second look, at 95% confidence
            false_fail, false_pass = self.gradings_bounds()
            return false_fail < 0.01 and false_pass < 0.05
        return self.se_pp <= self.max_se_pp

    def decide(self, diffs_pp: list[float]) -> GateVerdict:
        r, t = self.repeats, self.threshold_pp
        second = self.from_gradings and len(diffs_pp) == 2 * r
        looks = [
            statistics.fmean(x)
            for x in ([diffs_pp[:r], diffs_pp[r:]] if second else [diffs_pp])
            if x
        ]
        mean = (
            looks[-1] if looks else float("nan")
        )  # the look that is scored: the second, once taken
        passed = mean >= t - EPS_PP  # (a second look is taken only after a first one below t)
        noise = (
            f"a correct pipeline falls below it in {self.gradings_rates()[1]} of {len(self.grading_means_pp)} "
            "measured gradings"
            if self.from_gradings
            else f"the -{self.tolerance_pp} pp tolerance, widened by the measured run-to-run noise, SE {self.se_pp:.2f} pp"
        )
        if not looks:
            why = "no accuracy could be measured"
        elif second and not passed:
            why = (
                f"your accuracy is {looks[0]:+.2f} pp vs the baseline in {r} paired runs and {looks[1]:+.2f} pp in "
                f"{r} more on fresh data (the grader's held-out sets): both below the gate at {t:+.2f} pp ({noise}, "
                f"twice in a row in < {self.gradings_bounds()[0]:.2%})"
            )
        elif not passed:
            why = (
                f"your accuracy is {mean:+.2f} pp vs the baseline (mean of {len(diffs_pp)} paired runs on the "
                f"grader's held-out set), below the gate at {t:+.2f} pp ({noise})"
            )
        elif second and looks[0] < t:
            why = (
                f"accuracy {looks[0]:+.2f} pp vs the baseline in {r} paired runs, below the gate ({t:+.2f} pp); "
                f"{looks[1]:+.2f} pp in {r} more on fresh data: within it"
            )
        else:
            why = f"accuracy {mean:+.2f} pp vs the baseline: within the gate ({t:+.2f} pp)"
        # Symmetric to the fail threshold, rounding included: flag only gains that noise does not
        # explain (pairs at +1.00 and 0.00 pp averaged +0.5000000000000004 and were flagged).
        high = mean > max(HIGH_FLAG_PP, -t) + EPS_PP
        return GateVerdict(passed, mean, t, self.se_pp, high, why, tuple(looks))


@dataclass(frozen=True)
class GateVerdict:
    passed: bool
    mean_diff_pp: float
    threshold_pp: float
    se_pp: float
    suspiciously_high: bool
    message: str
    look_means_pp: tuple[
        float, ...
    ] = ()  # one mean per look: the second only after the first fell below

    def to_dict(self) -> dict:
        return asdict(self)


def upper_bound(failures: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate seen ``failures`` times in ``n`` (bisection on
    the binomial CDF)."""
    if failures >= n:
        return 1.0
    lo, hi = failures / n, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        cdf = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(failures + 1))
        lo, hi = (p, hi) if cdf > 1 - confidence else (lo, p)
    return hi
