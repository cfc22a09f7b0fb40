"""Calibrate lesson 9's recipe cell: distillation recipes against the same student on labels alone.

Runs the grader's own task (``grader.assignments.lesson9.kd_task``: a 4-hidden-layer MLP teacher
trained on 16,384 samples of a random-oracle task; students trained on 512 labelled samples, 30
epochs, Adam, one thread) on the task seeds given, for each recipe below: held-out accuracy of the
recipe's student, of the same student (same depth and initialisation) with alpha 0, their gap,
and the teacher-vs-student inference speed ratio with its interval (``effkit.abtest.compare``).
``MARGIN`` in ``recipe_checks.py`` comes from these figures, and the depths that pass it
(grader/assignments/lesson9/README.md).

    python grader/assignments/lesson9/calibration/lesson9_calibrate.py 11 12 13 14 15 16
    python grader/assignments/lesson9/calibration/lesson9_calibrate.py --gradings 0 1 2 3 4 5   # whole gradings, as check_recipe draws them

``--widths S...`` measures what a drawn serving size would ask (issue 50): the gain of T 4, alpha
0.9 over labels alone for 2-layer students from scratch 64, 128 and 256 wide.

``--gradings G...`` runs ``recipe_checks.check_recipe`` itself with ``random.Random(G)`` as its
draws (the constraints, then three tasks) for the reference solution's ``distillation_recipe`` and
for the lesson's constants, and prints each verdict with the start of its reason.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

from effkit.measure import device_name
from grader.assignments.lesson9 import kd_task as kt
from grader.assignments.lesson9 import recipe_checks as rc
from grader.sandbox.probe import CallResult
from grader.scoring.checks import CheckFailed, Context

ROOT = Path(__file__).resolve().parents[4]  # grader/assignments/<lesson>/calibration/
LESSON = {"temperature": 4.0, "alpha": 0.9, "student_layers": 2, "student_init": "teacher"}

RECIPES = {  # (temperature, alpha, student_layers, student_init)
    "reference (T4 a0.9 2 layers from teacher)": (4.0, 0.9, 2, "teacher"),
    "T4 a0.9 2 layers from scratch": (4.0, 0.9, 2, "scratch"),
    "T1 a0.5 2 layers from teacher": (1.0, 0.5, 2, "teacher"),
    "T2 a0.3 2 layers from teacher": (2.0, 0.3, 2, "teacher"),
    "T0.5 a0.9 (sharpened)": (0.5, 0.9, 2, "teacher"),
    "T4 a0.9 1 layer from teacher": (4.0, 0.9, 1, "teacher"),
    "T4 a0.9 1 layer from scratch": (4.0, 0.9, 1, "scratch"),
    "T4 a0.9 3 layers from teacher": (4.0, 0.9, 3, "teacher"),
    "T4 a0.9 4 layers (teacher-deep)": (4.0, 0.9, 4, "teacher"),
}


def main(seeds: list[int]) -> None:
    import torch

    print(f"device: {device_name(torch.device('cpu'))}; seeds {seeds}")
    start = time.perf_counter()
    acc, base, nets = {}, {}, {}
    for seed in seeds:  # tasks outer: each teacher trains once (kd_task caches 4)
        teacher = kt.accuracy(
            kt.teacher(seed), *(kt.task_data(seed)[k] for k in ("x_test", "y_test"))
        )
        print(f"task {seed}: teacher {teacher:.1%}", flush=True)
        for name, (temp, alpha, layers, init) in RECIPES.items():
            mine = kt.train_student(seed, temp, alpha, layers, init)
            if (seed, layers, init) not in base:  # the same student on labels alone
                base[seed, layers, init] = kt.train_student(seed, 1.0, 0.0, layers, init)["acc"]
            acc[name, seed] = (mine["acc"], base[seed, layers, init])
            nets.setdefault(name, mine["net"])
    for name in RECIPES:
        gaps = [acc[name, s][0] - acc[name, s][1] for s in seeds]
        ab, said = kt.inference_ab(seeds[0], nets[name])
        worst = (
            min(sum(gaps[i : i + 3]) / 3 for i in range(0, len(gaps) - 2))
            if len(gaps) >= 3
            else min(gaps)
        )
        print(
            f"{name:44} gap over labels alone (pp): {' '.join(f'{g * 100:+.1f}' for g in gaps)}; "
            f"mean {sum(gaps) / len(gaps) * 100:+.1f}; mean of 3: {worst * 100:+.1f} (worst window); "
            f"student acc {sum(acc[name, s][0] for s in seeds) / len(seeds):.1%} (mean); "
            f"speed {ab.ratio:.2f}x [{ab.ci_low:.2f}, {ab.ci_high:.2f}] {said} ({ab.pairs} pairs)",
            flush=True,
        )
    print(f"{time.perf_counter() - start:.0f} s")


def reference_recipe():
    """The solution's ``distillation_recipe``, executed from its source cell (what the grader gets)."""
    src = (ROOT / "solutions" / "lesson9" / "lesson9.py").read_text()
    start = src.index("def distillation_recipe(constraints):")
    ns: dict = {}
    exec(src[start : src.index("### END SOLUTION", start)], ns)
    return ns["distillation_recipe"]


class _Answers:
    """The session a check talks to: the recipe function's answer to the drawn constraints."""

    def __init__(self, fn):
        self.fn = fn

    def call(self, probe, timeout_s, **args):
        return CallResult(True, {"recipe": self.fn(args["constraints"])})


def gradings(seeds: list[int]) -> None:
    for g in seeds:
        for name, fn in (
            ("reference", reference_recipe()),
            ("lesson's constants", lambda c: LESSON),
        ):
            ctx, start = Context(_Answers(fn), random.Random(g)), time.perf_counter()
            try:
                rc.check_recipe(ctx)
                verdict = "PASS " + " | ".join(line.strip() for line in ctx.lines[1:])
            except CheckFailed as err:
                verdict = f"FAIL {str(err)[:300]}"
            print(
                f"grading {g} [{name}] {ctx.lines[0].strip() if ctx.lines else ''}\n  {verdict} "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )


def widths(seeds: list[int]) -> None:
    """Narrower students: does the gain over labels alone stay above MARGIN when the width is drawn?"""
    for seed in seeds:
        data = kt.task_data(seed)
        # the teacher is trained (and cached) here, at the module's WIDTH, before any student
        teacher_acc = kt.accuracy(kt.teacher(seed), data["x_test"], data["y_test"])
        row = []
        for width in (64, 128, 256):
            kt.WIDTH = width  # kd_task.mlp reads it when the student is built
            try:
                kd = kt.train_student(seed, 4.0, 0.9, 2, "scratch")["acc"]
                base = kt.train_student(seed, 1.0, 0.0, 2, "scratch")["acc"]
            finally:
                kt.WIDTH = 256
            row.append(f"width {width}: {100 * (kd - base):+.1f} pp (labels alone {base:.3f})")
        print(f"task {seed}: teacher {teacher_acc:.3f} | " + "; ".join(row), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    seeds = [int(s) for s in args if s.isdigit()]
    if "--gradings" in args:
        import torch

        print(f"device: {device_name(torch.device('cpu'))}; load average {os.getloadavg()[0]:.2f}")
        gradings(seeds or [0, 1, 2, 3, 4, 5])
    elif "--widths" in args:
        print(f"load average {os.getloadavg()[0]:.2f}")
        widths(seeds or [11, 22, 33])
    else:
        main(seeds or [11, 12, 13, 14, 15, 16])
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
