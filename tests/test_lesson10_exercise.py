"""Lesson 10's exercise, graded out of the kernel: the learner's ``diagnose`` sees only plain profiles the
grader measured itself, of steps in which the grader planted bottlenecks.

The reference's full marks through the sandbox and the stub's 0 are the instructor cycle's
(tests/test_instructor_cycle.py). Here every submission is graded in this process on its cell data: the probe
the worker would run, then the parent's check on what it returns. One grading's cases (SEED) are profiled once
for the whole module, so the submissions are judged on the same profiles.
"""

import functools
import random
from pathlib import Path

import nbformat
import pytest
from exercise_cells import InProcess, grade_in_process, solution_cells  # noqa: E402  (tests/ is on sys.path)

from grader import assignments
from grader.assignments.lesson10 import checks
from grader.assignments.lesson10 import probes as lesson10_probes
from grader.cells import CellVerdict, CheckFailed, Context

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "lesson10" / "lesson10.ipynb"
EXERCISE = ROOT / "exercises" / "lesson10" / "lesson10.ipynb"
POINTS = {"test_diagnose": 5, "test_quiz": 2}
A = assignments.get("lesson10")
SEED = 1


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


@pytest.fixture(scope="module")
def profiled():
    """The grader's profiles of SEED's cases, measured once (profile_case is the costly part)."""
    cached = functools.lru_cache(maxsize=None)(checks.profile_case)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checks, "profile_case", lambda label, seed: dict(cached(label, seed)))
        yield


def _grade(diagnose_source: str | None = None) -> CellVerdict:
    cells = solution_cells(SOLUTION, SOLUTION, **({"diagnose": diagnose_source} if diagnose_source else {}))
    return grade_in_process(A, InProcess(A, lesson10_probes, cells), ["test_diagnose"], random.Random(SEED))["test_diagnose"]


def test_source_notebook_is_an_nbgrader_assignment_without_answers_in_test_cells():
    nb = nbformat.read(SOLUTION, as_version=4)
    cells = {_grade_id(c): c for c in nb.cells if _grade_id(c)}
    assert cells["setup"].source == A.setup_source
    graded = {gid: c.metadata.nbgrader["points"] for gid, c in cells.items() if c.metadata.nbgrader["grade"]}
    assert graded == POINTS and set(graded) == set(A.cell_checks)
    text = "\n".join(c.source for c in nbformat.read(EXERCISE, as_version=4).cells)
    assert "BEGIN SOLUTION" not in text and '"q4": "b"' not in text and "per_call_us" not in text


def test_every_label_is_drawn_and_the_case_name_never_reaches_the_learner(monkeypatch):
    cases = checks.draw_cases(random.Random(SEED))
    assert len(cases) == checks.CASES and set(label for label, _ in cases) == set(checks.LABELS)
    assert checks.draw_cases(random.Random(SEED + 1)) != cases  # the order and seeds are the grading's secret
    import effkit.doctor_plants as dp

    monkeypatch.setattr(dp, "profile_named", lambda name, seed: {"name": name, "step_ms": 1.0})
    assert checks.profile_case("data", 3) == {"step_ms": 1.0}


_REF = dict(solution_cells(SOLUTION, SOLUTION))["diagnose"]
_ALWAYS_DATA = 'def diagnose(profile):\n    return "data"\n'
# a learner who only knows lessons 1, 2 and 7: data wait, syncs and padding, else "none"
_THREE_RULES = '''
def diagnose(profile):
    step = profile["step_ms"]
    if profile["ranges_ms"]["data"] / step > 0.25:
        return "data"
    if profile["syncs_per_step"] > 1:
        return "sync"
    if (profile["padding_share"] or 0) > 0.3:
        return "padding"
    return "none"
'''
# "the biggest range is the bottleneck": milliseconds instead of the evidence each bottleneck leaves
_BIGGEST_RANGE = '''
def diagnose(profile):
    ranges = profile["ranges_ms"]
    biggest = max(ranges, key=ranges.get)
    return {"data": "data", "optimizer": "optimizer"}.get(biggest, "none")
'''
_LIST = 'def diagnose(profile):\n    return ["data"]\n'
_READS_NAME = 'def diagnose(profile):\n    return profile["name"].split(":")[1]\n'
_HUGE = 'def diagnose(profile):\n    return "data" * 10_000_000\n'

SUBMISSIONS = {
    "reference": (_REF, True, "8 of 8 planted bottlenecks named"),
    "always_data": (_ALWAYS_DATA, False, "you said 'data', the grader planted"),
    "three_rules": (_THREE_RULES, False, "the grader planted 'overhead'"),
    "biggest_range": (_BIGGEST_RANGE, False, "you said 'none', the grader planted 'sync'"),
    "a_list": (_LIST, False, "'returned list' is not one of"),
    "reads_the_case_name": (_READS_NAME, False, "'raised KeyError' is not one of"),
    "huge_string": (_HUGE, False, "is not one of"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", SUBMISSIONS)
def test_submissions_score_what_they_deserve(profiled, name):
    source, passes, words = SUBMISSIONS[name]
    assert name == "reference" or source != _REF, f"{name}: the mistake did not change the cell"
    v = _grade(source)
    text = v.reason if not v.passed else " ".join(v.lines)
    assert v.passed == passes and words in text, text
    assert len(text) < 3000  # a huge answer is not echoed back


def test_the_stub_is_named_as_a_stub():
    stub = "def diagnose(profile):\n    raise NotImplementedError()\n"
    ctx = Context(InProcess(A, lesson10_probes, solution_cells(SOLUTION, SOLUTION, diagnose=stub)), random.Random(SEED))
    ctx.session.call = lambda probe, timeout_s, **kw: InProcess.call(ctx.session, probe, timeout_s, profiles=[{}])
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        import unittest.mock as um

        with um.patch.object(checks, "profile_case", lambda label, seed: {}):
            A.cell_checks["test_diagnose"](ctx)


def test_untrusted_answers_are_refused_by_shape_and_never_trusted():
    truth = ["data", "none"]
    assert checks.grade_labels(truth, ["data", "none"]) == (2, [])
    for bad in (None, "data", ["data"], ["data", "none", "sync"], {"labels": truth}):
        with pytest.raises(CheckFailed):
            checks.grade_labels(truth, bad)
    right, wrong = checks.grade_labels(truth, [1, "x" * 10_000])
    assert right == 0 and "'int'" in wrong[0] and len(wrong[1]) < 200


def test_the_probe_hands_each_case_a_fresh_copy_and_returns_short_strings():
    class Evil(str):
        def __getitem__(self, key):
            raise RuntimeError("no")

    seen = []

    def diagnose(profile):
        seen.append(dict(profile))
        profile["step_ms"] = -1  # an edit must not reach the next case
        return Evil("data" * 100)

    worker = type("W", (), {"ns": {"diagnose": diagnose}})()
    data, blobs = lesson10_probes.probe_diagnose(worker, profiles=[{"step_ms": 1.0}, {"step_ms": 2.0}])
    assert [s["step_ms"] for s in seen] == [1.0, 2.0] and blobs == []
    assert data == {"labels": ["data" * 10, "data" * 10]} and type(data["labels"][0]) is str
