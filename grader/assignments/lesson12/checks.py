"""Lesson 12 - a hyperparameter search under a fixed budget, graded out of the kernel.

The grader drives the learner's ask/report policy, trains and evaluates every trial itself and
charges the budget (:mod:`search_checks`); only configurations and stop bools cross from the worker.
"""

from __future__ import annotations

from grader.assignments.lesson12.search_checks import check_pruning, check_search
from grader.kit.assignment import Assignment
from grader.kit.checks import quiz_check

SETUP_SOURCE = "import optuna"  # the learner may use Optuna's ask-and-tell (or write successive halving by hand)

QUIZ_KEY = {  # the notebook holds only the questions
    "q1": "b",  # successive halving, eta 3: 27 at 1 epoch -> 9 at 3 -> 3 at 9
    "q2": "c",  # a gap inside the seed noise is no winner: re-run both on new seeds
    "q3": "a",  # a grid gives the important axis only as many values as its own grid line
    "q4": "b",  # early rungs favour fast starters; Hyperband's brackets hedge
    "q5": "a",  # one study in a shared storage, every worker's trials seen by the sampler
}
QUIZ_WHY = {  # why each wrong option is wrong, without naming the right one: the feedback a learner reads
    "q1": {
        "a": "9 is how many survive the first rung; they train on to the next rung, not yet to 9 "
        "epochs, and that rung cuts its trials as the first one did",
        "c": "a single survivor needs more rungs than this schedule has: from 1 epoch to 9, longer by "
        "the reduction factor at each rung, is only two promotions; count what two cuts leave of 27",
    },
    "q2": {
        "a": "a 0.4 pp gap is smaller than the ±1 pp a single configuration moves between seeds: one run "
        "each cannot tell which is higher, so 'higher' here may be noise",
        "b": "the batch size says nothing about which result is real, and the gap is smaller than one "
        "configuration's seed-to-seed spread",
    },
    "q3": {
        "b": "grid points are independent trials and parallelise perfectly: parallelism is not where a "
        "grid loses",
        "c": "random points land in corners as often as anywhere: avoiding corners is not what they gain",
    },
    "q4": {
        "a": "successive halving costs far less than the grid: most trials stop after the first rung",
        "c": "ASHA (Optuna's SuccessiveHalvingPruner) is asynchronous and built for parallel workers",
    },
    "q5": {
        "b": "separate in-memory studies cannot see each other's trials: each sampler and pruner learns "
        "from a fraction of the results, and pruners compare against too few trials",
        "c": "n_jobs threads share one machine (and Python's GIL); it is no way to add machines",
    },
}

CELL_CHECKS = {
    "test_search": check_search,
    "test_pruning": check_pruning,
    "test_quiz": quiz_check(QUIZ_KEY, QUIZ_WHY),
}
NAMES = ("Search",)

ASSIGNMENT = Assignment("lesson12", "Search", SETUP_SOURCE, CELL_CHECKS)
