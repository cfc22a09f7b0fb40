"""The grader's pytest face: ``pytest --effkit-submission lesson1.ipynb [--junitxml out.xml]``.

Each graded cell of the notebook's lesson (its manifest's points, read from the registry) is one
test item: passed when the grader gave it every point, failed with the grader's reason otherwise,
its points and reason recorded as junit properties for an LMS or a CI runner. The grading itself
runs once per notebook in a fresh ``python -m grader check --json`` process, exactly what a learner
runs; learner code runs only in that grading's sandboxed workers, never in this process, and only
its typed report (``grader.scoring.report``) comes back. Loaded with ``-p grader.frontends.pytest_plugin``
or, once effkit is installed, by its ``pytest11`` entry point.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grader import assignments
from grader.scoring.report import CellScore, OutOfKernel, load_performance

OPTION = "--effkit-submission"
_SUBMISSIONS = pytest.StashKey[dict]()  # notebook path -> assignment id


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("effkit", "effkit grader: each graded check of a submission as a test")
    group.addoption(
        OPTION,
        action="append",
        default=[],
        metavar="NOTEBOOK",
        help="grade this notebook (repeatable); collects its lesson's graded checks only",
    )
    group.addoption(
        "--effkit-assignment",
        default=None,
        metavar="ID",
        help="the assignment (e.g. lesson1) when the notebook's name does not say it",
    )


def pytest_configure(config: pytest.Config) -> None:
    notebooks = config.getoption("effkit_submission")
    if not notebooks:
        return
    paths = [Path(n).resolve() for n in notebooks]
    for path in paths:
        if not path.is_file():
            raise pytest.UsageError(f"{OPTION}: no such notebook: {path}")
    if config.args_source == pytest.Config.ArgsSource.ARGS and config.args:
        raise pytest.UsageError(f"{OPTION} grades notebooks; pass no test paths beside it")
    chosen = config.getoption("effkit_assignment")
    found = {}
    for path in paths:
        try:
            found[path] = (
                assignments.get(chosen) if chosen else assignments.for_notebook(path.stem)
            ).id
            assignments.manifest(found[path])
        except (ValueError, LookupError, TypeError) as err:
            why = str(err).replace("--assignment", "--effkit-assignment")
            raise pytest.UsageError(f"{OPTION} {path.name}: {why}") from None
    config.args = [str(p) for p in paths]  # collect the submissions, not the testpaths
    config.stash[_SUBMISSIONS] = found


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    assignment_id = parent.config.stash.get(_SUBMISSIONS, {}).get(file_path.resolve())
    if assignment_id:
        return Submission.from_parent(parent, path=file_path, assignment_id=assignment_id)
    return None


class Submission(pytest.File):
    """One notebook: an item per graded cell of its lesson, graded together on the first item's run."""

    def __init__(self, *, assignment_id: str, **kwargs):
        super().__init__(**kwargs)
        self.assignment_id = assignment_id
        self._graded: Grading | None = None

    def collect(self):
        for grade_id, points in assignments.manifest(self.assignment_id).points.items():
            yield Check.from_parent(self, name=grade_id, max_points=float(points))

    def grading(self) -> Grading:
        if self._graded is None:
            self._graded = Grading.run(self.path, self.assignment_id)
        return self._graded


class Grading:
    """The typed result of one ``python -m grader check --json`` run (or why there is none)."""

    def __init__(self, cells: dict[str, CellScore], reasons: dict[str, str], log: str, error: str):
        self.cells, self.reasons, self.log, self.error = cells, reasons, log, error

    @classmethod
    def run(cls, notebook: Path, assignment_id: str) -> Grading:
        with tempfile.TemporaryDirectory(prefix="effkit-pytest-") as tmp:
            out = Path(tmp) / "report.json"
            cmd = [sys.executable, "-m", "grader", "check", str(notebook)]
            cmd += ["--assignment", assignment_id, "--json", str(out)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            log = proc.stdout + proc.stderr
            if proc.returncode != 0 or not out.is_file():
                last = (log.strip().splitlines() or [""])[-1]
                return cls(
                    {}, {}, log, f"the grading did not finish (exit {proc.returncode}): {last}"
                )
            report = json.loads(out.read_text())
        cells = {c.grade_id: c for c in map(CellScore.model_validate, report["cells"])}
        return cls(cells, reasons(report), log, "")


def reasons(report: dict) -> dict[str, str]:
    """grade_id -> the grader's one-line reason: a cell check's, or the timed grading's problems."""
    checked = OutOfKernel.model_validate(report.get("out_of_kernel") or {}).cells
    found = {gid: v.reason for gid, v in checked.items()}
    if report.get("performance"):
        perf = load_performance(report["performance"])
        cell = assignments.get(perf.assignment).performance_cell
        found[cell] = "; ".join(perf.problems) or (
            f"speedup {perf.speedup:.2f}x on {perf.device}" if perf.speedup else ""
        )
    return found


class CheckFailed(Exception):
    """A graded cell that did not earn all its points."""


class Check(pytest.Item):
    """One graded cell: passes with every point, fails with the grader's reason."""

    def __init__(self, *, max_points: float, **kwargs):
        super().__init__(**kwargs)
        self.max_points = max_points
        self.user_properties.append(("max_points", max_points))

    def runtest(self) -> None:
        grading = self.parent.grading()
        if grading.error:
            self.add_report_section("call", "grader check", grading.log)
            raise CheckFailed(grading.error)
        cell = grading.cells.get(self.name)
        if cell is None:
            raise CheckFailed(f"the grader reported no verdict for {self.name}")
        if cell.max_points != self.max_points:
            raise CheckFailed(
                f"the grader scored {self.name} out of {cell.max_points:g}, its manifest "
                f"out of {self.max_points:g}: the lesson's notebook and manifest disagree"
            )
        reason = grading.reasons.get(self.name) or cell.error or ""
        self.user_properties += [("points", cell.points or 0.0), ("reason", reason)]
        if (cell.points or 0.0) < cell.max_points:
            raise CheckFailed(f"{cell.points or 0:g} / {cell.max_points:g} points: {reason}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.parent.assignment_id}::{self.name}"
