"""First calibration of lesson 4 part (b) (a fixed 85% target; superseded by
``grader/assignments/lesson4/calibration/lesson4_recipe_relative.py``, the graded design): samples and seconds to 85% per recipe and seed.
It showed why the target became relative: task difficulty varies so much per seed (the baseline
needed 2k to 54k samples) that on easy tasks every mistake got there within the budget. (Those
figures were taken with ``recipe_task.BUDGET = 65536``, commit f734f8f; the budget is now 81,920.)

Runs the grader's own task (`grader.assignments.lesson4.recipe_task`) for the baseline (batch 16,
LR 0.0125), the reference recipe (8 micro-batches, linear LR, warm-up) and the two mistakes the
check must catch (LR unscaled; no warm-up), plus square-root scaling and a bigger batch.

    OMP_WAIT_POLICY=PASSIVE python grader/assignments/lesson4/calibration/lesson4_recipe_calibrate.py [--main] 0 1 2 3 4
"""

from __future__ import annotations

import sys

from grader.assignments.lesson4 import recipe_task as rt

RECIPES = {  # name: (accum_steps, lr, warmup_steps)
    "baseline 16, LR 0.0125": (1, rt.BASE_LR, 0),
    "8 x 16, LR 0.1, warm-up 32": (8, 8 * rt.BASE_LR, 32),
    "8 x 16, LR 0.0125 (unscaled)": (8, rt.BASE_LR, 32),
    "8 x 16, LR 0.1, no warm-up": (8, 8 * rt.BASE_LR, 0),
    "8 x 16, LR 0.035 (sqrt)": (8, 8**0.5 * rt.BASE_LR, 32),
    "16 x 16, LR 0.2, warm-up 16": (16, 16 * rt.BASE_LR, 16),
    "16 x 16, LR 0.2, no warm-up": (16, 16 * rt.BASE_LR, 0),
}

if __name__ == "__main__":
    seeds = [int(s) for s in sys.argv[1:] if not s.startswith("--")] or [0, 1, 2]
    names = list(RECIPES)[:4] if "--main" in sys.argv else list(RECIPES)
    for name in names:
        accum, lr, warmup = RECIPES[name]
        cells = []
        for seed in seeds:
            r = rt.run(seed, accum, lr, warmup)
            hit = (
                f"{r.samples}"
                if r.samples
                else ("diverged" if r.diverged else f"miss(best {r.best:.3f})")
            )
            cells.append(f"{hit} {r.seconds:.2f}s")
        print(f"{name:30} | " + " | ".join(cells), flush=True)
