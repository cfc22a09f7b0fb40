"""nbgrader's side: preprocessors that grade out of the kernel, in nbgrader's own process.

Configured in ``nbgrader_config.py``: ``ExecuteUnlessOutOfKernel`` skips executing notebooks the
grader grades entirely out of the kernel (all of this course's), ``GradeCells`` fills every graded
cell with its verdict, ``GradePerformance`` the timed cell. If the grader cannot run at all, the cell
gets an *error* output saying so: zero points an instructor must look at, never a silent zero.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Unicode

from grader import assignments
from grader.common import course, evidence
from grader.common.quiet import quiet
from grader.frontends.outputs import fill_graded_cells, fill_performance_cell


def _assignment_of(resources):
    info = resources.get("nbgrader", {})
    try:
        a = assignments.get(info.get("assignment", ""))
    except ValueError:
        return None, info
    return (a if info.get("notebook") == a.notebook else None), info


class ExecuteUnlessOutOfKernel(Execute):
    """nbgrader's Execute, skipped for assignments graded entirely out of the kernel: the
    learner's notebook is then never executed under autograde (no kernel, no attack surface)."""

    def preprocess(self, nb, resources):
        a, _ = _assignment_of(resources)
        if a is not None and a.kernel_free:
            self.log.info("%s: graded out of the kernel; the notebook is not executed", a.id)
            return nb, resources
        return super().preprocess(nb, resources)


class GradeCells(NbGraderPreprocessor):
    """Overwrite every graded cell's outputs with the verdict computed out of the kernel
    (:func:`grader.frontends.outputs.fill_graded_cells`), for assignments that declare cell checks."""

    def preprocess(self, nb, resources):
        a, info = _assignment_of(resources)
        if a is None or not a.kernel_free:
            return nb, resources
        with Gradebook(info["db_url"]) as gb:
            try:
                allowed = [
                    c.name
                    for c in gb.find_notebook(info["notebook"], info["assignment"]).solution_cells
                ]
            except MissingEntry:
                self.log.warning(
                    "notebook %s not in the gradebook; nothing graded", info["notebook"]
                )
                return nb, resources
        self.log.info("Grading %s/%s out of the kernel", info.get("student"), info.get("notebook"))
        with quiet():
            report = fill_graded_cells(nb, a, allowed)
        folder = Path(resources.get("metadata", {}).get("path") or ".")
        whose = {"student": info.get("student"), "notebook": info.get("notebook")}
        (folder / f"{info['notebook']}.cells.json").write_text(
            json.dumps(report.to_dict() | whose, indent=1)
        )
        resources["effkit_cell_report"] = (whose, report)  # GradePerformance's speed gate reuses it
        return nb, resources


class GradePerformance(NbGraderPreprocessor):
    """Replace the performance cell's outputs with the grader's measurement (see module doc)."""

    spec = Unicode(
        "",
        help="Grading spec name (default: by device; see the assignment's specs in grader/assignments/<id>/checks.py).",
    ).tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        try:
            assignment = assignments.get(info.get("assignment", ""))
        except ValueError:
            return nb, resources  # not an assignment graded on performance
        if info.get("notebook") != assignment.notebook:
            return nb, resources
        with Gradebook(info["db_url"]) as gb:
            try:
                source = gb.find_notebook(info["notebook"], info["assignment"])
                allowed = [c.name for c in source.solution_cells]
            except MissingEntry:
                self.log.warning(
                    "notebook %s not in the gradebook; no performance grading", info["notebook"]
                )
                return nb, resources
        self.log.info("Grading performance of %s/%s", info.get("student"), info.get("notebook"))
        whose, report = resources.get("effkit_cell_report") or ({}, None)
        known = None  # another notebook's verdicts (or none): the gate runs its own checks
        if report is not None and whose == {
            "student": info.get("student"),
            "notebook": info.get("notebook"),
        }:
            known = report.gate_verdicts()
        result = fill_performance_cell(
            nb, assignment, allowed, self.spec or None, gate_verdicts=known
        )
        if result is not None:
            folder = Path(resources.get("metadata", {}).get("path") or ".")
            whose = {"student": info.get("student"), "notebook": info.get("notebook")}
            report = result.report.model_copy(update=whose).model_dump(mode="json")
            (folder / f"{info['notebook']}.grader.json").write_text(json.dumps(report, indent=1))
            self.archive(report)
            self.log.info("Performance: %s / %s points", result.points, result.max_points)
        return nb, resources

    def archive(self, report: dict) -> None:
        """Keep a signed copy for the leaderboard (``grader.common.evidence``); the points are
        already in the notebook, so a failure here is logged, never a failed grading."""
        try:
            path = evidence.archive(course.course_dir(), report)
        except (OSError, evidence.EvidenceError) as err:
            self.log.error("grading report not archived (no leaderboard record): %s", err)
            return
        self.log.info("Signed grading report archived: %s", path)
