"""Lesson 4 part (b) calibration, the graded design: per grading seed, three tasks drawn as
``recipe_checks.check_recipe`` draws them (the baseline's accuracy after 49,152 samples minus 0.5 pp
is the target), then each recipe's run on them and the verdict ``recipe_checks.judge`` gives.

    OMP_WAIT_POLICY=PASSIVE python grader/assignments/lesson4/calibration/lesson4_recipe_relative.py GRADING_SEED...
"""

import random
import sys
from types import SimpleNamespace

from grader.assignments.lesson4 import recipe_checks as rc
from grader.assignments.lesson4 import recipe_task as rt
from grader.scoring.checks import CheckFailed

RECIPES = {  # name: (accum_steps, lr, warmup_steps)
    "reference 16x16 LR 0.2 warm-up 64": (16, 16 * rt.BASE_LR, 64),
    "unscaled 16x16 LR 0.0125": (16, rt.BASE_LR, 64),
    "no warm-up 16x16 LR 0.2": (16, 16 * rt.BASE_LR, 0),
    "sqrt 16x16 LR 0.05": (16, 4 * rt.BASE_LR, 64),  # not required to fail
}

if __name__ == "__main__":
    for grading in (int(s) for s in sys.argv[1:]):
        ctx = SimpleNamespace(rng=random.Random(grading))
        tasks = [
            rc._draw_task(ctx, rt.BASE_LR, 1.0) for _ in range(rc.SEEDS)
        ]  # the plain loss (c = 1)
        for seed, target, (n, t) in tasks:
            print(
                f"grading {grading} task {seed}: target {target:.3f}, baseline {n} samples {t:.2f} s",
                flush=True,
            )
        for name, (k, lr, w) in RECIPES.items():
            runs = [
                (target, base, rt.run(seed, k, lr, w, target=target))
                for seed, target, base in tasks
            ]
            cells = [
                f"{r.samples} {r.seconds:.2f}s"
                if r.samples
                else f"miss best {r.best:.3f} ({r.best - tg:+.3f})"
                for tg, _, r in runs
            ]
            try:
                verdict = "PASS " + rc.judge(k, lr, w, rt.BASE_LR, runs)[-1]
            except CheckFailed as err:
                verdict = "FAIL " + str(err).split(". ", len(runs))[-1][:90]
            print(f"  {name:36} | {' | '.join(cells)} | {verdict}", flush=True)
