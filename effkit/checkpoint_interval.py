"""How often to checkpoint: the Young/Daly interval and the time a run loses to failures.

`young_interval` is ``sqrt(2 * save_s * mtbf_s)`` (Young 1974), `daly_interval` Daly's (2006) higher-order
optimum, `expected_wall_time` Daly's model of a run's wall time under Poisson failures, and `overhead`
compares an interval with the optimum. ``mtbf_s`` is the whole job's: one machine's MTBF divided by ``n``.
"""

from __future__ import annotations

import math

__all__ = [
    "daly_interval",
    "expected_wall_time",
    "overhead",
    "steps_between_saves",
    "young_interval",
]


def _check(save_s: float, mtbf_s: float) -> None:
    if not (math.isfinite(save_s) and save_s > 0):
        raise ValueError(f"save_s must be a positive number of seconds, got {save_s!r}")
    if not (math.isfinite(mtbf_s) and mtbf_s > 0):
        raise ValueError(f"mtbf_s must be a positive number of seconds, got {mtbf_s!r}")


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Seconds of work between checkpoints that minimise the expected waste, to first order."""
    _check(save_s, mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s)


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (2006, eq. 37); ``mtbf_s`` when a save takes >= 2 MTBF."""
    _check(save_s, mtbf_s)
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    r = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(r) / 3 + r / 9) - save_s


def expected_wall_time(
    work_s: float, interval_s: float, save_s: float, mtbf_s: float, restart_s: float = 0.0
) -> float:
    """Expected wall seconds to do ``work_s`` seconds of training, saving every ``interval_s``
    seconds of work (Daly 2006, eq. 16: exponential failures, failures also during saves and
    restarts)."""
    _check(save_s, mtbf_s)
    if not (interval_s > 0 and work_s >= 0 and restart_s >= 0):
        raise ValueError(
            f"need interval_s > 0, work_s >= 0, restart_s >= 0; got {interval_s}, "
            f"{work_s}, {restart_s}"
        )
    segments = work_s / interval_s
    if (interval_s + save_s) / mtbf_s > 700 or restart_s / mtbf_s > 700:
        return math.inf  # an interval of hundreds of MTBFs never completes (exp overflows)
    return (
        mtbf_s
        * math.exp(restart_s / mtbf_s)
        * math.expm1((interval_s + save_s) / mtbf_s)
        * segments
    )


def overhead(interval_s: float, save_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """Expected wall time / failure-free, save-free time, minus 1 (0.05: the run takes 5% longer)."""
    return expected_wall_time(1.0, interval_s, save_s, mtbf_s, restart_s) - 1.0


def steps_between_saves(interval_s: float, step_s: float) -> int:
    """An interval in seconds as a whole number of optimizer steps (at least 1)."""
    if not (step_s > 0 and interval_s > 0):
        raise ValueError(f"need positive interval_s and step_s, got {interval_s}, {step_s}")
    return max(1, round(interval_s / step_s))


def mtbf_for_interval(interval_s: float, save_s: float) -> float:
    """The MTBF for which ``interval_s`` is Young-optimal: Young's rule solved for M."""
    if not (interval_s > 0 and save_s > 0):
        raise ValueError(f"need positive interval_s and save_s, got {interval_s}, {save_s}")
    return interval_s**2 / (2 * save_s)


def readable_duration(seconds: float) -> str:
    """Seconds in the unit that keeps two significant digits visible ("0.4 s", "12 min", "3.1 d").

    Why: a fixed unit printed an MTBF of half a second as "0.00 h" — a sentence that is false.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"need a finite, non-negative duration, got {seconds!r}")
    for unit, size, limit in (
        ("ms", 1e-3, 1.0),
        ("s", 1.0, 120.0),
        ("min", 60.0, 7200.0),
        ("h", 3600.0, 172800.0),
    ):
        if seconds < limit:
            return (
                f"{seconds / size:.2g} {unit}"
                if seconds / size < 10
                else f"{seconds / size:.0f} {unit}"
            )
    return f"{seconds / 86400:.2g} d" if seconds < 864000 else f"{seconds / 86400:.0f} d"


def young_holds(save_s: float, mtbf_s: float) -> bool:
    """Young's first-order rule assumes a save is short beside the MTBF (here: < 1/10 of it)."""
    return save_s < 0.1 * mtbf_s
