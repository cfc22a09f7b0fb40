"""``python -m grader cohort verify``: every autograded score in the gradebook against its signed grading.

The grader account owns the gradebook (formgrader writes it) and could edit a score with sqlite; it
cannot sign one. Each submission autograded in the gradebook must have a grading signed by the root
grading service (``course/signed/``, root's) for the very bytes in ``submitted/``, with the same
points per cell. A manual grade (nbgrader's ``manual_score``) is an instructor's right: listed, not
refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from grader.common import course
from grader.common.evidence import EvidenceError
from grader.frontends import grading_signature
from grader.frontends.cohort_plan import COURSE_ID
from grader.frontends.farm_ledger import submitted_notebook
from grader.frontends.grading_signature import SIGNED_DIR


@dataclass
class Audit:
    problems: list[str] = field(default_factory=list)  # scores the service did not sign
    manual: list[str] = field(default_factory=list)  # instructors' manual grades, for the record
    checked: int = 0


def signed_grading(course_dir: Path, key, aid: str, student: str) -> dict:
    path = Path(course_dir) / SIGNED_DIR / aid / f"{student}.json"
    try:
        signed = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise EvidenceError(f"no signed grading ({type(err).__name__})") from err
    return grading_signature.verify(key, signed)


def audit(course_dir: Path, db_url: str, course_id: str) -> Audit:
    from nbgrader.api import Gradebook  # nbgrader's: only where a gradebook is read

    key = grading_signature.load_verifier(course_dir)
    out = Audit()
    with Gradebook(db_url, course_id) as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                for nb in sub.notebooks:
                    autos = {g.name: g for g in nb.grades if g.auto_score is not None}
                    if not autos:
                        continue  # never autograded
                    where = f"{assignment.name}/{sub.student.id}"
                    out.checked += 1
                    out.manual += [
                        f"{where} {n}: {g.manual_score:g} by hand (autograded {g.auto_score:g})"
                        for n, g in autos.items()
                        if g.manual_score is not None
                    ]
                    try:
                        report = signed_grading(course_dir, key, assignment.name, sub.student.id)
                    except EvidenceError as err:
                        out.problems.append(f"{where}: autograded scores but {err}")
                        continue
                    path = submitted_notebook(assignment.name, sub.student.id, nb.name)
                    if path.is_file():
                        sha = hashlib.sha256(path.read_bytes()).hexdigest()
                        if sha != report["submission_sha256"]:
                            out.problems.append(f"{where}: submitted/ differs from what was signed")
                    signed = {c["grade_id"]: c["points"] for c in report.get("cells", [])}
                    for name, grade in sorted(autos.items()):
                        if signed.get(name) is None or abs(signed[name] - grade.auto_score) > 1e-6:
                            out.problems.append(
                                f"{where} {name}: gradebook {grade.auto_score:g}, "
                                f"signed {signed.get(name)}"
                            )
    return out


def verify() -> int:
    """``python -m grader cohort verify``: print what the audit found; 1 if a score is unsigned."""
    found = audit(
        course.course_dir(), f"sqlite:///{course.course_dir() / 'gradebook.db'}", COURSE_ID
    )
    for line in found.manual:
        print(f"manual grade: {line}")
    for line in found.problems:
        print(f"NOT SIGNED: {line}")
    verdict = f"{len(found.problems)} problems" if found.problems else "every score signed"
    print(f"{found.checked} autograded submissions checked: {verdict}")
    return 1 if found.problems else 0
