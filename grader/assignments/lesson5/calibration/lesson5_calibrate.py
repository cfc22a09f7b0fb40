"""Calibration of lesson 5's timed cells (test_speed, test_least_recompute): several gradings per plan.

Usage (from the repository root, machine otherwise quiet): ``python grader/assignments/lesson5/calibration/lesson5_calibrate.py N [PLAN ...]``
grades the reference planner and three others (checkpoint everything, one block more than needed, every block
keeping its matmuls) N times each on seeds 200.., and prints per grading: verdicts, rounds, step times, the plan's
ratio over "checkpoint everything" with its interval, and its share of the grader's plan's gain. The figures in
grader/assignments/lesson5/README.md come from it. ``--first S`` starts the seeds at S; ``--busy K`` keeps K spinning
processes running meanwhile (a busy-core failure rate: ``--busy 1 --first 1001 300 reference``).
"""

import os
import re
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[4]  # grader/assignments/<lesson>/calibration/
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # this grader; benchmarks/spinning.py

import spinning  # noqa: E402

from grader import assignments  # noqa: E402
from grader.frontends.notebook import solution_sources  # noqa: E402
from grader.scoring.checks import grade_cells  # noqa: E402

A = assignments.get("lesson5")
sol = nbformat.read("solutions/lesson5/lesson5.ipynb", as_version=4)
ids = [
    c.metadata["nbgrader"]["grade_id"]
    for c in sol.cells
    if c.metadata.get("nbgrader", {}).get("solution")
]
base = [(c.grade_id, c.source) for c in solution_sources(sol, ids)]
PLANS = {
    "reference": None,
    "everything": 'def plan_checkpointing(blocks, x, budget_bytes):\n    return {"blocks": list(range(len(blocks))), "save": None}',
    "one block too many": """def plan_checkpointing(blocks, x, budget_bytes):
    for k in range(len(blocks) + 1):
        plan = {"blocks": list(range(k)), "save": None}
        if saved_activation_bytes(lambda: checkpointed_forward(blocks, x, plan).sum()) <= budget_bytes:
            return {"blocks": list(range(min(len(blocks), k + 1))), "save": None}""",
    "selective, every block": 'def plan_checkpointing(blocks, x, budget_bytes):\n    return {"blocks": list(range(len(blocks))), "save": ["addmm", "_scaled_dot_product_flash_attention_for_cpu"]}',
}
args = sys.argv[1:]
first = busy = 0
for flag in ("--first", "--busy"):
    if flag in args:
        at = args.index(flag)
        value = int(args.pop(at + 1))
        args.pop(at)
        first, busy = (value, busy) if flag == "--first" else (first, value)
first = first or 200
n, names = int(args[0]), args[1:] or list(PLANS)
print(
    f"load {os.getloadavg()}; busy processes {busy}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
    flush=True,
)
hogs = spinning.start(busy)
for name in names:
    src = PLANS[name]
    cells = [(g, src if (g == "plan_checkpointing" and src) else s) for g, s in base]
    for i in range(n):
        t = time.time()
        v, _ = grade_cells(A, cells, only=["test_speed", "test_least_recompute"], seed=first + i)
        text = " | ".join(
            v["test_speed"].lines
            + [v["test_speed"].reason, v["test_least_recompute"].reason]
            + v["test_least_recompute"].lines
        )
        rounds = re.findall(r"\((\d+) interleaved rounds", text)
        ms = re.findall(
            r"everything (\d+) ms/step, your plan (\d+) ms, the grader's plan \(.*?\) (\d+) ms",
            text,
        )
        yours = re.findall(r"(\d\.\d\dx, interval \d\.\d\d-\d\.\d\d)", text)
        share = re.findall(r"recovered (\d+)% of the", text)
        gr = re.findall(
            r"(?:grader's plan's gain \(|gained over checkpointing everything \(.*? vs |grader's plan ran )(\d\.\d\d)x",
            text,
        )
        print(
            f"{name:24} seed {first + i}: speed {'PASS' if v['test_speed'].passed else 'fail'} least {'PASS' if v['test_least_recompute'].passed else 'fail'}"
            f" rounds={rounds[:1]} ms(all/yours/grader)={ms[:1]} yours={yours[:1]} share={share[:1]} grader={gr[:1]} {time.time() - t:.1f}s",
            flush=True,
        )
        if not ms:
            print("   ", text[:300])
spinning.stop(hogs)
print(f"load {os.getloadavg()}")
