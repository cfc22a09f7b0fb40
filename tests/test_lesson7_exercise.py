"""Lesson 7's exercise, graded out of the kernel: a length-bucketing batch sampler judged on length
distributions the grader draws, then timed by the grader on its own encoder and task.

The reference's sampler checks and quiz are graded once through the sandboxed worker; its speed
cell, its full marks and the stub's 0 are the instructor cycle's (tests/test_instructor_cycle.py).
Wrong submissions are graded in this process on their cell data: the probe functions the worker
would run, then the parent's checks on what they return (the sandboxed path is the reference's).
"""

import pytest
from exercise_cells import grade, grade_here, reference_cells  # noqa: E402

LESSON = "lesson7"
SAMPLER_CELLS = ["test_coverage", "test_budget", "test_padding", "test_randomness"]


@pytest.mark.slow
def test_reference_sampler_and_quiz_get_full_marks_in_the_sandbox():
    verdicts, _ = grade(LESSON, reference_cells(LESSON), only=[*SAMPLER_CELLS, "test_quiz"], seed=1)
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


def test_the_reference_sampler_passes_in_process():
    verdicts = grade_here(LESSON, reference_cells(LESSON), SAMPLER_CELLS, seed=3)
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


# -- plausible wrong samplers: each fails the cells it deserves to, with a message that teaches --------

_REF = dict(reference_cells(LESSON))["bucket_batches"]
_SORT_MEGA = '        mega = mega[np.argsort(lengths[mega], kind="stable")]\n'
_SHUFFLE = "    rng.shuffle(batches)\n"
_LAST = "            if i == len(mega) or (i + 1 - first) * width(mega[first:i + 1]) > max_tokens:"
_SLICE = (
    "            batches += [mega[i:i + batch_size] for i in range(0, len(mega), batch_size)]\n"
)

MISTAKES = {
    # one global sort, the same batches in the same order every epoch: optimal padding, no randomness
    "fully_sorted": (
        _REF.replace(
            "    order = rng.permutation(len(lengths))\n",
            '    order = np.argsort(lengths, kind="stable")\n',
        ).replace(_SHUFFLE, ""),
        {"test_randomness": "identical batches"},
    ),
    # one global sort, then only the batch order shuffled (quiz q4 (a)): the same rows share a batch
    # every epoch; the old check compared batch sequences only and passed it on every draw
    "sorted_once_order_shuffled": (
        _REF.replace(
            "    order = rng.permutation(len(lengths))\n",
            '    order = np.argsort(lengths, kind="stable")\n',
        ),
        {"test_randomness": "hold exactly the same rows"},
    ),
    # the reference drawing from numpy's global RNG: batches change, but a (seed, epoch) cannot be replayed
    "unseeded_global_rng": (
        _REF.replace(
            "    rng = np.random.default_rng([seed, epoch])\n",
            "    rng = np.random.mtrand._rand\n",
        ),
        {"test_randomness": "returned different batches"},
    ),
    # the budget read as a row count: batches of long rows blow the budget
    "ignores_the_budget": (
        _REF.replace("        if batch_size:\n", "        if True:\n").replace(
            "    typical = batch_size or",
            "    batch_size = batch_size or 32\n    typical = batch_size or",
        ),
        {"test_budget": "exceed the token budget"},
    ),
    # slices whole batches only: the remainder of each mega-batch never trains
    "drops_the_last_batch": (
        _REF.replace(
            _SLICE,
            "            batches += [mega[i:i + batch_size] for i in "
            "range(0, len(mega) - batch_size + 1, batch_size)]\n",
        ),
        {"test_coverage": "never appear in the epoch"},
    ),
    # sorted within mega-batches but the batch order never shuffled... after a global sort: a curriculum
    "sorted_unshuffled_order": (
        _REF.replace(_SHUFFLE, "    batches.sort(key=lambda b: lengths[b].mean())\n"),
        {"test_randomness": "batch order follows length"},
    ),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_wrong_samplers_fail_only_the_cells_they_deserve_with_a_hint(name):
    source, expected = MISTAKES[name]
    assert source != _REF, f"{name}: the mistake did not change the cell"
    verdicts = grade_here(
        LESSON, reference_cells(LESSON, bucket_batches=source), SAMPLER_CELLS, seed=5
    )
    failed = {g: v.reason for g, v in verdicts.items() if not v.passed}
    assert set(failed) == set(expected), failed
    for gid, words in expected.items():
        assert words in failed[gid], failed[gid]


def test_a_sampler_returning_something_else_is_refused_with_a_message():
    for body, words in (
        ("return None", "not a list of index lists"),
        ("return [[0.5]]", "not a list of index lists"),
        ("return [[10**9]]", "indices must be ints"),
        ("return [[]]", "non-empty lists"),
    ):
        source = f"def bucket_batches(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):\n    {body}\n"
        verdict = grade_here(
            LESSON, reference_cells(LESSON, bucket_batches=source), ["test_coverage"]
        )["test_coverage"]
        assert not verdict.passed and words in verdict.reason, (body, verdict.reason)


# -- the measured part: the grader trains its own encoder with the learner's batches ------------------


@pytest.mark.slow
def test_speed_passes_for_the_reference_and_refuses_a_sampler_that_drops_rows():
    ok = grade_here(LESSON, reference_cells(LESSON), ["test_speed"], seed=7)["test_speed"]
    assert ok.passed and "samples per second" in " ".join(ok.lines), ok.reason
    source, _ = MISTAKES["drops_the_last_batch"]
    bad = grade_here(
        LESSON, reference_cells(LESSON, bucket_batches=source), ["test_speed"], seed=7
    )["test_speed"]
    assert not bad.passed and "not timed" in bad.reason, bad.reason
