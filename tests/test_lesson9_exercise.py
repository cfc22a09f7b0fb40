"""Lesson 9's exercise, graded out of the kernel: the distillation loss against the grader's reference on its
own logits, a recipe the grader trains itself (its own teacher and student).

The reference's loss and quiz are graded once through the sandboxed worker; its recipe, its full marks and
the stub's 0 are the instructor cycle's (tests/test_instructor_cycle.py). Wrong submissions are graded in
this process on their cell data: the probe functions the worker would run, then the parent's checks on
what they return (the sandboxed path is the reference's). The recipe's constraints are drawn per
grading: the lesson's own recipe fails the draws with a black-box teacher (before anything trains),
and the reference passes them.
"""

import functools
import json

import pytest
from exercise_cells import grade, grade_here, reference_cells  # noqa: E402

from grader.assignments.lesson9 import recipe_checks
from grader.scoring.checks import CheckFailed

LESSON = "lesson9"
# each check drawing from a fresh random.Random(seed), in this process
_grade_in_process = functools.partial(grade_here, LESSON, fresh=True)


@pytest.mark.slow
def test_reference_loss_and_quiz_get_full_marks_in_the_sandbox():
    verdicts, _ = grade(
        LESSON,
        reference_cells(LESSON),
        only=["test_loss_value", "test_loss_gradient", "test_quiz"],
        seed=1,
    )
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


# -- plausible mistakes in the loss ---------------------------------------------------------------

_LOSS = dict(reference_cells(LESSON))["distillation_loss"]
_RIGHT_RETURN = "return alpha * temperature**2 * soft + (1 - alpha) * hard"
_RIGHT_KL = 'F.kl_div(student_log_probs, teacher_log_probs, reduction="batchmean", log_target=True)'

LOSS_MISTAKES = {
    # the T^2 factor forgotten: the soft term fades as T grows
    "no_t_squared": (
        _LOSS.replace(_RIGHT_RETURN, "return alpha * soft + (1 - alpha) * hard"),
        "T^2 factor",
    ),
    # KL(student || teacher): F.kl_div's arguments swapped
    "reversed_kl": (
        _LOSS.replace(
            _RIGHT_KL,
            'F.kl_div(teacher_log_probs, student_log_probs, reduction="batchmean", '
            "log_target=True)",
        ),
        "arguments are reversed",
    ),
    # probabilities where F.kl_div wants log-probabilities
    "softmax_not_log_softmax": (
        _LOSS.replace(
            _RIGHT_KL,
            "F.kl_div(F.softmax(student_logits / temperature, dim=-1), "
            "F.softmax(teacher_logits / temperature, dim=-1), "
            'reduction="batchmean")',
        ),
        "log-probabilities",
    ),
    # averaged over classes too
    "mean_over_classes": (_LOSS.replace('reduction="batchmean"', 'reduction="mean"'), "batchmean"),
}


def test_the_reference_loss_passes_in_process():
    verdicts = _grade_in_process(
        reference_cells(LESSON), ["test_loss_value", "test_loss_gradient"], seed=3
    )
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


@pytest.mark.parametrize("name", LOSS_MISTAKES)
def test_loss_mistakes_fail_value_and_gradient_with_the_hint_that_names_them(name):
    source, hint = LOSS_MISTAKES[name]
    assert source != _LOSS, f"{name}: the mistake did not change the cell"
    verdicts = _grade_in_process(
        reference_cells(LESSON, distillation_loss=source),
        ["test_loss_value", "test_loss_gradient"],
        seed=5,
    )
    for v in verdicts.values():
        assert not v.passed and hint in v.reason, v.reason


def test_a_loss_without_a_gradient_is_refused():
    source = _LOSS.replace(_RIGHT_RETURN, f"return torch.tensor(float({_RIGHT_RETURN[7:]}))")
    verdict = _grade_in_process(
        reference_cells(LESSON, distillation_loss=source), ["test_loss_gradient"]
    )["test_loss_gradient"]
    assert not verdict.passed and "no gradient" in verdict.reason, verdict.reason


# -- recipes: the grader trains them itself --------------------------------------------------------

# A grading's draws (``fresh``: random.Random(seed), the constraints first): seed 2 has an open
# teacher (its layers may be copied), so a mistake there is judged on its own (its three tasks let
# a teacher-deep student pass the margin, so the speed check is the one that fails it: on draw 0
# it misses the margin first); seeds 1 and 3 a black box (its logits only).
OPEN_DRAW, BLACK_BOX_DRAW, OTHER_BLACK_BOX_DRAW = 2, 1, 3
# the lesson notebook's recipe (notebooks/09_distillation.py: T 4, alpha 0.9, every other teacher layer)
LESSONS_CONSTANTS = (
    '{"temperature": 4.0, "alpha": 0.9, "student_layers": 2, "student_init": "teacher"}'
)

RECIPES = {
    # the lesson's recipe where the draw allows it: passes on the grader's own runs
    "lessons_constants_on_an_open_draw": (LESSONS_CONSTANTS, True, "pp over"),
    # labels alone: no distillation, no margin
    "labels_alone": (
        '{"temperature": 4.0, "alpha": 0.0, "student_layers": 2, "student_init": "teacher"}',
        False,
        "alpha 0 is training on labels alone",
    ),
    # a student as deep as the teacher: distils fine, saves nothing at inference
    "as_deep_as_the_teacher": (
        '{"temperature": 4.0, "alpha": 0.9, "student_layers": 4, "student_init": "teacher"}',
        False,
        "not measurably faster",
    ),
    # not data: refused before anything trains
    "not_json": ("object()", False, "must return a dict of plain values"),
}


