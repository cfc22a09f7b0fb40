"""The quiz key sealed on a cohort hub: the learner's own check cannot read it, and says nothing.

On a hub learners read ``grader/`` (their Validate runs the grader's checks as them), so the keys
left the checks modules for ``grader/assignments/<lesson>/quiz_key.json``, which ``cohort up``
closes to them (``tests/test_cohort_host.py``). Where the file cannot be read the quiz check names
the unanswered questions and otherwise fails as sealed, never passing (no points), and Validate
turns that into its usual "every question has an answer" line. A missing key file is the grader's
bug: it raises, it does not grade the quiz as zero. Where the key is readable (autograde, the
instructor) nothing changed.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import shutil
import types

import pytest

from grader.kit import in_notebook
from grader.scoring import quiz
from grader.scoring.checks import Context

LESSON = "lesson2"
KEY, WHY = quiz.load_key(LESSON)
QUESTIONS = tuple(KEY)
VALIDATE_SAYS = (
    "test_quiz: every question has an answer; whether they are right is said when your work is "
    "graded, not here"
)


class Answers:
    """The probe session as the quiz check sees it: the learner's QUIZ_ANSWERS, already read."""

    load_errors: list = []

    def __init__(self, answers: dict[str, str]):
        self.answers = answers

    def call(self, name: str, timeout: float):
        assert name == "quiz"
        return types.SimpleNamespace(ok=True, failure="", data={"answers": self.answers})


def grade(answers: dict[str, str]) -> dict:
    """The quiz cell's verdict as the report carries it to Validate."""
    ctx = Context(Answers(answers), random.Random(0))
    try:
        quiz.quiz_check(LESSON, QUESTIONS)(ctx)
    except AssertionError as err:
        return {"passed": False, "lines": ctx.lines, "reason": str(err)}
    return {"passed": True, "lines": ctx.lines, "reason": ""}


def validate(cell: dict, tmp_path, monkeypatch, capsys) -> str:
    """What Validate prints for the quiz cell (or the AssertionError it raises, as text)."""
    notebook = tmp_path / f"{LESSON}.ipynb"
    notebook.write_text("{}")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    monkeypatch.chdir(tmp_path)
    report = {"out_of_kernel": {"cells": {"test_quiz": cell}, "flags": []}}
    monkeypatch.setattr(in_notebook, "_check_report", lambda nb: report)
    try:
        in_notebook.check_my_work("test_quiz", notebook.name)
    except AssertionError as err:
        return f"AssertionError: {err}"
    return capsys.readouterr().out.strip()


def wrong_for(q: str) -> str:
    return next(o for o in "abc" if o != KEY[q])


ALL_RIGHT = dict(KEY)
ONE_WRONG = {**KEY, "q2": wrong_for("q2")}
ALL_WRONG = {q: wrong_for(q) for q in KEY}


