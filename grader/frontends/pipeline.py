"""One grading, start to end: submission -> merged notebook -> cell verdicts -> performance -> report.

``load`` reads the learner's notebook and merges it with the instructor's source the way nbgrader's
``OverwriteCells`` does; ``grade`` fills every graded cell out of the kernel, then the timed cell,
and scores them with nbgrader's ``determine_grade``. ``grader check``, the nbgrader preprocessors
and ``check_my_work`` all go through these steps; ``render`` and ``Report.to_json`` say the result.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from grader import assignments
from grader.common import course
from grader.frontends.farm_ledger import grader_version, sha256_file
from grader.frontends.notebook import merge, nbgrader_meta, read_notebook, solution_ids
from grader.frontends.outputs import CellsReport, fill_graded_cells, fill_performance_cell
from grader.kit.assignment import Assignment
from grader.sandbox.launch import unavailable_lines
from grader.scoring.device_class import device_info
from grader.scoring.perf import PerfResult
from grader.scoring.report import CellScore, GradingReport


@dataclass
class Submission:
    """A learner's notebook merged with the source: their solution cells, the source's locked cells."""

    path: Path
    assignment: Assignment
    notebook: object  # nbformat.NotebookNode
    allowed: list[
        str
    ]  # grade_ids of the source's solution cells: nothing else is the learner's code
    notes: list[str] = field(default_factory=list)


@dataclass
class Score:
    grade_id: str
    points: float | None
    max_points: float
    error: str | None = None


@dataclass
class Report:
    submission: Submission
    scores: list[Score]
    cells: CellsReport | None
    performance: PerfResult | None
    device: str | None = None  # what it was graded on (None: the default device)

    @property
    def total(self) -> float:
        return sum(s.points or 0 for s in self.scores)

    @property
    def max_total(self) -> float:
        return sum(s.max_points for s in self.scores)

    def to_json(self) -> dict:
        """``grader check --json``: the ``GradingReport`` the farm sends, keyed by this notebook's
        bytes and this grader (no student: a learner checks their own work)."""
        report = grading_report(
            self,
            student="",
            submission_sha256=sha256_file(self.submission.path),
            grader_version=grader_version(),
            device=device_info(self.device),
        )
        return report.model_dump(mode="json")


def grading_report(report: Report, **meta) -> GradingReport:
    """``report`` as the typed object every front end reads (``grader.scoring.report``); ``meta``
    names the submission (student, sha256, grader version) and where it ran."""
    nb = report.submission.notebook
    outputs = {
        nbgrader_meta(c)["grade_id"]: json.loads(json.dumps(c.get("outputs", [])))
        for c in nb.cells
        if c.get("cell_type") == "code" and nbgrader_meta(c).get("grade")
    }
    return GradingReport(
        assignment=report.submission.assignment.id,
        notebook=report.submission.assignment.notebook,
        status="graded",
        total=report.total,
        max_total=report.max_total,
        cells=[CellScore(**vars(s)) for s in report.scores],
        outputs=outputs,
        notes=report.submission.notes,
        performance=report.performance.report if report.performance else None,
        out_of_kernel=report.cells.to_dict() if report.cells else None,
        timed=report.submission.assignment.performance_cell is not None,
        **meta,
    )


def _readable(path: Path) -> bool:
    try:
        return path.is_file() and os.access(path, os.R_OK)
    except OSError:  # a folder above it is closed to this user (a cohort's learner)
        return False


def load(path: str | Path, assignment_id: str | None = None) -> Submission:
    """Raises NotebookError (not a notebook) or ValueError (unknown assignment) with a clear message."""
    path = Path(path)
    learner = read_notebook(path)
    a = assignments.get(assignment_id) if assignment_id else assignments.for_notebook(path.stem)
    if not a.kernel_free:
        raise ValueError(
            f"assignment {a.id} declares no cell checks: the grader grades only out of the kernel"
        )
    notes = []
    src_path = course.source_notebook(a.id, a.notebook)
    if not _readable(src_path):  # a learner's own check: solutions/ is the instructor's
        src_path = course.release_notebook(a.id, a.notebook)
        notes.append("instructor source notebook not found: hidden tests skipped")
    source = read_notebook(src_path)
    merged, missing = merge(source, learner)
    return Submission(path, a, merged, solution_ids(source), notes + missing)


def grade(sub: Submission, spec_name: str | None = None, device: str | None = None) -> Report:
    """Every graded cell, then the timed one (whose correctness gate reuses the verdicts just
    computed). Raises GradingError when the grader itself could not run."""
    cells = fill_graded_cells(sub.notebook, sub.assignment, sub.allowed)
    perf = fill_performance_cell(
        sub.notebook,
        sub.assignment,
        sub.allowed,
        spec_name,
        device,
        cells.gate_verdicts() if cells else None,
    )
    return Report(sub, scores(sub.notebook), cells, perf, device)


def scores(nb) -> list[Score]:
    from nbgrader.utils import determine_grade, is_grade  # nbgrader's own scoring, optional here

    rows = []
    for cell in nb.cells:
        if not is_grade(cell):
            continue
        got, out_of = determine_grade(cell)
        error = next((o for o in cell.get("outputs", []) if o.output_type == "error"), None)
        rows.append(
            Score(
                nbgrader_meta(cell)["grade_id"],
                got,
                out_of,
                f"{error.ename}: {error.evalue}" if error else None,
            )
        )
    return rows


def render(report: Report) -> str:
    """The terminal's view: points per cell, notes, each check's lines, flags, the timed feedback."""
    out = [f"\n{'cell':24s} {'points':>12s}"]
    for s in report.scores:
        out.append(
            f"{s.grade_id:24s} {s.points or 0:5.2f} / {s.max_points:<5g}"
            + (f"  {s.error[:200]}" if s.error else "")
        )
    out.append(f"{'total':24s} {report.total:5.2f} / {report.max_total:<5g}")
    out += [f"note: {note}" for note in report.submission.notes]
    if report.cells is not None:
        for gid, v in report.cells.cells.items():
            out.append(f"\n[{gid}] " + ("passed" if v.passed else "FAILED: " + v.reason))
            out += v.lines
        out += [f"flag: {flag}" for flag in report.cells.flags]
        out += unavailable_lines(report.cells.unavailable)
    if report.performance is not None:
        out.append("\n" + report.performance.feedback)
    return "\n".join(out)
