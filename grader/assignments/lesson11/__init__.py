"""Lesson 11 - data parallelism: the learner's training function run on 2 gloo ranks, judged by the parent.

``ASSIGNMENT`` is built on first use (``checks``), so the worker importing ``probes`` loads no
parent-side code.
"""


def __getattr__(name: str):
    if name == "ASSIGNMENT":
        from grader.assignments.lesson11.checks import ASSIGNMENT

        return ASSIGNMENT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
