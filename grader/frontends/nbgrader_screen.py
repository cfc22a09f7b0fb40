"""nbgrader's side of screening: another lesson's notebook, and cells missing from a resubmission.

First in ``c.Autograde.autograde_preprocessors``, so it holds when nbgrader autograde runs directly
(formgrader's path), not only under ``python -m grader autograde``. nbgrader saves a score only
for the graded cells a notebook carries, so without this a notebook stripped of the lesson's cells
"passes" silently with the earlier submission's scores, and a resubmission missing one graded cell
keeps that cell's earlier score. Refusing raises before ``SaveAutoGrades``: the gradebook keeps
the earlier grades and nbgrader reports the learner as failed with the reason. Unreadable files
never get here: nbgrader's own reading (its sanitize step) refuses them first.
"""

from __future__ import annotations

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor

from grader.frontends import screening


class NotGradable(Exception):
    """The submission is not this assignment's notebook; the message says why and what to do."""


class ScreenSubmission(NbGraderPreprocessor):
    """Raise :class:`NotGradable` when the notebook's cells are not the assignment's
    (:func:`grader.frontends.screening.foreign_reason`); else score 0 every graded cell the
    notebook lacks, as its newest submission earned."""

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        aid, notebook, student = (
            info.get("assignment", ""),
            info.get("notebook", ""),
            info.get("student"),
        )
        expected = screening.expected_ids(info["db_url"], aid, notebook)
        if expected is None:
            return nb, resources  # not in the gradebook: nbgrader skips it itself
        why = screening.foreign_reason(nb, aid, expected, screening.source_ids())
        if why:
            msg = f"{student}/{aid} not graded, earlier grades kept: {why}"
            self.log.error("[effkit] %s", msg)
            raise NotGradable(msg)
        have = screening.grade_ids(nb)
        with Gradebook(info["db_url"]) as gb:
            try:
                grades = gb.find_submission_notebook(notebook, aid, student).grades
            except MissingEntry:
                return nb, resources
            for grade in grades:
                if grade.name not in have and grade.manual_score is None and grade.auto_score != 0:
                    earlier = grade.auto_score
                    self.log.warning(
                        "[effkit] %s/%s: graded cell %r is missing from the notebook: 0 points%s",
                        student,
                        aid,
                        grade.name,
                        ""
                        if earlier is None
                        else f" (the earlier submission's {earlier:g} dropped)",
                    )
                    grade.auto_score, grade.needs_manual_grade = 0.0, False
            gb.db.commit()
        return nb, resources
