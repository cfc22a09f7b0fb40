"""The registry of assignments: one package per lesson under ``grader/assignments/``, found, not listed.

``get``/``for_notebook`` look an assignment up with a clear error; ``known`` finds the packages, so
a new lesson touches no core file. How to write one: grader/README.md, "Adding a lesson".
"""

from __future__ import annotations

import importlib
import pkgutil

from grader.kit.assignment import Assignment


def get(assignment_id: str) -> Assignment:
    """The assignment ``assignment_id``: the ``ASSIGNMENT`` of ``grader.assignments.<id>.checks``."""
    if assignment_id not in known():
        raise ValueError(f"unknown assignment {assignment_id!r}; the grader knows {known()}")
    assignment = importlib.import_module(f"{__name__}.{assignment_id}.checks").ASSIGNMENT
    if not isinstance(assignment, Assignment) or assignment.id != assignment_id:
        raise TypeError(
            f"grader/assignments/{assignment_id}/ checks.py must define ASSIGNMENT = Assignment(id={assignment_id!r}, ...)"
        )
    return assignment


def known() -> list[str]:
    """Every package under ``grader/assignments/`` (found, not listed: a new lesson touches no core file)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg)


def for_notebook(stem: str) -> Assignment:
    """The assignment whose notebook is called ``stem`` (e.g. "lesson2")."""
    for aid in known():
        a = get(aid)
        if a.notebook == stem:
            return a
    raise ValueError(
        f"no assignment has a notebook called {stem!r}.ipynb; known: {known()} "
        "(pass --assignment if you renamed the file)"
    )
