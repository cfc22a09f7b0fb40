"""Lesson 14, the capstone speedrun: the assignment, its grading specs and its quiz key.

The performance cell is scored by :mod:`grader.assignments.lesson14.capstone` (time to target; each
gain's attribution is measured and shown, not yet scored); the quiz is checked like every lesson's.
Parent only.
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

QUIZ_KEY = {"q1": "a", "q2": "b", "q3": "c", "q4": "b", "q5": "c"}
QUIZ_WHY = {
    "q1": {
        "b": "the reason is what steps per second leave out (more steps, lost accuracy), not their "
        "noise: a recipe can run more steps per second and still arrive later",
        "c": "the gate compares the final accuracy with naive's; reaching the target earlier says "
        "nothing about where the run ends",
    },
    "q2": {
        "a": "gains multiply only when they remove different costs; two changes that shrink the "
        "same cost cannot both save their solo share",
        "c": "time to target already counts any extra chunks; a change left out costs less than "
        "its solo gain when another change removes the same cost",
    },
    "q3": {
        "a": "the byte count leaves out the casts and, without bf16 units, the emulated kernels: "
        "only a measurement on that CPU says which wins",
        "b": "autocast changes each step's cost; a regularising effect on the synthetic set is not "
        "what the lesson measured, and the grader holds the accuracy to naive's anyway",
    },
    "q4": {
        "a": "three pairs' range covers the median 75% of the time (median_ci_coverage(3)), "
        "not 95%: pairing removes drift within a pair, not the sampling noise of few pairs",
        "c": "each ratio compares the two recipes under the same load: it measures the recipe, "
        "and the load's drift is what the pairing cancels",
    },
    "q5": {
        "a": "the share is of the saved time: (1/1.5 - 1/2.0) / (1 - 1/2.0) = 10 s of 30 s",
        "b": "speed-ups do not subtract: in time, leaving X out gives back 10 s of the 30 s saved",
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
