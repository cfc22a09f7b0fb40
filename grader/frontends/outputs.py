"""The grader's verdicts written into a notebook: what nbgrader's ``determine_grade`` then reads.

``fill_graded_cells`` overwrites the outputs of every graded cell with the verdict computed out of
the kernel (stdout feedback, then an ``execute_result`` with the points, or an ``error``);
``fill_performance_cell`` does the same for the timed cell. Whatever the learner's kernel printed,
raised or forged is discarded. Used by ``grader check`` and the nbgrader preprocessors alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nbformat.v4 import new_output

from grader.common.quiet import quiet
from grader.frontends.notebook import nbgrader_meta, solution_sources
from grader.sandbox.launch import unavailable_lines
from grader.scoring.checks import CellVerdict, grade_cells
from grader.scoring.perf import GradingError, PerfResult, grade


def cell_outputs(v: CellVerdict, max_points: float, report: dict) -> list:
    text = "\n".join(v.lines)
    tail = [f"flag       {f}" for f in report.get("flags", [])]
    tail += [f"note       {line}" for line in unavailable_lines(report.get("unavailable", []))]
    if v.passed:
        body = (text + "\n" if text else "") + "\n".join(tail)
        outs = [new_output("stream", name="stdout", text=(body + "\n") if body else "passed\n")]
        return outs + [
            new_output(
                "execute_result", data={"text/plain": repr(float(max_points))}, execution_count=None
            )
        ]
    body = "\n".join([*v.lines, *tail])
    outs = [new_output("stream", name="stdout", text=body + "\n")] if body else []
    return outs + [
        new_output(
            "error", ename="CheckFailed", evalue=v.reason, traceback=[f"CheckFailed: {v.reason}"]
        )
    ]


@dataclass
class CellsReport:
    """The out-of-kernel verdicts of one notebook, and what the probe worker showed about itself."""

    cells: dict[str, CellVerdict]
    flags: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    worker_uid: int | None = None
    cell_errors: list[str] = field(default_factory=list)

    def gate_verdicts(self) -> dict:
        """What the timed grading's correctness gate reuses instead of running the checks again."""
        return {g: {"passed": v.passed, "reason": v.reason} for g, v in self.cells.items()}

    def to_dict(self) -> dict:
        return {
            "flags": self.flags,
            "unavailable": self.unavailable,
            "worker_uid": self.worker_uid,
            "cell_errors": self.cell_errors,
            "cells": {
                g: {"passed": v.passed, "reason": v.reason, "lines": v.lines}
                for g, v in self.cells.items()
            },
        }


def fill_graded_cells(nb, assignment, allowed_ids) -> CellsReport | None:
    """Overwrite every graded cell's outputs with the grader's verdict (see module doc)."""
    if not assignment.cell_checks:
        return None
    cells = [(c.grade_id, c.source) for c in solution_sources(nb, allowed_ids)]
    verdicts, report = grade_cells(assignment, cells)
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        gid = meta.get("grade_id")
        if cell.get("cell_type") != "code":
            continue
        if not meta.get("grade"):
            cell.outputs = []  # the kernel's outputs are never kept next to the grader's verdicts
            continue
        if gid == assignment.performance_cell:
            continue  # filled by the timed protocol
        v = verdicts.get(gid) or CellVerdict(
            gid, False, reason="the grader has no check for this cell"
        )
        cell.outputs = cell_outputs(v, float(meta.get("points", 0)), report)
        cell.execution_count = None
    return CellsReport(
        verdicts,
        report["flags"],
        report["unavailable"],
        report["worker_uid"],
        report["cell_errors"],
    )


# The performance cell: filled here (not in the nbgrader plugin) so that `python -m grader check`
# runs where nbgrader is not installed (the GPU machine of `make gpu-check`).
def perf_outputs(result: PerfResult, execution_count: int | None) -> list:
    """Outputs nbgrader scores as ``result.points``: stdout feedback, then the points value."""
    return [
        new_output("stream", name="stdout", text=result.feedback + "\n"),
        new_output(
            "execute_result",
            data={"text/plain": repr(float(result.points))},
            execution_count=execution_count,
        ),
    ]


def error_output(message: str) -> list:
    return [
        new_output(
            "error", ename="GradingError", evalue=message, traceback=[f"GradingError: {message}"]
        )
    ]


def fill_performance_cell(
    nb,
    assignment,
    allowed_ids,
    spec_name: str | None = None,
    device: str | None = None,
    gate_verdicts: dict | None = None,
) -> PerfResult | None:
    """Grade ``nb``'s solution cells and write the result into its performance cell."""
    if assignment.performance_cell is None:
        return None  # graded by the notebook's own test cells only
    cell = next(
        (c for c in nb.cells if nbgrader_meta(c).get("grade_id") == assignment.performance_cell),
        None,
    )
    if cell is None:
        return None
    cells = [(c.grade_id, c.source) for c in solution_sources(nb, allowed_ids)]
    max_points = float(nbgrader_meta(cell).get("points", 0))
    try:
        with quiet():
            result = grade(
                assignment,
                cells,
                max_points,
                device=device,
                spec_name=spec_name,
                gate_verdicts=gate_verdicts,
            )
    except GradingError as err:
        cell.outputs = error_output(str(err))
        return None
    cell.outputs = perf_outputs(result, cell.get("execution_count"))
    return result
