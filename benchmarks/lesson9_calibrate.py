"""Calibrate lesson 9's recipe cell: distillation recipes against the same student on labels alone.

Runs the grader's own task (``grader.assignments.lesson9.kd_task``: a 4-hidden-layer MLP teacher
trained on 16,384 samples of a random-oracle task; students trained on 512 labelled samples, 30
epochs, Adam, one thread) on the task seeds given, for each recipe below: held-out accuracy of the
recipe's student, of the same student (same depth and initialisation) with alpha 0, their gap,
and the teacher-vs-student inference speed ratio with its interval (``effkit.abtest.compare``).
``MARGIN`` in ``recipe_checks.py`` comes from these figures (grader/assignments/lesson9/README.md).

    python benchmarks/lesson9_calibrate.py 11 12 13 14 15 16
"""

from __future__ import annotations

import sys
import time

from effkit.measure import device_name
from grader.assignments.lesson9 import kd_task as kt

RECIPES = {  # (temperature, alpha, student_layers, student_init)
    "reference (T4 a0.9 2 layers from teacher)": (4.0, 0.9, 2, "teacher"),
    "T4 a0.9 2 layers from scratch": (4.0, 0.9, 2, "scratch"),
    "T1 a0.5 2 layers from teacher": (1.0, 0.5, 2, "teacher"),
    "T2 a0.3 2 layers from teacher": (2.0, 0.3, 2, "teacher"),
    "T0.5 a0.9 (sharpened)": (0.5, 0.9, 2, "teacher"),
    "T4 a0.9 1 layer from teacher": (4.0, 0.9, 1, "teacher"),
    "T4 a0.9 4 layers (teacher-deep)": (4.0, 0.9, 4, "teacher"),
}


def main(seeds: list[int]) -> None:
    import torch

    print(f"device: {device_name(torch.device('cpu'))}; seeds {seeds}")
    for name, (temp, alpha, layers, init) in RECIPES.items():
        gaps, start = [], time.perf_counter()
        for seed in seeds:
            mine = kt.train_student(seed, temp, alpha, layers, init)
            base = kt.train_student(seed, 1.0, 0.0, layers, init)
            gaps.append(mine["acc"] - base["acc"])
        ab = kt.inference_ab(seeds[0], mine["net"])
        print(
            f"{name:44} gap over labels alone (pp): {' '.join(f'{g * 100:+.1f}' for g in gaps)}; "
            f"mean {sum(gaps) / len(gaps) * 100:+.1f}; mean of 3: {min(sum(gaps[i : i + 3]) / 3 for i in range(0, len(gaps) - 2)) * 100:+.1f} (worst window); "
            f"speed {ab.ratio:.2f}x [{ab.ci_low:.2f}, {ab.ci_high:.2f}]; {time.perf_counter() - start:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [11, 12, 13, 14, 15, 16])
