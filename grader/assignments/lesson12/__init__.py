"""Lesson 12 - hyperparameter search on a budget: the learner's policy chooses, the grader trains and charges.

``ASSIGNMENT`` is built on first use (``checks``), so the worker importing ``probes`` loads no
parent-side code.
"""


def __getattr__(name: str):
    if name == "ASSIGNMENT":
        from grader.assignments.lesson12.checks import ASSIGNMENT

        return ASSIGNMENT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
