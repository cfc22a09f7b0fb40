"""The learner's solution cells of an exercise notebook, as the grader carries them: the cells whose
``grade_id`` is a solution cell of the instructor's source notebook (`grader.notebook.solution_ids`).
Shared by the out-of-kernel exercise tests. ``InProcess`` and ``grade_in_process`` grade cells the
way a sandboxed worker would answer them, in this process (the sandboxed path is each lesson's
reference test); lessons 10 and 11 use them, the older lesson tests still carry their own copies."""

from __future__ import annotations

from pathlib import Path

import nbformat

from grader.cells import CellVerdict, CheckFailed, Context
from grader.notebook import solution_ids, solution_sources
from grader.probe import CallResult


def solution_cells(source: Path, path: Path, **replace: str) -> list[tuple[str, str]]:
    """(grade_id, source) of ``path``'s solution cells; ``replace`` swaps a cell's source by id."""
    ids = solution_ids(nbformat.read(source, as_version=4))
    cells = [(c.grade_id, c.source) for c in solution_sources(nbformat.read(path, as_version=4), ids)]
    return [(gid, replace.get(gid, src)) for gid, src in cells]


class InProcess:
    """What a worker would answer, computed here from the cells: ``probes.probe_<name>(self, ...)``."""

    def __init__(self, assignment, probes, cells: list[tuple[str, str]]):
        self.probes, self.ns, self.load_errors = probes, {}, []
        exec(assignment.setup_source, self.ns)  # noqa: S102  (repository test code, not a learner's)
        for gid, source in cells:
            try:
                exec(source, self.ns)  # noqa: S102
            except Exception as err:  # noqa: BLE001  (a raising cell is recorded, as the worker does)
                self.load_errors.append({"cell": gid, "message": f"{type(err).__name__}: {err}"})

    def call(self, probe: str, timeout_s: float, serve=None, **args) -> CallResult:
        try:
            data, blobs = getattr(self.probes, f"probe_{probe}")(self, **args)
        except Exception as err:  # noqa: BLE001  (a raising probe is that check's failure)
            return CallResult(False, failure=f"raised {type(err).__name__}: {err}")
        return CallResult(True, data, blobs)


def grade_in_process(assignment, session, grade_ids, rng) -> dict[str, CellVerdict]:
    """Each cell check of ``grade_ids`` on ``session``, drawing from one ``rng`` in order, as the grader does."""
    verdicts = {}
    for gid in grade_ids:
        ctx = Context(session, rng)
        try:
            assignment.cell_checks[gid](ctx)
            verdicts[gid] = CellVerdict(gid, True, ctx.lines)
        except CheckFailed as err:
            verdicts[gid] = CellVerdict(gid, False, ctx.lines, str(err))
    return verdicts