def _fixed_recipe(answer: str) -> str:
    return f"def distillation_recipe(constraints):\n    return {answer}\n"


def _grade_recipe(cells, seed: int):
    verdict = _grade_in_process(cells, ["test_recipe"], seed=seed)["test_recipe"]
    return verdict, verdict.reason if not verdict.passed else " ".join(verdict.lines)


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPES)
def test_recipes_are_scored_on_the_graders_own_runs(name):
    answer, passes, words = RECIPES[name]
    cells = reference_cells(LESSON, distillation_recipe=_fixed_recipe(answer))
    verdict, text = _grade_recipe(cells, OPEN_DRAW)
    assert verdict.passed == passes and words in text, text


# -- the constraints are drawn per grading: the lesson's constants fail some draws, reasoning passes


def test_the_lessons_constants_fail_a_black_box_teacher():
    """Refused before anything trains: the teacher's layers cannot be copied from its logits."""
    cells = reference_cells(LESSON, distillation_recipe=_fixed_recipe(LESSONS_CONSTANTS))
    verdict, text = _grade_recipe(cells, BLACK_BOX_DRAW)
    assert not verdict.passed and "this grading's teacher is a black box" in text, text
    assert "Start from 'scratch'" in text, text


def test_the_reference_meets_every_drawn_constraint_and_the_lessons_constants_do_not():
    """Over 2,000 draws: the reference copies the teacher's layers only when it may; the lesson's
    recipe is refused on about half the draws (the black boxes)."""
    import random

    ns: dict = {}
    exec(dict(reference_cells(LESSON))["distillation_recipe"], ns)
    lesson, allowed, choices = json.loads(LESSONS_CONSTANTS), 0, set()
    for g in range(2000):
        constraints = recipe_checks.draw_constraints(random.Random(g))
        _, _, layers, init = recipe_checks.validate(ns["distillation_recipe"](constraints))
        recipe_checks.check_fits(init, constraints)
        choices.add((layers, init))
        try:
            recipe_checks.check_fits(lesson["student_init"], constraints)
            allowed += 1
        except CheckFailed:
            pass
    assert choices == {(2, "teacher"), (2, "scratch")}, choices
    assert 0.45 < allowed / 2000 < 0.55, allowed


@pytest.mark.slow
@pytest.mark.parametrize("seed", [BLACK_BOX_DRAW, OTHER_BLACK_BOX_DRAW])
def test_the_reference_passes_draws_the_lessons_constants_fail(seed):
    """A black-box teacher: the reference's student (2 layers) starts from scratch, on three tasks."""
    verdict, text = _grade_recipe(reference_cells(LESSON), seed)
    assert verdict.passed and "pp over labels alone" in text, text


def test_validation_refuses_bools_nan_and_unknown_inits():
    good = {"temperature": 4.0, "alpha": 0.9, "student_layers": 2, "student_init": "teacher"}
    assert recipe_checks.validate(good) == (4.0, 0.9, 2, "teacher")
    for bad in (
        {**good, "student_layers": True},
        {**good, "alpha": 1.5},
        {**good, "temperature": float("nan")},
        {**good, "student_init": "pretrained"},
        {**good, "student_layers": 5},
        {**good, "extra": 1},
        {"not_json": "Tensor"},
    ):
        with pytest.raises(CheckFailed):
            recipe_checks.validate(bad)


def test_a_scratch_student_trains_even_when_the_teacher_is_first_built_under_no_grad():
    import torch

    from grader.assignments.lesson9 import kd_task

    with (
        torch.no_grad()
    ):  # teacher and student train on first use: neither may inherit the caller's no_grad
        run = kd_task.train_student(987, 4.0, 0.9, 1, "scratch")
    assert 0.0 <= run["acc"] <= 1.0 and run["seconds"] > 0


# -- the inference check on a busy machine: inconclusive is measured again, never a failure ----------


def test_a_hint_is_given_only_when_its_premise_is_true():
    """The demo's reference (2 of 4 layers), timed on a busy host, was told "a student as deep as the
    teacher saves nothing": false of it. Only a teacher-deep student hears that."""
    deep = recipe_checks._why_not_faster(recipe_checks.kt.TEACHER_LAYERS)
    assert "as deep as the teacher" in deep
    assert "as deep as the teacher" not in recipe_checks._why_not_faster(2)


@pytest.mark.slow
def test_an_inconclusive_speed_measurement_does_not_fail_a_correct_recipe(monkeypatch):
    """A machine too busy to settle the inference A/B after every round (settle: "inconclusive") gives
    the reference its points and says so; only a settled "not faster" fails."""
    from effkit.abtest import ab_result

    blurred = ab_result([1.0] * 32, [0.5, 2.0] * 16, 0.99, seconds=1.0)
    monkeypatch.setattr(
        recipe_checks.kt, "inference_ab", lambda seed, net: (blurred, "inconclusive")
    )
    verdict, text = _grade_recipe(reference_cells(LESSON), OPEN_DRAW)
    assert verdict.passed and "too busy to settle it" in text, text
    monkeypatch.setattr(recipe_checks.kt, "inference_ab", lambda seed, net: (blurred, "not faster"))
    verdict, text = _grade_recipe(reference_cells(LESSON), OPEN_DRAW)
    assert not verdict.passed and "as deep as the teacher" not in text, text
