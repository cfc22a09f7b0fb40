"""Lesson 8's exercise, graded out of the kernel: a LoRA layer and its injection against peft's own
numbers, a recipe the grader fine-tunes itself (memory measured, accuracy against its own full
fine-tuning).

The reference's layer, injection and quiz are graded once through the sandboxed worker (~10 s);
its recipe, its full marks and the stub's 0 are the instructor cycle's (tests/test_instructor_cycle.py).
Wrong submissions are graded in this process on their cell data: the probe functions the worker
would run, then the parent's checks on what they return (the sandboxed path is the reference's).
The recipe mistakes cost one full fine-tuning of the grader's task (~20 s, cached) and one LoRA run.
"""

import functools

import pytest
from exercise_cells import grade, grade_here, reference_cells  # noqa: E402

from grader.assignments.lesson8 import checks
from grader.scoring.checks import CheckFailed

LESSON = "lesson8"
# each check drawing from a fresh random.Random(seed), in this process
_grade_in_process = functools.partial(grade_here, LESSON, fresh=True)


# -- fast: structure -----------------------------------------------------------------------------


def test_the_reference_layer_passes_in_process_and_peft_agrees_with_itself():
    """The in-process path gives the reference's verdicts (so the mistakes below are judged the same way)."""
    verdicts = _grade_in_process(reference_cells(LESSON), ["test_layer", "test_inject"], seed=3)
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


# -- the sandboxed path: the reference's layer, injection and quiz -------------------------------


@pytest.mark.slow
def test_reference_layer_injection_and_quiz_get_full_marks_in_the_sandbox():
    verdicts, _ = grade(
        LESSON, reference_cells(LESSON), only=["test_layer", "test_inject", "test_quiz"], seed=1
    )
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


# -- plausible mistakes in code -------------------------------------------------------------------

_LAYER = reference_cells(LESSON)
_LAYER_SRC = dict(_LAYER)["lora_linear"]
_INJECT_SRC = dict(_LAYER)["inject_lora"]

CODE_MISTAKES = {
    # scale by alpha, not alpha / r: the update's size then grows with the rank
    "alpha_not_over_r": (
        {
            "lora_linear": _LAYER_SRC.replace(
                "self.scaling = base, r, alpha / r", "self.scaling = base, r, alpha"
            )
        },
        {"test_layer": False, "test_inject": True},
        "scale the adapter's output by alpha / r",
    ),
    # the adapters' own base frozen, the rest of the model (embeddings, LayerNorms, other layers) not
    "model_not_frozen": (
        {"inject_lora": _INJECT_SRC.replace("    model.requires_grad_(False)\n", "")},
        {"test_layer": True, "test_inject": False},
        "freeze the whole model first",
    ),
    # the layer leaves its base trainable: the whole point of LoRA lost
    "base_not_frozen": (
        {"lora_linear": _LAYER_SRC.replace("        base.requires_grad_(False)\n", "")},
        {"test_layer": False},
        "freeze them",
    ),
    # both matrices random: the adapted model no longer starts as the pretrained one
    "b_not_zero": (
        {
            "lora_linear": _LAYER_SRC.replace(
                "torch.zeros(base.out_features, r)", "torch.randn(base.out_features, r)"
            )
        },
        {"test_layer": False, "test_inject": False},
        "initialise lora_B to zeros",
    ),
    # merged weight without the scale
    "merge_unscaled": (
        {
            "lora_linear": _LAYER_SRC.replace(
                "self.base.weight + self.scaling * self.lora_B", "self.base.weight + self.lora_B"
            )
        },
        {"test_layer": False, "test_inject": True},
        "merge_and_unload",
    ),
}


@pytest.mark.parametrize("name", CODE_MISTAKES)
def test_code_mistakes_fail_the_cells_they_break_with_a_hint(name):
    replace, expected, hint = CODE_MISTAKES[name]
    for gid, src in replace.items():
        assert src != dict(_LAYER)[gid], f"{name}: the mistake did not change the cell"
    verdicts = _grade_in_process(reference_cells(LESSON, **replace), list(expected), seed=5)
    assert {g: v.passed for g, v in verdicts.items()} == expected, {
        g: v.reason for g, v in verdicts.items()
    }
    failed = " ".join(v.reason for v in verdicts.values() if not v.passed)
    assert hint in failed, failed


# -- plausible mistakes in the recipe (the grader trains them itself) ------------------------------

RECIPE_MISTAKES = {
    # full fine-tuning's LR for the adapters: they barely move in 80 steps
    "full_finetuning_lr": (
        '{"target_modules": ["query", "value"], "r": 8, "lora_alpha": 16, "lr": 5e-5}',
        "is a full fine-tuning LR",
    ),
    # training the word embeddings whole "to help": their gradients and AdamW state blow the budget
    "embeddings_trained": (
        '{"target_modules": ["query", "value"], "r": 8, "lora_alpha": 16, "lr": 1e-3, '
        '"modules_to_save": ["word_embeddings"]}',
        "over the 5% budget",
    ),
    # not data: refused before anything trains
    "not_json": ("object()", "must return a dict of plain values"),
    "unknown_target": (
        '{"target_modules": ["q_proj"], "r": 8, "lora_alpha": 16, "lr": 1e-3}',
        "peft refused",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPE_MISTAKES)
def test_recipe_mistakes_earn_nothing_with_a_hint(name):
    answer, hint = RECIPE_MISTAKES[name]
    source = f"def lora_recipe():\n    import json\n    return {answer}\n"
    verdict = _grade_in_process(
        reference_cells(LESSON, lora_recipe=source), ["test_recipe"], seed=7
    )["test_recipe"]
    assert not verdict.passed and hint in verdict.reason, verdict.reason


def test_validation_refuses_bools_nan_and_bad_names():
    good = {"target_modules": ["query"], "r": 8, "lora_alpha": 16, "lr": 1e-3}
    assert checks.validate(good)["r"] == 8
    for bad in (
        {**good, "r": True},
        {**good, "lr": 0.5},
        {**good, "lr": float("nan")},
        {**good, "target_modules": ["a b"]},
        {**good, "extra": 1},
        {**good, "target_modules": []},
        {"not_json": "Tensor"},
    ):
        with pytest.raises(CheckFailed):
            checks.validate(bad)
