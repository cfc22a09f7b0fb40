"""Lesson 10 - profiling: the grader plants bottlenecks and profiles them, the learner only diagnoses plain data.

``ASSIGNMENT`` is built on first use (``checks``), so the worker importing ``probes`` loads no
parent-side code.
"""


def __getattr__(name: str):
    if name == "ASSIGNMENT":
        from grader.assignments.lesson10.checks import ASSIGNMENT

        return ASSIGNMENT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
