"""nbgrader's side of screening: files that are not this lesson's notebook, and cells missing from one.

Formgrader's Autograde runs nbgrader in its own process, so ``python -m grader autograde``'s screening
must hold there too. nbgrader reads the file (a ``JSONDecodeError`` traceback for a text file renamed
``.ipynb``) and runs its sanitize steps (``ValidationError: nbgrader cell does not have a grade_id``
for another lesson's notebook) before any autograde preprocessor, so the screening sits in the
exporter nbgrader reads every notebook through (``c.Autograde.exporter_class``): the same one-line
reason as the command line, in formgrader's log, and in the learner's feedback. A refused first
submission leaves no empty record in the gradebook (formgrader's averages would count it as 0).
``ScreenSubmission`` then scores 0 each graded cell a resubmission lacks (nbgrader saves scores only
for the cells a notebook carries, and would keep that cell's earlier score).
"""

from __future__ import annotations

from pathlib import Path

from nbconvert.exporters import NotebookExporter
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor

from grader.frontends import screening


class NotGradable(Exception):
    """The submission is not this assignment's notebook; the message says why and what to do."""


def _drop_if_never_graded(db_url: str, assignment_id: str, student: str) -> bool:
    """nbgrader made the submission's record before reading the file: with no grade ever given
    it would count as 0 in every average. Earlier grades are kept."""
    with Gradebook(db_url) as gb:
        try:
            sub = gb.find_submission(assignment_id, student)
        except MissingEntry:
            return False
        grades = [g for nb in sub.notebooks for g in nb.grades]
        if any(g.auto_score is not None or g.manual_score is not None for g in grades):
            return False
        gb.remove_submission(assignment_id, student)
        return True


class ScreeningExporter(NotebookExporter):
    """nbgrader's notebook exporter, which first screens a submission as ``python -m grader
    autograde`` does (:mod:`grader.frontends.screening`) and raises :class:`NotGradable` with its
    one-line reason before nbgrader reads the file."""

    def from_filename(self, filename, resources=None, **kw):
        converter = self.parent
        info = (resources or {}).get("nbgrader", {})
        if getattr(converter, "_sanitizing", False) and info.get("student"):
            self.screen(Path(filename), info, converter.coursedir)
        return super().from_filename(filename, resources=resources, **kw)

    def screen(self, path: Path, info: dict, coursedir) -> None:
        aid, notebook, student = info["assignment"], info["notebook"], info["student"]
        nb, why = screening.unreadable_reason(path.parent, aid, notebook)
        expected = screening.expected_ids(info["db_url"], aid, notebook) if nb else None
        if nb is not None and expected is not None:
            why = screening.foreign_reason(nb, aid, expected, screening.source_ids())
        if not why:
            return
        dropped = _drop_if_never_graded(info["db_url"], aid, student)
        feedback = screening.write_feedback(
            path.parent,
            Path(coursedir.format_path(coursedir.feedback_directory, student, aid)),
            aid,
            notebook,
            why,
        )
        kept = "no earlier grade" if dropped else "earlier grades kept"
        msg = f"{student}/{aid} not graded, {kept}: {why}"
        self.log.error("[effkit] %s", msg)
        if feedback:
            self.log.error("[effkit] %s: the reason is in their feedback (%s)", student, feedback)
        raise NotGradable(msg)


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
