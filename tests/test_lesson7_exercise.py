"""Lesson 7's exercise, graded out of the kernel: a length-bucketing batch sampler judged on length
distributions the grader draws, then timed by the grader on its own encoder and task.

The reference's sampler checks and quiz are graded once through the sandboxed worker; its speed
cell, its full marks and the stub's 0 are the instructor cycle's (tests/test_instructor_cycle.py).
Wrong submissions are graded in this process on their cell data: the probe functions the worker
would run, then the parent's checks on what they return (the sandboxed path is the reference's).
"""

import random
from pathlib import Path

import nbformat
import pytest
from exercise_cells import InProcess, grade_id, grade_in_process, solution_cells  # noqa: E402  (tests/ is on sys.path)

from grader import assignments
from grader.assignments.lesson7 import probes as lesson7_probes
from grader.scoring.checks import CellVerdict, grade_cells

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "lesson7" / "lesson7.ipynb"
EXERCISE = ROOT / "exercises" / "lesson7" / "lesson7.ipynb"
POINTS = {"test_coverage": 2, "test_budget": 2, "test_padding": 2, "test_randomness": 2, "test_speed": 2,
          "test_quiz": 2}
SAMPLER_CELLS = ["test_coverage", "test_budget", "test_padding", "test_randomness"]
A = assignments.get("lesson7")


def _reference_cells(**replace: str) -> list[tuple[str, str]]:
    return solution_cells(SOLUTION, SOLUTION, **replace)


def _grade_in_process(cells, only: list[str], seed: int = 1) -> dict[str, CellVerdict]:
    """``only``'s checks on ``cells``, all drawing from one ``random.Random(seed)`` in order."""
    session = InProcess(A, lesson7_probes, cells, strict=True)
    return grade_in_process(A, session, only, random.Random(seed))


def test_source_notebook_is_an_nbgrader_assignment_without_answers_in_test_cells():
    nb = nbformat.read(SOLUTION, as_version=4)
    cells = {grade_id(c): c for c in nb.cells if grade_id(c)}
    assert cells["setup"].source == A.setup_source
    graded = {gid: c.metadata.nbgrader["points"] for gid, c in cells.items() if c.metadata.nbgrader["grade"]}
    assert graded == POINTS and set(graded) == set(A.cell_checks)
    for gid in graded:
        assert "check_my_work" in cells[gid].source and "QUIZ_KEY" not in cells[gid].source
    text = "\n".join(c.source for c in nbformat.read(EXERCISE, as_version=4).cells)
    assert "BEGIN SOLUTION" not in text and '"q2": "c"' not in text and "argsort" not in text


@pytest.mark.slow
def test_reference_sampler_and_quiz_get_full_marks_in_the_sandbox():
    verdicts, _ = grade_cells(A, _reference_cells(), only=[*SAMPLER_CELLS, "test_quiz"], seed=1)
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


def test_the_reference_sampler_passes_in_process():
    verdicts = _grade_in_process(_reference_cells(), SAMPLER_CELLS, seed=3)
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


# -- plausible wrong samplers: each fails the cells it deserves to, with a message that teaches --------

_REF = dict(_reference_cells())["bucket_batches"]
_SORT_MEGA = '        mega = mega[np.argsort(lengths[mega], kind="stable")]\n'
_SHUFFLE = "    rng.shuffle(batches)\n"
_LAST = "            if i == len(mega) or (i + 1 - first) * width(mega[first:i + 1]) > max_tokens:"
_SLICE = "            batches += [mega[i:i + batch_size] for i in range(0, len(mega), batch_size)]\n"

MISTAKES = {
    # one global sort, the same batches in the same order every epoch: optimal padding, no randomness
    "fully_sorted": (_REF.replace("    order = rng.permutation(len(lengths))\n",
                                  "    order = np.argsort(lengths, kind=\"stable\")\n").replace(_SHUFFLE, ""),
                     {"test_randomness": "identical batches"}),
    # the budget read as a row count: batches of long rows blow the budget
    "ignores_the_budget": (_REF.replace("        if batch_size:\n", "        if True:\n")
                               .replace("    typical = batch_size or", "    batch_size = batch_size or 32\n"
                                                                      "    typical = batch_size or"),
                           {"test_budget": "exceed the token budget"}),
    # slices whole batches only: the remainder of each mega-batch never trains
    "drops_the_last_batch": (_REF.replace(_SLICE, "            batches += [mega[i:i + batch_size] for i in "
                                                  "range(0, len(mega) - batch_size + 1, batch_size)]\n"),
                             {"test_coverage": "never appear in the epoch"}),
    # sorted within mega-batches but the batch order never shuffled... after a global sort: a curriculum
    "sorted_unshuffled_order": (_REF.replace(_SHUFFLE, "    batches.sort(key=lambda b: lengths[b].mean())\n"),
                                {"test_randomness": "batch order follows length"}),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_wrong_samplers_fail_only_the_cells_they_deserve_with_a_hint(name):
    source, expected = MISTAKES[name]
    assert source != _REF, f"{name}: the mistake did not change the cell"
    verdicts = _grade_in_process(_reference_cells(bucket_batches=source), SAMPLER_CELLS, seed=5)
    failed = {g: v.reason for g, v in verdicts.items() if not v.passed}
    assert set(failed) == set(expected), failed
    for gid, words in expected.items():
        assert words in failed[gid], failed[gid]


def test_a_sampler_returning_something_else_is_refused_with_a_message():
    for body, words in (("return None", "not a list of index lists"), ("return [[0.5]]", "not a list of index lists"),
                        ("return [[10**9]]", "indices must be ints"), ("return [[]]", "non-empty lists")):
        source = f"def bucket_batches(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):\n    {body}\n"
        verdict = _grade_in_process(_reference_cells(bucket_batches=source), ["test_coverage"])["test_coverage"]
        assert not verdict.passed and words in verdict.reason, (body, verdict.reason)


# -- the measured part: the grader trains its own encoder with the learner's batches ------------------

@pytest.mark.slow
def test_speed_passes_for_the_reference_and_refuses_a_sampler_that_drops_rows():
    ok = _grade_in_process(_reference_cells(), ["test_speed"], seed=7)["test_speed"]
    assert ok.passed and "samples per second" in " ".join(ok.lines), ok.reason
    source, _ = MISTAKES["drops_the_last_batch"]
    bad = _grade_in_process(_reference_cells(bucket_batches=source), ["test_speed"], seed=7)["test_speed"]
    assert not bad.passed and "not timed" in bad.reason, bad.reason
