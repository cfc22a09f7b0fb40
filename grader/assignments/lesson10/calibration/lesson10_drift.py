"""How far a correct batched step ends from lesson 10 (b)'s original ``slow_step``, over many graded tasks.

Run: ``OMP_WAIT_POLICY=PASSIVE taskset -c 0 .venv/bin/python grader/assignments/lesson10/calibration/lesson10_drift.py [--activation relu] [N]``.

Draws ``N`` tasks exactly as a grading does (``step_checks.draw``, from ``random.Random(0)``), trains
each ``TIMED_STEPS`` steps with the original and with the reference ``fast_step`` read from the
solution notebook (one batched forward and backward, ``SGD(foreach=True)``), on one thread, and prints the distribution of
``|w_fast - w_slow| / |w_slow - w_init|``: the number ``step_checks.TOLERANCE`` must sit above for
every task, since a grading checks 8 tasks and a correct step may fail none of them. Tasks whose
drift passes 1e-4 are printed with their spec (a regression test can replay them).

``--activation relu`` swaps the task model's GELUs for ReLUs (the model before 2026-11-26), to
reproduce why they were swapped: a pre-activation within rounding of zero takes a different branch
in the two steps, and the gap compounds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[4]  # grader/assignments/<lesson>/calibration/
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from exercise_cells import solution_cells  # noqa: E402

from effkit.measure import device_name  # noqa: E402
from grader.assignments.lesson10 import slow_step as task  # noqa: E402
from grader.assignments.lesson10 import step_checks  # noqa: E402


def reference_step():
    """The solution notebook's ``fast_step``: what the drift is measured for is what the grader grades."""
    solution = ROOT / "solutions" / "lesson10" / "lesson10.ipynb"
    ns: dict = {}
    exec(dict(solution_cells(solution, solution))["fast_step"], ns)  # noqa: S102  (the repository's reference)
    return ns["fast_step"]


def drift(spec: dict, steps: int, fast_step) -> float:
    t = task.Task(spec["seed"], spec["batch"], steps)
    init = task.flat(t.model())
    slow, _ = task.run(task.slow_step, t, spec["lr"], spec["weight_decay"])
    fast, _ = task.run(fast_step, t, spec["lr"], spec["weight_decay"])
    want = task.flat(slow)
    return float((task.flat(fast) - want).norm() / (want - init).norm())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "n", type=int, nargs="?", default=1000, help="tasks to draw (default 1000, ~0.3 s each)"
    )
    parser.add_argument("--activation", choices=("gelu", "relu"), default="gelu")
    args = parser.parse_args()
    if args.activation == "relu":
        shape = task._shape_model
        task._shape_model = lambda: nn.Sequential(
            *(nn.ReLU() if isinstance(m, nn.GELU) else m for m in shape())
        )
    torch.set_num_threads(1)
    fast_step, rng, errors, start = reference_step(), random.Random(0), [], time.perf_counter()
    print(
        f"device: {device_name('cpu')}; torch {torch.__version__}; activation {args.activation}; "
        f"{step_checks.TIMED_STEPS} steps per task; TOLERANCE {step_checks.TOLERANCE:g}",
        flush=True,
    )
    for i in range(args.n):
        spec = step_checks.draw(rng)
        errors.append(drift(spec, step_checks.TIMED_STEPS, fast_step))
        if errors[-1] > 1e-4:
            print(f"  task {i}: {spec}: {errors[-1]:.2e} of the update", flush=True)
    errors.sort()
    q = lambda p: errors[min(len(errors) - 1, int(p * len(errors)))]  # noqa: E731
    over = sum(e > step_checks.TOLERANCE for e in errors)
    print(
        f"{args.n} tasks: median {q(0.5):.1e}, 99th percentile {q(0.99):.1e}, max {errors[-1]:.1e} of the update; "
        f"{over} above TOLERANCE; {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
