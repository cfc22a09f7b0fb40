"""Lesson 12 - a hyperparameter search under a fixed budget, graded out of the kernel.

The grader drives the learner's ask/report policy, trains and evaluates every trial itself and
charges the budget (:mod:`search_checks`); only configurations and stop bools cross from the worker.
"""

from __future__ import annotations

from grader.assignments.lesson12.search_checks import check_pruning, check_search
from grader.kit.assignment import Assignment
from grader.kit.checks import quiz_check

SETUP_SOURCE = "import optuna"  # the learner may use Optuna's ask-and-tell (or write successive halving by hand)


CELL_CHECKS = {
    "test_search": check_search,
    "test_pruning": check_pruning,
    "test_quiz": quiz_check("lesson12", ("q1", "q2", "q3", "q4", "q5")),
}
NAMES = ("Search",)

ASSIGNMENT = Assignment("lesson12", "Search", SETUP_SOURCE, CELL_CHECKS)
