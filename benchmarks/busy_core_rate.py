"""Busy-core failure rate: grade the reference solution's cells N times beside K spinning processes.

Issue 23's goal is that a correct solution loses points in under 1% of gradings with one competing busy core. A rate
that small is only shown by counting: with no failure in N gradings the rate is below 1 - 0.05**(1/N) at 95%
confidence, so 300 gradings bound it below 1.0% (the exact one-sided Clopper-Pearson bound is printed at the end).

Usage (repository root, nothing else running)::

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/busy_core_rate.py lesson7 test_speed \
        --times 300 --first 1001 --busy 1

Each grading takes the solution notebook's cells and grades the named cells through the sandbox with
``grader.scoring.checks.grade_cells``, the path nbgrader's autograde takes, on seed ``first + i`` (the seed draws the grading's
secret task, as a real grading's random seed does). ``--busy K`` keeps K unpinned ``while True: pass`` processes running
for the whole campaign. One line per grading: PASS/fail per cell, the check's own lines (its measured figures), the
failure's reason, seconds. Lessons whose timed grading is the performance cell (``grader.scoring.perf``) have
``python -m grader stress`` instead; lessons 5 and 10 (b) have campaign options in their calibration scripts.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import spinning

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from exercise_cells import solution_cells  # noqa: E402

from grader import assignments  # noqa: E402
from grader.scoring.checks import grade_cells  # noqa: E402
from grader.timed.gate import upper_bound  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lesson", help="assignment id, e.g. lesson7")
    ap.add_argument("cells", nargs="+", help="grade_ids of the cells to grade, e.g. test_speed")
    ap.add_argument("--times", type=int, default=300)
    ap.add_argument("--first", type=int, default=1001, help="seed of the first grading")
    ap.add_argument("--busy", type=int, default=1, help="spinning processes beside the gradings")
    args = ap.parse_args()
    assignment = assignments.get(args.lesson)
    unknown = set(args.cells) - set(assignment.cell_checks)
    if unknown:
        ap.error(
            f"{args.lesson} has no cell check {sorted(unknown)}; it has {sorted(assignment.cell_checks)}"
        )
    solution = ROOT / "solutions" / args.lesson / f"{args.lesson}.ipynb"
    cells = solution_cells(solution, solution)
    print(
        f"{args.lesson} {args.cells}: {args.times} gradings of the reference, seeds {args.first}.., busy "
        f"processes {args.busy}; load {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        flush=True,
    )
    spinning.start(args.busy)
    failed, seconds = [], []
    try:
        for i in range(args.times):
            seed, t0 = args.first + i, time.perf_counter()
            verdicts, _ = grade_cells(assignment, cells, only=args.cells, seed=seed)
            seconds.append(time.perf_counter() - t0)
            if not all(verdicts[c].passed for c in args.cells):
                failed.append(seed)
            shown = " ".join(f"{c} {'PASS' if verdicts[c].passed else 'FAIL'}" for c in args.cells)
            detail = " | ".join(
                line
                for c in args.cells
                for line in [*verdicts[c].lines, verdicts[c].reason or ""]
                if line
            )
            print(f"{i + 1:4d} seed {seed}: {shown} {seconds[-1]:.1f}s | {detail}", flush=True)
            if (i + 1) % 25 == 0:
                print(f"     load {os.getloadavg()}; {len(failed)} failed so far", flush=True)
    except (
        KeyboardInterrupt,
        SystemExit,
    ):  # stopped early (Ctrl-C, kill): count the gradings that finished
        print(
            f"stopped after {len(seconds)} gradings; the next seed is {args.first + len(seconds)}",
            flush=True,
        )
    n = len(seconds)
    if not n:
        return
    print(
        f"{n} gradings, {len(failed)} failed {failed}; 95% upper bound of the failure rate "
        f"{upper_bound(len(failed), n):.2%}; {min(seconds):.1f}-{max(seconds):.1f} s a grading (median "
        f"{sorted(seconds)[n // 2]:.1f}); load {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}"
    )


if __name__ == "__main__":
    main()
