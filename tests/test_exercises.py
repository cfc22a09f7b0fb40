"""What every exercise's notebooks must be, one test parametrised over the assignments (it replaces
the copy each lesson's exercise test had): the instructor's source notebook is an nbgrader assignment
whose setup cell is the grader's, whose graded cells are the grader's cell checks with their points,
and whose test cells only ask the grader; the released notebook carries none of the answers."""

import nbformat
import pytest
from exercise_cells import POINTS, exercise_path, grade_id, solution_path  # noqa: E402  (tests/ is on sys.path)

from grader import assignments
from grader.scoring import quiz


def test_every_exercise_with_points_names_its_answers():
    """Each cell-checked exercise's manifest names text of its answers (``released_without``), or
    its quiz key does (``quiz_key.json``, checked whole below: a manifest names no quiz answer, the
    learner reads it)."""
    assert all(
        assignments.manifest(lesson).released_without or quiz.key_file(lesson).is_file()
        for lesson in POINTS
    )


@pytest.mark.parametrize(
    "lesson", sorted(POINTS, key=lambda name: int(name.removeprefix("lesson")))
)
def test_source_notebook_is_an_nbgrader_assignment_without_answers_in_test_cells(lesson):
    a = assignments.get(lesson)
    nb = nbformat.read(solution_path(lesson), as_version=4)
    cells = {grade_id(c): c for c in nb.cells if grade_id(c)}
    assert cells["setup"].source == a.setup_source
    graded = {
        gid: c.metadata.nbgrader["points"]
        for gid, c in cells.items()
        if c.metadata.nbgrader["grade"]
    }
    assert graded == POINTS[lesson] and set(graded) == set(a.cell_checks)
    for gid in graded:  # the test cells only ask the grader; the answer key lives in the grader
        assert "check_my_work" in cells[gid].source and "quiz_key" not in cells[gid].source.lower()
    text = "\n".join(c.source for c in nbformat.read(exercise_path(lesson), as_version=4).cells)
    assert "BEGIN SOLUTION" not in text
    for answer in assignments.manifest(lesson).released_without:
        assert answer not in text, answer
    if quiz.key_file(lesson).is_file():  # q1 is the instructions' example: `{"q1": "a", "q2": ...}`
        for q, right in list(quiz.load_key(lesson)[0].items())[1:]:
            assert f'"{q}": "{right}"' not in text, (q, right)
