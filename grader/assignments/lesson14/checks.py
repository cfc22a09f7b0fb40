"""Lesson 14, the capstone speedrun: the assignment, its grading specs and its quiz key.

The performance cell is scored by :mod:`grader.assignments.lesson14.capstone` (time to target and
each gain's attribution); the quiz is checked like every lesson's. Parent only.
"""

from __future__ import annotations

from grader.kit.assignment import Assignment
from grader.kit.checks import GradingSpec, quiz_check
from grader.kit.in_notebook import grade_saved_notebook

SETUP_SOURCE = """\
import math

import numpy as np
import torch

from effkit.workloads import cifar
from effkit.workloads.cifar import CIFAR_MEAN, CIFAR_STD"""

# The target sits where the naive recipe gets late in its schedule on the grader's easy synthetic
# set (calibration/curves.py: 0.82 at 1 epoch, 0.94-0.97 at 1.25 of 2), so a faster recipe has room
# to show. The naive recipe reached it in every run recorded (calibration/README.md, under load), a
# handful, not a bound on how often it misses; when it does, scoring.speed refuses the grading as
# the grader's fault. Four chunks an epoch: the evaluation cadence.
SPECS = {  # name, workload profile, n_train, n_eval, n_warmup, epochs, repeats; then options
    "smoke": GradingSpec(
        "smoke", "smoke", 2000, 2000, 300, 2, 3, chunks_per_epoch=4, cpu_cores=1, target=0.95
    ),
    # Plumbing only (nothing calibrated): tests of messages and wiring.
    "tiny": GradingSpec("tiny", "smoke", 300, 500, 200, 1, 1, chunks_per_epoch=2, target=0.12),
}

QUIZ_KEY = {"q1": "b", "q2": "c", "q3": "c", "q4": "a"}
QUIZ_WHY = {
    "q1": {
        "a": "steps per second miss a recipe that needs more steps: a larger batch can run faster "
        "per sample and still arrive later",
        "c": "the evaluations are on the clock in both recipes: they are part of the time to the "
        "target, not a reason to leave it out",
    },
    "q2": {
        "a": "gains multiply only when they remove different costs; two changes that shrink the "
        "same cost cannot both save their solo share",
        "b": "leaving a change out measures what the recipe loses without it, which includes its "
        "interactions with the others",
    },
    "q3": {
        "a": "on a CPU without bf16 units, bf16 adds casts and slower kernels: it costs time here",
        "b": "autocast does not change how many samples reach the target; it changes each step's cost",
    },
    "q4": {
        "b": "one pair says nothing of the noise: the interval needs several pairs",
        "c": "a larger held-out set steadies the accuracy, not the clock",
    },
}
CELL_CHECKS = {"test_quiz": quiz_check(QUIZ_KEY, QUIZ_WHY)}


def grade_performance(notebook: str = "lesson14.ipynb") -> float | None:
    """The performance check: see :func:`grader.kit.in_notebook.grade_saved_notebook`."""
    return grade_saved_notebook(notebook)


ASSIGNMENT = Assignment(
    "lesson14",
    "CHANGES",
    SETUP_SOURCE,
    CELL_CHECKS,
    performance_cell="test_speedrun",
    runtime_module="grader.assignments.lesson14.runtime",
    specs=SPECS,
    names=("CHANGES",),
    reference_names=("DevicePipeline", "OptimizedTrainer", "airbench_net", '"optimized"'),
    performance_grader="grader.assignments.lesson14.capstone",
)
