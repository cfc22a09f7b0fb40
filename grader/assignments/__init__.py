"""The registry of assignments: one package per lesson under ``grader/assignments/``, found, not listed.

``get``/``for_notebook`` look an assignment up with a clear error; ``known`` finds the packages, so
a new lesson touches no core file; ``manifest`` reads what a lesson declares once (worker modules,
withheld answers, points, grading time), from which ``worker_modules`` and ``withheld`` are computed
for the sandbox. Workers import this module: it loads manifests, never checks. How to write one:
grader/README.md, "Adding a lesson".
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from grader.kit.assignment import Assignment
from grader.kit.manifest import Manifest


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


def manifest(assignment_id: str) -> Manifest:
    """The ``MANIFEST`` of ``grader.assignments.<id>.manifest``, with a clear error when it is missing."""
    if assignment_id not in known():
        raise ValueError(f"unknown assignment {assignment_id!r}; the grader knows {known()}")
    try:
        module = importlib.import_module(f"{__name__}.{assignment_id}.manifest")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{assignment_id}.manifest":
            raise
        raise LookupError(
            f"grader/assignments/{assignment_id}/ has no manifest.py: declare MANIFEST = "
            f"Manifest(id={assignment_id!r}, ...) there (grader/README.md, 'Adding a lesson')"
        ) from None
    found = getattr(module, "MANIFEST", None)
    if not isinstance(found, Manifest) or found.id != assignment_id:
        raise TypeError(
            f"grader/assignments/{assignment_id}/manifest.py must define MANIFEST = Manifest(id={assignment_id!r}, ...)"
        )
    return found


def manifests() -> list[Manifest]:
    """Every lesson's manifest, in lesson order (lesson2 before lesson10)."""
    return [manifest(aid) for aid in sorted(known(), key=lesson_order)]


def worker_modules() -> tuple[str, ...]:
    """Every lesson's modules a learner's worker may import (``learner_view.WORKER_MODULES``)."""
    return tuple(name for m in manifests() for name in m.modules)


def withheld() -> dict[str, tuple[str, ...]]:
    """lesson -> the effkit functions that are its answer (``learner_view.WITHHELD``)."""
    return {m.id: m.withheld for m in manifests() if m.withheld}


def tools() -> dict[str, tuple[str, ...]]:
    """lesson -> the effkit functions its withheld answers call that stay whole (``Manifest.tools``)."""
    return {m.id: m.tools for m in manifests() if m.withheld}


def key_points_by_lesson() -> dict[int, dict[str, tuple[str, ...]]]:
    """Each lesson's "In your own words" key points by lesson number, as its manifest declares them:
    effkit.lesson reads them through the ``effkit.key_points`` entry point (pyproject.toml)."""
    return {m.syllabus.number: m.key_points for m in manifests() if m.key_points}


def lesson_order(assignment_id: str) -> tuple:
    """Sort key that puts lesson2 before lesson10 (digit runs compare as numbers)."""
    return tuple(
        int(part) if part.isdigit() else part for part in re.split(r"(\d+)", assignment_id)
    )
