"""A probe call's time limit counted in the worker's CPU seconds, so a busy machine cannot fail a correct call.

A wall-clock limit failed a lesson's reference (8/10, "did not return within 30 s") on a host at load 12: the
worker was waiting for a core, not looping. The limit is ``timeout_s`` seconds of CPU time used by the worker's
process tree, looked at when the wall clock runs out, and never more than ``STRETCH`` times the limit on the
wall clock: a busy loop with a core to itself still stops at ``timeout_s``, a starved worker gets the time
the machine took from it, and one that sleeps forever stops at the stretch.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.sandbox.proctree import descendants

STRETCH = 4.0
_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float | None:
    """User + system seconds of ``root`` and every live descendant, with their reaped children's
    (``/proc/<pid>/stat`` fields 14-17); None when ``root`` cannot be read."""
    total, seen = 0.0, False
    for pid in [root, *descendants(root)]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += sum(int(f) for f in fields[11:15]) / _TICK
        seen = True
    return total if seen else None


def more_time(timeout_s: float, wall_s: float, cpu_s: float | None) -> float:
    """Seconds to wait beyond a passed deadline: what is left of the CPU budget, within the stretch;
    0 when the budget is spent, the stretch reached, or the CPU time unknown (a plain wall limit)."""
    if cpu_s is None or cpu_s >= timeout_s or wall_s >= STRETCH * timeout_s:
        return 0.0
    return max(1.0, min(timeout_s - cpu_s, STRETCH * timeout_s - wall_s))
