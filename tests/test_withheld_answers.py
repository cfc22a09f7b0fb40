"""Exercises whose answer is an effkit function (issue 42): one line calling it earns nothing.

On 8a3ab40 ``def diagnose(profile): return effkit.doctor.diagnose(profile)[0].label`` earned lesson 10's
``test_diagnose``, and likewise effkit's ``kd_loss`` (lesson 9) and ``bucket_batches`` (lesson 7). Each
submission below is graded through the sandbox, as a grading does: in that lesson's worker the
function's body raises (``grader.sandbox.learner_view.WITHHELD``), so the cell fails and says why."""

import re

import pytest

from grader import assignments
from grader.frontends.notebook import read_notebook, solution_ids, solution_sources
from grader.sandbox.launch import is_root
from grader.sandbox.learner_view import REPO_ROOT
from grader.scoring.checks import grade_cells

CALLS_EFFKIT = {
    "lesson10": (
        "diagnose",
        "test_diagnose",
        """
def diagnose(profile):
    from effkit.doctor import diagnose as doctor
    found = doctor(profile)
    return found[0].label if found else "none"
""",
    ),
    "lesson9": (
        "distillation_loss",
        "test_loss_value",
        """
def distillation_loss(student_logits, teacher_logits, labels, temperature, alpha):
    from effkit.distill import kd_loss
    return kd_loss(student_logits, teacher_logits, labels, temperature, alpha)
""",
    ),
    "lesson7": (
        "bucket_batches",
        "test_coverage",
        """
def bucket_batches(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):
    from effkit import length_buckets
    return length_buckets.bucket_batches(lengths, batch_size=batch_size, max_tokens=max_tokens, seed=seed, epoch=epoch)
""",
    ),
    # issue 52: withheld by content, so a name built at run time reaches nothing either (the source
    # check reads names only), and the reference pipeline under another seed is no way round
    "lesson2": (
        "fast_pipeline",
        "test_contract",
        # through the setup cell's module: importlib is refused on the cells' text before the worker (own_plain_cells)
        """
_reference = getattr(cifar, "Device" + "Pipeline")


class FastPipeline:
    def __init__(self, dataset, batch_size, device, seed):
        self.inner = _reference(dataset, batch_size, device, seed + 1)

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        return iter(self.inner)
""",
    ),
    "lesson4": (
        "train_accumulated",
        "test_full_windows",
        """
def train_accumulated(model, optimizer, micro_batches, accum_steps):
    import importlib
    acc = getattr(importlib.import_module("effkit.accumulate"), "Grad" + "Accumulator")(
        model, optimizer, accum_steps
    )
    for window in acc.windows(micro_batches):
        count = sum(int((labels != IGNORE).sum()) for _, labels in window)
        for tokens, labels in window:
            loss = F.cross_entropy(
                model(tokens).flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="sum"
            )
            acc.backward(loss, count)
        acc.step()
""",
    ),
    "lesson5": (
        "plan_checkpointing",
        "test_budget",
        """
def plan_checkpointing(blocks, x, budget_bytes):
    import importlib
    planner = getattr(importlib.import_module("effkit.checkpoint_plan"), "plan_for" + "_budget")
    plan = planner(blocks, x, budget_bytes)
    return {"blocks": list(plan.blocks), "save": None}
""",
    ),
}


def _cells(lesson: str, **replace: str) -> list[tuple[str, str]]:
    nb = read_notebook(REPO_ROOT / "solutions" / lesson / f"{lesson}.ipynb")
    return [
        (c.grade_id, replace.get(c.grade_id, c.source))
        for c in solution_sources(nb, solution_ids(nb))
    ]


@pytest.mark.slow
@pytest.mark.skipif(
    not is_root(), reason="needs root: the worker's view of the repository is a mount namespace"
)
@pytest.mark.parametrize("lesson", sorted(CALLS_EFFKIT))
def test_a_submission_that_calls_effkits_answer_earns_nothing_and_says_why(lesson):
    """That the reference still passes where the answer is withheld (its worker's view is the same) is
    asserted by the instructor cycle's grading of every reference, in full, in CI's timed lane:
    tests/test_instructor_cycle.py::test_reference_gets_full_marks_and_untouched_version_nothing."""
    cell, check, source = CALLS_EFFKIT[lesson]
    a = assignments.get(lesson)
    verdicts, _ = grade_cells(a, _cells(lesson, **{cell: source}), only=[check], seed=7)
    assert not verdicts[check].passed, verdicts[check].lines
    # the cell's feedback names why (lesson 10 shows an exception's type only: the type says it)
    assert re.search(
        r"reference answer.*write your own|raised ReferenceAnswerWithheld", verdicts[check].reason
    ), verdicts


# Issue 52: effkit's answer withheld by name while its twin and helpers stayed whole. The bucketing by rows
# from ``effkit.workloads.bert.batching``, the cut by budget from ``split_by_budget``, eight lines of glue:
# 12/12 on 2da97a9 (deserved 2, the quiz).
THROUGH_THE_TWIN = """
def bucket_batches(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):
    import numpy as np
    from effkit.length_buckets import split_by_budget
    from effkit.workloads.bert import batching
    lengths, rng = np.asarray(lengths), np.random.default_rng([seed, epoch])
    if batch_size is not None:
        return [b.tolist() for b in batching.bucket_batches(lengths, batch_size, rng)]
    order, batches = rng.permutation(len(lengths)), []
    for s in range(0, len(order), 1600):
        part = order[s : s + 1600]
        batches += split_by_budget(part[np.argsort(lengths[part], kind="stable")], lengths, max_tokens, 8)
    rng.shuffle(batches)
    return [b.tolist() for b in batches]
"""


@pytest.mark.slow
@pytest.mark.skipif(
    not is_root(), reason="needs root: the worker's view of the repository is a mount namespace"
)
def test_lesson7_answered_through_effkits_twin_and_helpers_earns_only_the_quiz():
    a = assignments.get("lesson7")
    verdicts, _ = grade_cells(a, _cells("lesson7", bucket_batches=THROUGH_THE_TWIN), seed=7)
    earned = sorted(g for g, v in verdicts.items() if v.passed)
    assert earned == ["test_quiz"], {g: v.reason for g, v in verdicts.items()}
    assert "implements lesson7's reference answer" in verdicts["test_coverage"].reason, verdicts


# Lessons whose graded answer is a timed recipe, not a cell a probe calls: attacked where the
# recipe is graded.
ATTACKED_ELSEWHERE = {
    "lesson14": "test_lesson14_exercise.py::test_effkits_pipeline_loaded_again_from_its_file_earns_nothing",
}


def test_every_lesson_that_withholds_an_answer_is_attacked_here():
    """A lesson whose manifest withholds an effkit answer gets its one-line attack above (or, for a
    timed recipe, in its own test file, named in ``ATTACKED_ELSEWHERE``)."""
    assert sorted([*CALLS_EFFKIT, *ATTACKED_ELSEWHERE]) == sorted(assignments.withheld())
    for where in ATTACKED_ELSEWHERE.values():
        path, _, name = where.partition("::")
        assert f"def {name}(" in (REPO_ROOT / "tests" / path).read_text(), where
