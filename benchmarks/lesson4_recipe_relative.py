"""Lesson 4 part (b) calibration (the design graded): the baseline trains BASE_RUN samples; the target
is its held-out accuracy there minus 0.5 pp; each recipe must reach it within recipe_task.BUDGET.
Prints, per seed, the baseline's samples/seconds to the target and each recipe's (or its best
accuracy when it misses).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/lesson4_recipe_relative.py 49152 40 SEED...

(arguments: BASE_RUN, the head's initial scale, the seeds)
"""

import sys

from grader.assignments.lesson4 import recipe_task as rt

RECIPES = {"ref": (8, 0.1, 32), "unscaled": (8, 0.0125, 32), "nowarm": (8, 0.1, 0)}

if __name__ == "__main__":
    base_run, rt.HEAD_SCALE = int(sys.argv[1]), float(sys.argv[2])
    for seed in (int(s) for s in sys.argv[3:]):
        b = rt.run(seed, 1, rt.BASE_LR, 0, target=2.0, stop_at=base_run)
        target = b.last - 0.005
        n, t = b.to_target(target) or (None, float("nan"))
        row = [f"seed {seed}: base acc {b.last:.3f} reached {target:.3f} at {n} {t:.2f}s"]
        for name, (k, lr, w) in RECIPES.items():
            r = rt.run(seed, k, lr, w, target=target)
            got = r.samples or ("div" if r.diverged else f"miss{r.best:.3f}")
            row.append(f"{name} {got} {r.seconds:.2f}s")
        print(" | ".join(row), flush=True)
