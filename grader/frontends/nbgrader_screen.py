"""nbgrader's side of screening: refuse another lesson's notebook before anything is graded.

First in ``c.Autograde.autograde_preprocessors``, so it holds when nbgrader autograde runs directly
(formgrader's path), not only under ``python -m grader autograde``. Raising here stops nbgrader
before ``SaveAutoGrades``: the gradebook keeps the learner's earlier grades, and nbgrader reports
the learner as failed with this message. Unreadable files never get here: nbgrader's own reading
(its sanitize step) refuses them first, with the same effect on the gradebook.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from grader.frontends import screening


class NotGradable(Exception):
    """The submission is not this assignment's notebook; the message says why and what to do."""


class RefuseForeignNotebook(NbGraderPreprocessor):
    """Raise :class:`NotGradable` when the notebook's cells are not the assignment's
    (:func:`grader.frontends.screening.foreign_reason`)."""

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        expected = screening.expected_ids(
            info["db_url"], info.get("assignment", ""), info.get("notebook", "")
        )
        if expected is None:
            return nb, resources  # not in the gradebook: nbgrader skips it itself
        why = screening.foreign_reason(nb, info["assignment"], expected, screening.source_ids())
        if why:
            student = info.get("student")
            msg = f"{student}/{info['assignment']} not graded, earlier grades kept: {why}"
            self.log.error("[effkit] %s", msg)
            raise NotGradable(msg)
        return nb, resources
