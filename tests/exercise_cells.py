"""The learner's solution cells of an exercise notebook, as the grader carries them: the cells whose
``grade_id`` is a solution cell of the instructor's source notebook (`grader.notebook.solution_ids`).
Shared by the out-of-kernel exercise tests (lessons 4-6)."""

from __future__ import annotations

from pathlib import Path

import nbformat

from grader.notebook import solution_ids, solution_sources


def solution_cells(source: Path, path: Path, **replace: str) -> list[tuple[str, str]]:
    """(grade_id, source) of ``path``'s solution cells; ``replace`` swaps a cell's source by id."""
    ids = solution_ids(nbformat.read(source, as_version=4))
    cells = [(c.grade_id, c.source) for c in solution_sources(nbformat.read(path, as_version=4), ids)]
    return [(gid, replace.get(gid, src)) for gid, src in cells]
