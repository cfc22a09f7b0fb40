"""What every exercise's notebooks must be, one test parametrised over the assignments (it replaces
the copy each lesson's exercise test had): the instructor's source notebook is an nbgrader assignment
whose setup cell is the grader's, whose graded cells are the grader's cell checks with their points,
and whose test cells only ask the grader; the released notebook carries none of the answers."""

import nbformat
import pytest
from exercise_cells import POINTS, exercise_path, grade_id, solution_path  # noqa: E402  (tests/ is on sys.path)

from grader import assignments

# text of the reference answers (the quiz key's choice among them) that the released notebook must not hold
ANSWERS = {
    "lesson1": ['"q3": "b"'],
    "lesson4": ['"q2": "a"', "real_tokens"],
    "lesson5": ['"q3": "c"', "MUST_SAVE"],
    "lesson6": ["os.fsync", '"q2": "c"'],
    "lesson7": ['"q2": "c"', "argsort"],
    "lesson8": ['"q3": "c"', "kaiming_uniform_"],
    "lesson9": ['"q2": "c"', 'batchmean", log_target'],
    "lesson10": ['"q4": "a"', "per_call_us"],
    "lesson11": ['"q2": "b"', "ddp.no_sync()", "fully_shard(layer)"],
    "lesson12": ['"q2": "c"', "self.study.tell(t, score)"],
    "lesson13": ['"q2": "b"', "nodes_to_exclude=[head"],
}


def test_every_exercise_with_points_names_its_answers():
    assert set(ANSWERS) == set(POINTS)


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
        assert "check_my_work" in cells[gid].source and "QUIZ_KEY" not in cells[gid].source
    text = "\n".join(c.source for c in nbformat.read(exercise_path(lesson), as_version=4).cells)
    assert "BEGIN SOLUTION" not in text
    for answer in ANSWERS[lesson]:
        assert answer not in text, answer
