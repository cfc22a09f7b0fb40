"""Lesson 7 - length bucketing: a batch sampler judged on secret length distributions, then timed by the grader.

``ASSIGNMENT`` is built on first use (``checks``), so the worker importing ``probes`` loads no
parent-side code.
"""


def __getattr__(name: str):
    if name == "ASSIGNMENT":
        from grader.assignments.lesson7.checks import ASSIGNMENT

        return ASSIGNMENT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
