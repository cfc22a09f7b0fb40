"""Lesson 5 - activation checkpointing: gradients, a plan's bytes and its time, graded out of the kernel.

``ASSIGNMENT`` is built on first use (``checks``), so the worker importing ``probes`` loads no
parent-side code.
"""


def __getattr__(name: str):
    if name == "ASSIGNMENT":
        from grader.assignments.lesson5.checks import ASSIGNMENT

        return ASSIGNMENT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
