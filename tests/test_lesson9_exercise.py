"""Lesson 9's exercise, graded out of the kernel: the distillation loss against the grader's reference on its
own logits, a recipe the grader trains itself (its own teacher and student).

The reference's loss and quiz are graded once through the sandboxed worker; its recipe, its full marks and
the stub's 0 are the instructor cycle's (tests/test_instructor_cycle.py). Wrong submissions are graded in
this process on their cell data: the probe functions the worker would run, then the parent's checks on
what they return (the sandboxed path is the reference's).
"""

import functools

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

RECIPES = {
    # the reference recipe: passes on the grader's own runs
    "reference": (
        '{"temperature": 4.0, "alpha": 0.9, "student_layers": 2, "student_init": "teacher"}',
        True,
        "pp over",
    ),
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


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPES)
def test_recipes_are_scored_on_the_graders_own_runs(name):
    answer, passes, words = RECIPES[name]
    source = f"def distillation_recipe():\n    return {answer}\n"
    verdict = _grade_in_process(
        reference_cells(LESSON, distillation_recipe=source), ["test_recipe"], seed=7
    )["test_recipe"]
    text = verdict.reason if not verdict.passed else " ".join(verdict.lines)
    assert verdict.passed == passes and words in text, text


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
