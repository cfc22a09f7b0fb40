"""Reading submissions: validated notebooks and the learner's *solution cells* only.

Only solution cells whose ``grade_id`` exists in the source notebook reach the measured process,
so code elsewhere cannot tamper. ``grader check`` reads raw submissions, hence this filter
besides nbgrader's own.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import nbformat


class NotebookError(ValueError):
    """The submission cannot be read as a notebook; the message says why and what to do."""


@dataclass(frozen=True)
class SolutionCell:
    grade_id: str
    source: str


def read_notebook(path: str | Path) -> nbformat.NotebookNode:
    """Load and validate a notebook, raising :class:`NotebookError` with a clear message."""
    path = Path(path)
    if not path.is_file():
        raise NotebookError(f"notebook {path} does not exist (check the path)")
    raw = path.read_bytes()
    if not raw.strip():
        raise NotebookError(
            f"notebook {path} is empty: restore it from a checkpoint or re-fetch it"
        )
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise NotebookError(
            f"{path} is not a valid notebook file ({type(err).__name__}: {err}). It was probably "
            "damaged while editing it outside Jupyter: open it in a text editor to repair the JSON, "
            "or restore the last checkpoint (File > Revert Notebook to Checkpoint)."
        ) from err
    if not isinstance(data, dict) or "cells" not in data:
        raise NotebookError(f"{path} is JSON but not a notebook (no 'cells' list)")
    try:
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)  # also joins multi-line sources
        nbformat.validate(nb)
    except Exception as err:  # ValidationError and friends: all mean "not a valid notebook"
        raise NotebookError(
            f"{path} is not a valid Jupyter notebook ({type(err).__name__}: "
            f"{str(err).splitlines()[0]}). Restore it from a checkpoint or re-fetch the exercise."
        ) from err
    return nb


def nbgrader_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def solution_ids(source_nb) -> list[str]:
    """The ``grade_id``s of the solution cells in the instructor's source notebook, in order."""
    return [
        nbgrader_meta(c)["grade_id"]
        for c in source_nb.cells
        if nbgrader_meta(c).get("solution") is True and "grade_id" in nbgrader_meta(c)
    ]


def solution_sources(nb, allowed_ids: list[str] | set[str]) -> list[SolutionCell]:
    """The learner's code cells that are genuine solution cells, in notebook order."""
    allowed = set(allowed_ids)
    cells, seen = [], set()
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        gid = meta.get("grade_id")
        if cell.get("cell_type") != "code" or meta.get("solution") is not True:
            continue
        if gid not in allowed or gid in seen:  # added, re-labelled or duplicated by the learner
            continue
        seen.add(gid)
        cells.append(SolutionCell(gid, cell.get("source", "")))
    return cells


def merge(source, learner) -> tuple[object, list[str]]:
    """The notebook nbgrader would execute: learner's notebook, source's graded/locked cells."""
    by_id = {
        nbgrader_meta(c)["grade_id"]: c for c in source.cells if "grade_id" in nbgrader_meta(c)
    }
    merged = copy.deepcopy(learner)
    seen, notes = set(), []
    for i, cell in enumerate(merged.cells):
        gid = nbgrader_meta(cell).get("grade_id")
        if gid is None:
            continue
        if gid not in by_id or gid in seen:
            del cell.metadata["nbgrader"]  # added or duplicated by the learner: not graded
            continue
        seen.add(gid)
        src = by_id[gid]
        if nbgrader_meta(src).get("solution"):
            cell.metadata["nbgrader"] = copy.deepcopy(src.metadata["nbgrader"])
        else:
            merged.cells[i] = copy.deepcopy(src)  # locked/test cells: restored, hidden tests too
    for gid, src in by_id.items():
        if gid not in seen and nbgrader_meta(src).get("grade"):
            notes.append(f"graded cell {gid!r} is missing from your notebook: it scores 0")
    for cell in merged.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return merged, notes
