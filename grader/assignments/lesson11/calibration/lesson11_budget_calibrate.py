"""Calibrate lesson 11 (b)'s per-rank memory budget: every train_sharded variant graded through the sandbox.

    sudo python grader/assignments/lesson11/calibration/lesson11_budget_calibrate.py [SEED ...]        (default 1 2)

For each seed and each submission in tests/lesson11_sharded.py (the recipes, and the attacks on the
measurement), it grades ``test_memory_budget`` exactly as the grader does: a sandboxed worker whose
memory cgroup the parent reads, 2 gloo ranks forked inside it. It prints the verdict and the peak
per parameter and rank. Needs root (cgroups, namespaces), like the grader's sandbox.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # grader/assignments/<lesson>/calibration/
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from exercise_cells import solution_cells  # noqa: E402
from lesson11_sharded import ATTACKS, VARIANTS  # noqa: E402

from effkit.measure import device_name  # noqa: E402
from grader import assignments  # noqa: E402
from grader.assignments.lesson11 import memory_task  # noqa: E402
from grader.scoring.checks import grade_cells  # noqa: E402

A = assignments.get("lesson11")
SOLUTION = ROOT / "solutions" / "lesson11" / "lesson11.ipynb"


def main(seeds: list[int]) -> None:
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {device_name()}; load {os.getloadavg()[0]:.2f}; "
        f"{memory_task.parameters() / 1e6:.2f}M parameters, budget {memory_task.BUDGET:g} B per parameter and rank"
    )
    base = [c for c in solution_cells(SOLUTION, SOLUTION) if c[0] != "train_sharded"]
    for seed in seeds:
        for name, source in {**VARIANTS, **ATTACKS}.items():
            start = time.perf_counter()
            verdict = grade_cells(
                A, [*base, ("train_sharded", source)], only=["test_memory_budget"], seed=seed
            )[0]
            v = verdict["test_memory_budget"]
            text = v.reason + " " + " ".join(v.lines)
            per = re.search(r"= ([0-9.]+) bytes per parameter and rank", text)
            rms = re.search(r"by ([0-9.e+-]+) in RMS|\(([0-9.e+-]+) RMS apart", text)
            print(
                f"seed {seed} {name:16s} {'PASS' if v.passed else 'fail'}  "
                f"{(per[1] + ' B/param/rank') if per else 'no figure':>18s}  "
                f"weights {next(g for g in rms.groups() if g) if rms else '-':>8s} RMS  "
                f"({time.perf_counter() - start:.1f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [1, 2])
