"""nbgrader integration: the preprocessor that fills in the performance cell from a clean process.

**What it does.** `GradePerformance` runs in ``nbgrader autograde`` right after ``Execute``
(configured in ``nbgrader_config.py``). For notebooks of assignments the grader knows, it takes the
learner's solution cells (only those whose ``grade_id`` is a solution cell of the *source*
notebook in the gradebook), grades performance with :func:`grader.perf.grade` in this process -
nbgrader's own, where no learner code runs - and replaces the performance cell's outputs with the
feedback block (stdout) and the points (an ``execute_result``, which nbgrader's
``determine_grade`` reads as partial credit). It also writes ``<notebook>.grader.json`` next to
the autograded notebook.

**When to use it.** Automatically, via ``nbgrader autograde`` or ``python -m grader autograde``.

**Expected gain.** The kernel never decides the performance score: a learner cell that patches
``grader`` or ``time`` inside the kernel changes nothing (the kernel-side call only prints a
note and returns 0 under autograding, fail-safe if this preprocessor is missing).

**Pitfalls.** If the grader cannot run at all (the baseline fails), the cell gets an *error*
output saying so - zero points that an instructor must look at, never a silent zero.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Unicode

from grader import assignments
from grader.cells import fill_graded_cells, fill_performance_cell
from grader.quiet import quiet


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
    (:func:`grader.cells.fill_graded_cells`), for assignments that declare cell checks."""

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
        report = dict(report or {}, student=info.get("student"), notebook=info.get("notebook"))
        (folder / f"{info['notebook']}.cells.json").write_text(json.dumps(report, indent=1))
        resources["effkit_cell_report"] = report  # GradePerformance's speed gate reuses it
        return nb, resources


class GradePerformance(NbGraderPreprocessor):
    """Replace the performance cell's outputs with the grader's measurement (see module doc)."""

    spec = Unicode(
        "", help="Grading spec name (default: by device; see the assignment's specs in grader/assignments/<id>/checks.py)."
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
        known = resources.get("effkit_cell_report") or {}
        if (known.get("student"), known.get("notebook")) != (info.get("student"), info.get("notebook")):
            known = None  # another notebook's verdicts: the gate runs its own checks
        result = fill_performance_cell(nb, assignment, allowed, self.spec or None, cell_report=known)
        if result is not None:
            folder = Path(resources.get("metadata", {}).get("path") or ".")
            report = dict(result.report, student=info.get("student"), notebook=info.get("notebook"))
            (folder / f"{info['notebook']}.grader.json").write_text(json.dumps(report, indent=1))
            self.log.info("Performance: %s / %s points", result.points, result.max_points)
        return nb, resources