@contextlib.contextmanager
def as_another_account():
    """The account of a learner on a hub: root drops its effective uid to nobody's for the block
    (file modes bind it then); any other account is one already."""
    if os.geteuid() != 0:
        yield
        return
    nobody, groups, gid = pwd.getpwnam("nobody"), os.getgroups(), os.getegid()
    os.setgroups([])  # root's group would otherwise decide by the files' group bits
    os.setegid(nobody.pw_gid)
    os.seteuid(nobody.pw_uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(gid)
        os.setgroups(groups)


@pytest.fixture
def passable(tmp_path):
    """tmp_path and the folders above it passable by every account (pytest's are 0700), so that
    only the modes set inside decide what another account reads."""
    above = {p: p.stat().st_mode & 0o7777 for p in [tmp_path, *tmp_path.parents]}
    for path, mode in above.items():
        path.chmod(mode | 0o005 if path == tmp_path else mode | 0o001)
    yield tmp_path
    for path, mode in above.items():
        path.chmod(mode)


@pytest.fixture
def sealed_file(passable, monkeypatch):
    """The lesson's real key file, copied and closed (mode 0, as ``cohort up`` leaves it to
    learners), and graded as another account: reading it is refused by the file system."""
    copy = passable / "assignments"
    (copy / LESSON).mkdir(parents=True)
    (copy / LESSON).chmod(0o755)
    copy.chmod(0o755)
    shutil.copy(quiz.key_file(LESSON), copy / LESSON / quiz.KEY_FILE)
    (copy / LESSON / quiz.KEY_FILE).chmod(0)
    monkeypatch.setattr(quiz, "ASSIGNMENTS_DIR", copy)
    with as_another_account():
        with pytest.raises(PermissionError):
            quiz.load_key(LESSON)


def sealed_by_loader(monkeypatch):
    def refused(lesson):
        raise PermissionError(13, "Permission denied", str(quiz.key_file(lesson)))

    monkeypatch.setattr(quiz, "load_key", refused)


@pytest.mark.parametrize("answers", [ALL_RIGHT, ONE_WRONG, ALL_WRONG], ids=["right", "one", "all"])
def test_a_sealed_key_never_passes_and_validate_says_only_that_all_are_answered(
    answers, tmp_path, monkeypatch, capsys, sealed_file
):
    with as_another_account():
        cell = grade(answers)
    assert not cell["passed"] and quiz.SEALED in cell["reason"], cell
    said = " ".join([cell["reason"], *cell["lines"]])
    assert "answers right" not in said and "—" not in said, said  # no verdict, no feedback
    assert validate(cell, tmp_path, monkeypatch, capsys) == VALIDATE_SAYS


def test_a_sealed_key_names_the_unanswered_questions(tmp_path, monkeypatch, capsys):
    sealed_by_loader(monkeypatch)
    answers = {**ONE_WRONG, "q3": " ", "q4": ""}
    answers.pop("q1")
    cell = grade(answers)
    assert not cell["passed"] and quiz.SEALED in cell["reason"], cell
    assert "q1: no answer" in cell["reason"] and "q2" not in cell["reason"], cell
    said = validate(cell, tmp_path, monkeypatch, capsys)
    assert said == "AssertionError: no answer yet to q1, q3, q4 (set them in QUIZ_ANSWERS)", said


def test_a_sealed_key_with_every_answer_right_still_earns_nothing(monkeypatch):
    sealed_by_loader(monkeypatch)
    cell = grade(ALL_RIGHT)
    assert not cell["passed"] and "graded at autograde" in cell["reason"], cell


def test_a_missing_key_file_is_the_graders_error_not_a_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(quiz, "ASSIGNMENTS_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="quiz_key.json is missing"):
        grade(ALL_RIGHT)


def test_a_malformed_key_file_is_the_graders_error(tmp_path, monkeypatch):
    monkeypatch.setattr(quiz, "ASSIGNMENTS_DIR", tmp_path)
    (tmp_path / LESSON).mkdir()
    (tmp_path / LESSON / quiz.KEY_FILE).write_text('{"key": {"q1": "a"}, "why": {"q9": {}}}')
    with pytest.raises(ValueError, match="malformed"):
        grade(ALL_RIGHT)
    (tmp_path / LESSON / quiz.KEY_FILE).write_text('{"key": {"q1": "a"}}')
    with pytest.raises(ValueError, match="quiz asks"):  # the key's questions are not the quiz's
        grade(ALL_RIGHT)


def test_a_readable_key_grades_as_before(tmp_path, monkeypatch, capsys):
    right = grade(ALL_RIGHT)
    assert right["passed"] and right["lines"] == [f"  ok  all {len(KEY)} answers right"], right
    wrong = grade(ONE_WRONG)
    chosen = ONE_WRONG["q2"]
    assert not wrong["passed"], wrong
    assert wrong["reason"] == (
        f"{len(KEY) - 1} of {len(KEY)} answers right. q2: ({chosen}) — {WHY['q2'][chosen]}"
    )
    assert validate(wrong, tmp_path, monkeypatch, capsys) == VALIDATE_SAYS  # no right or wrong
    blank = grade({**ALL_RIGHT, "q4": ""})
    assert blank["reason"].endswith("q4: no answer"), blank


def test_the_learners_own_check_still_versions_its_report_with_a_key_sealed(passable, monkeypatch):
    """Validate runs ``grader check --json`` as the learner, whose report carries the grader's
    version, a hash of grader/'s files: a key closed to them counts by name, it does not crash."""
    from grader.frontends import farm_ledger

    root = passable / "grader"
    (root / "assignments" / LESSON).mkdir(parents=True)
    (root / "__init__.py").write_text("")
    shutil.copy(quiz.key_file(LESSON), root / "assignments" / LESSON / quiz.KEY_FILE)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    monkeypatch.setattr(farm_ledger, "GRADER_ROOT", root)
    readable = farm_ledger.grader_version()
    (root / "assignments" / LESSON / quiz.KEY_FILE).chmod(0)
    with as_another_account():
        sealed = farm_ledger.grader_version()
    assert sealed != readable and farm_ledger.grader_version() == readable  # root's: the content
