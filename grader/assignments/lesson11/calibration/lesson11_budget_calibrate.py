"""Calibrate lesson 11 (b)'s per-rank memory budget: every train_sharded variant graded through the sandbox.

    sudo python grader/assignments/lesson11/calibration/lesson11_budget_calibrate.py [SEED ...] [--only NAME,...]
    (default seeds 1 2, every submission)

For each seed and each submission in tests/lesson11_sharded.py (the recipes, and the attacks on the
measurement), it grades ``test_memory_budget`` exactly as the grader does: one sandboxed worker per
rank, each a memory cgroup the parent reads, on the model the grading draws from the seed. It prints
the draw (parameters, blocks, the largest block's share), the verdict and the peak per parameter and
rank. Needs root (cgroups, namespaces), like the grader's sandbox.
"""

from __future__ import annotations

import os
import random
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


def drawn(seed: int) -> dict:
    """The architecture a grading with ``seed`` draws: the check's draws replayed (``_sharded_run``)."""
    rng = random.Random(seed)
    for _ in range(3):  # data, init, form seeds
        rng.randrange(1 << 30)
    return memory_task.draw(rng)


def main(seeds: list[int], only: list[str]) -> None:
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {device_name()}; load {os.getloadavg()[0]:.2f}; "
        f"budget {memory_task.BUDGET:g} B per parameter and rank"
    )
    base = [c for c in solution_cells(SOLUTION, SOLUTION) if c[0] != "train_sharded"]
    subs = {n: s for n, s in {**VARIANTS, **ATTACKS}.items() if not only or n in only}
    for seed in seeds:
        arch = drawn(seed)
        print(
            f"seed {seed}: {memory_task.parameters(arch) / 1e6:.2f}M parameters, {len(arch['hidden'])} blocks "
            f"(hidden {min(arch['hidden'])}-{max(arch['hidden'])}), largest block "
            f"{memory_task.largest_block(arch):.1%}; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        for name, source in subs.items():
            start = time.perf_counter()
            verdict = grade_cells(
                A, [*base, ("train_sharded", source)], only=["test_memory_budget"], seed=seed
            )[0]
            v = verdict["test_memory_budget"]
            text = v.reason + " " + " ".join(v.lines)
            per = re.search(r"= ([0-9.]+) bytes per parameter and rank", text)
            rms = re.search(r"by ([0-9.e+-]+) in RMS|\(([0-9.e+-]+) RMS apart", text)
            print(
                f"seed {seed} {name:18s} {'PASS' if v.passed else 'fail'}  "
                f"{(per[1] + ' B/param/rank') if per else 'no figure':>18s}  "
                f"weights {next(g for g in rms.groups() if g) if rms else '-':>8s} RMS  "
                f"({time.perf_counter() - start:.1f} s)",
                flush=True,
            )


if __name__ == "__main__":
    args = sys.argv[1:]
    only = args[args.index("--only") + 1].split(",") if "--only" in args else []
    seeds = [int(a) for a in args if a.isdigit()]
    main(seeds or [1, 2], only)
