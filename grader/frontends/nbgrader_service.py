"""nbgrader's side of a cohort's grading service: formgrader's Autograde asks root to grade.

In a cohort formgrader runs as the unprivileged grader account (``EFFKIT_GRADING_SOCKET`` set by
``jupyterhub_config.py``), so ``nbgrader_config.py`` swaps the grading preprocessors for
``ServiceVerdicts``: it names the assignment and the student to the grading service
(``grading_service``), checks the Ed25519 signature with the public key and that the grading is of
the very bytes nbgrader collected, and writes the verdicts into the notebook as the farm's are.
No learner code runs in formgrader's process; a score the service did not sign never gets in.
"""

from __future__ import annotations

import hashlib
import os

from nbgrader.preprocessors import NbGraderPreprocessor
from pydantic import ValidationError

from grader.common import course
from grader.common.evidence import EvidenceError
from grader.frontends import grading_client, grading_signature
from grader.frontends.farm_ledger import submitted_notebook
from grader.frontends.nbgrader_farm import write_verdicts
from grader.scoring.report import GradingReport


def signed_report(signed: dict, aid: str, student: str, sha256: str) -> GradingReport:
    """The service's report if its signature holds and it grades exactly this submission."""
    data = grading_signature.verify(grading_signature.load_verifier(course.course_dir()), signed)
    try:
        report = GradingReport.model_validate(data)
    except ValidationError as err:
        raise EvidenceError(f"the signed grading does not validate: {err.errors()[0]}") from err
    if (report.assignment, report.student, report.submission_sha256) != (aid, student, sha256):
        raise EvidenceError("the signed grading is another submission's")
    return report


class ServiceVerdicts(NbGraderPreprocessor):
    """Every graded cell's outputs from the root grading service's signed report; a refusal or
    a failed grading fails this notebook with its one-line reason (the gradebook keeps what it
    held)."""

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        student, aid, name = info.get("student"), info.get("assignment"), info.get("notebook")
        path = submitted_notebook(aid, student, name)
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        self.log.info("%s/%s: asking the grading service", student, name)
        answer = grading_client.request(os.environ["EFFKIT_GRADING_SOCKET"], aid, student)
        if "signed" not in answer:
            raise ValueError(f"[effkit] {student}/{aid} not graded: {answer.get('refused')}")
        try:
            report = signed_report(answer["signed"], aid, student, sha)
        except EvidenceError as err:
            raise ValueError(f"[effkit] {student}/{aid}: grading refused: {err}") from err
        if report.status != "graded":
            raise ValueError(f"[effkit] {student}/{aid} not graded: {report.reason}")
        write_verdicts(nb, resources, report)
        self.log.info(
            "%s/%s: %s / %s points, signed", student, name, report.total, report.max_total
        )
        return nb, resources
