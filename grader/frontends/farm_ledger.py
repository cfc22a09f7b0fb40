"""The farm's results ledger: one signed entry per student and assignment, written by the driver only.

An entry is current when its key (assignment, student, sha256 of the submitted notebook, grader
version) matches the submission as it is now: re-running the farm grades only what is missing,
failed or changed. Entries are signed with the course key (``grader.common.evidence``), which
stays with the driver: a report edited on disk, or written by anyone without the key, is refused by
the driver and by nbgrader's ``FarmVerdicts`` alike. One file per student, replaced atomically:
a submission is in the ledger once or not at all, whatever was killed when.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pydantic import ValidationError

from grader.common import course, evidence
from grader.scoring.report import GradingReport

GRADER_ROOT = Path(__file__).resolve().parents[1]


def grader_version() -> str:
    """A hash of the grader's code, calibrations and quiz keys: a grading made by other code is
    stale. Content, not a git commit: a node installed from a wheel or a tarball has no git. A file
    closed to this account (a quiz key, to a cohort's learner: their Validate runs ``grader check
    --json`` as them) counts by its name alone; such a report is never compared with the farm's."""
    h = hashlib.sha256()
    for path in sorted(GRADER_ROOT.rglob("*")):
        if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            try:
                content = path.read_bytes()
            except PermissionError:
                content = b"\0sealed"
            h.update(str(path.relative_to(GRADER_ROOT)).encode() + b"\0" + content)
    return h.hexdigest()[:16]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def submitted_notebook(assignment: str, student: str, notebook: str) -> Path:
    return course.course_dir() / "submitted" / student / assignment / f"{notebook}.ipynb"


class Ledger:
    """``course/farm/<assignment>/ledger/<student>.json``: {"algorithm", "signature", "report",
    "recorded"}; ``recorded`` is True once nbgrader's gradebook holds the report's scores."""

    def __init__(self, assignment: str, course_dir: Path | None = None):
        self.course_dir = Path(course_dir or course.course_dir())
        self.folder = self.course_dir / "farm" / assignment / "ledger"
        self.assignment = assignment
        self._key = None

    @property
    def key(self) -> bytes:
        if self._key is None:
            self._key = evidence.load_key(self.course_dir)
        return self._key

    def path(self, student: str) -> Path:
        return self.folder / f"{evidence.safe_name(student)}.json"

    def read(self, student: str) -> tuple[GradingReport | None, bool, str | None]:
        """(report, recorded, why it was refused): a missing entry is (None, False, None)."""
        path = self.path(student)
        if not path.is_file():
            return None, False, None
        try:
            signed = json.loads(path.read_text())
            report = GradingReport.model_validate(evidence.verify(self.key, signed))
        except (OSError, json.JSONDecodeError, evidence.EvidenceError, ValidationError) as err:
            return None, False, f"ledger entry {path.name} refused: {str(err).splitlines()[0]}"
        if (report.assignment, report.student) != (self.assignment, student):
            return None, False, f"ledger entry {path.name} is another submission's"
        return report, bool(signed.get("recorded")), None

    def current(self, student: str, sha256: str, version: str) -> GradingReport | None:
        """The entry if it grades exactly this submission with this grader and did not fail."""
        report, _, _ = self.read(student)
        if report is None or report.status != "graded":
            return None
        if (report.submission_sha256, report.grader_version) != (sha256, version):
            return None
        return report

    def write(self, report: GradingReport, recorded: bool = False) -> Path:
        data = report.model_dump(mode="json")
        signed = {
            "algorithm": evidence.ALGORITHM,
            "signature": evidence.sign(self.key, data),
            "report": data,
            "recorded": recorded,
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(report.student)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(signed, indent=1, sort_keys=True))
        os.replace(tmp, path)  # whole or not at all: a killed driver never leaves half an entry
        return path

    def mark_recorded(self, student: str) -> None:
        report, _, why = self.read(student)
        if report is not None and why is None:
            self.write(report, recorded=True)
