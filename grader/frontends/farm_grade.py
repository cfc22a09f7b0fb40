"""``grade``: one collected submission graded through the farm, the interface every front end calls.

A front end (``python -m grader grade``, the cohort's root grading service that the unprivileged
formgrader asks) names an assignment and a collected notebook, ``course/submitted/<student>/
<assignment>/<notebook>.ipynb``, and gets one ``GradingReport`` back. Nothing else is accepted:
the path is a place in the course, not a file to open wherever it points, so a caller cannot make
the (root) grader read another file. The farm does the rest as for a whole cohort: the ledger (a
current grading is returned, not redone), Ray, the signed archive and nbgrader's gradebook.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from grader import assignments
from grader.common import course
from grader.frontends import farm
from grader.frontends.farm_ledger import grader_version
from grader.scoring.report import GradingReport

# ray.init holds one cluster per process: calls from a service's threads take turns
_ONE_AT_A_TIME = threading.Lock()


class NotACollectedSubmission(ValueError):
    """The path is not ``course/submitted/<student>/<assignment>/<notebook>.ipynb``."""


def collected_student(assignment_id: str, submission_path: str | Path) -> str:
    """The student whose collected notebook ``submission_path`` is, or NotACollectedSubmission.
    Lexical (``..`` folded, links not followed): ``screening`` refuses a linked notebook."""
    a = assignments.get(assignment_id)
    path = Path(os.path.abspath(submission_path))
    submitted = Path(os.path.abspath(course.course_dir() / "submitted"))
    parts = path.relative_to(submitted).parts if path.is_relative_to(submitted) else ()
    if len(parts) != 3 or parts[1:] != (assignment_id, f"{a.notebook}.ipynb"):
        raise NotACollectedSubmission(
            f"{submission_path} is not a collected {assignment_id} submission: expected "
            f"{submitted}/<student>/{assignment_id}/{a.notebook}.ipynb"
        )
    if parts[0].startswith("."):
        raise NotACollectedSubmission(f"{parts[0]!r} is not a student id")
    return parts[0]


def grade(
    assignment_id: str,
    submission_path: str | Path,
    *,
    address: str | None = None,
    device: str | None = None,
    spec: str | None = None,
    limit_s: float = farm.DEFAULT_LIMIT_S,
    record: bool = True,
    uncalibrated: bool = False,
) -> GradingReport:
    """Grade one collected submission through the farm and return its report.

    ``status`` is "graded" (scores, outputs, performance), "failed" with a one-line ``reason`` (a
    hang past ``limit_s``, a lost node) or "refused" with one (not a notebook, another lesson's, a
    GPU-only lesson on a farm without GPUs): a submission's fault never raises. Raises ValueError for an unknown assignment or a path that is not a collected
    submission, and Ray's errors when the farm itself cannot run. ``address``: join that Ray
    cluster (its token in ``RAY_AUTH_TOKEN_PATH``) instead of starting a private one (~20 s);
    ``record``: also write nbgrader's gradebook and ``autograded/`` (formgrader's view);
    ``uncalibrated``: time a lesson even where its gate has no calibration for the device class.
    """
    student = collected_student(assignment_id, submission_path)
    with _ONE_AT_A_TIME:
        out = farm.run(
            assignment_id,
            address=address,
            slots=1,
            limit_s=limit_s,
            device=device,
            spec=spec,
            students=[student],
            progress=False,
            record=record,
            uncalibrated=uncalibrated,
        )
    if student in out.reports:
        return out.reports[student]
    return GradingReport(  # screening refused it: nothing was read past the refusal, no hash
        assignment=assignment_id,
        student=student,
        notebook=assignments.get(assignment_id).notebook,
        submission_sha256="",
        grader_version=grader_version(),
        status="refused",
        reason=out.refused.get(student, "not graded: the farm returned no report for it"),
    )
