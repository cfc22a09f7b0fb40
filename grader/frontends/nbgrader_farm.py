"""nbgrader's side of ``python -m grader farm``: the farm's signed verdicts written into notebooks.

Its own module (not ``nbgrader_plugin``) because it reads the farm's ledger, which needs pydantic:
plain ``nbgrader autograde`` must keep working on an install without the ``farm`` extra.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from grader.frontends.farm_ledger import Ledger, sha256_file, submitted_notebook


class FarmVerdicts(NbGraderPreprocessor):
    """Under ``python -m grader farm``'s recording run (``EFFKIT_FARM_VERDICTS``): every graded
    cell's outputs from the farm's ledger entry, which must be signed with the course key, graded,
    and for the very bytes nbgrader collected; else this notebook fails and the gradebook keeps
    what it held. The learner's notebook is not executed and nothing is graded here."""

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        student, aid, name = info.get("student"), info.get("assignment"), info.get("notebook")
        report, _, why = Ledger(aid).read(student)
        if report is None or report.status != "graded":
            raise ValueError(f"[effkit] {student}: no graded farm result ({why or 'none'})")
        if report.submission_sha256 != sha256_file(submitted_notebook(aid, student, name)):
            raise ValueError(f"[effkit] {student}: the submission changed since the farm graded it")
        write_verdicts(nb, resources, report)
        self.log.info(
            "%s/%s: verdicts from the farm (%s on %s)", student, name, report.wall_s, report.host
        )
        return nb, resources


def write_verdicts(nb, resources, report) -> None:
    """Every graded cell's outputs from ``report`` (a ``GradingReport`` already checked to be this
    submission's), the rest of the code cells' outputs cleared, and the reports autograde's cohort
    table and plot read written beside the notebook."""
    info = resources.get("nbgrader", {})
    student, name = info.get("student"), info.get("notebook")
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code":
            continue
        if not meta.get("grade"):
            cell.outputs = []  # as GradeCells: the kernel's outputs never sit next to verdicts
            continue
        outputs = report.outputs.get(meta.get("grade_id"))
        if outputs is None:
            raise ValueError(f"[effkit] {student}: no graded verdict for {meta.get('grade_id')}")
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        cell.execution_count = None
    folder = Path(resources.get("metadata", {}).get("path") or ".")
    whose = {"student": student, "notebook": name}
    if report.out_of_kernel is not None:
        (folder / f"{name}.cells.json").write_text(
            json.dumps(report.out_of_kernel.model_dump(mode="json") | whose, indent=1)
        )
    if report.performance is not None:  # what autograde's cohort table and plot read
        perf = report.performance.model_dump(mode="json") | whose
        (folder / f"{name}.grader.json").write_text(json.dumps(perf, indent=1))
