"""Bad input and faults in a cohort's grading: each gets a clear message and loses no grade.

Not a notebook (garbage, empty, JSON that is not nbformat, no notebook in the folder, a huge
file), another lesson's notebook, a notebook stripped of lesson 1's cells, byte-identical
submissions, and a learner submitting while autograding runs, through nbgrader's exchange. Both
``python -m grader autograde`` and plain ``nbgrader autograde`` (formgrader's path) are driven in a
temporary course root with lesson 1, the quickest exercise to grade.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.frontends import screening

ROOT = Path(__file__).resolve().parents[1]
AID = "lesson1"
SOLUTION = ROOT / "solutions" / AID / f"{AID}.ipynb"
FULL = 12.0  # lesson 1's points


def _env(root: Path) -> dict:
    env = dict(os.environ, EFFKIT_COURSE_ROOT=str(root), EFFKIT_GRADER_TEST_SEED="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _run(root: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=_env(root), text=True, capture_output=True
    )
    assert not ok or done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _submit_file(root: Path, student: str, source: Path | bytes) -> Path:
    folder = root / "course" / "submitted" / student / AID
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    path = folder / f"{AID}.ipynb"
    if isinstance(source, bytes):
        path.write_bytes(source)
    else:
        shutil.copy(source, path)
    return path


def _without(grade_id: str) -> bytes:
    """Lesson 1's reference notebook with one graded cell deleted."""
    nb = json.loads(SOLUTION.read_text())
    nb["cells"] = [
        c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") != grade_id
    ]
    return json.dumps(nb).encode()


def _points(grade_id: str) -> float:
    nb = json.loads(SOLUTION.read_text())
    return sum(
        c["metadata"].get("nbgrader", {}).get("points", 0)
        for c in nb["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id
    )


def _stripped(path: Path) -> Path:
    """Lesson 1's notebook with every cell's nbgrader metadata gone (cells pasted elsewhere)."""
    nb = json.loads(SOLUTION.read_text())
    for cell in nb["cells"]:
        cell["metadata"].pop("nbgrader", None)
    path.write_text(json.dumps(nb))
    return path


def _scores(root: Path) -> dict[str, tuple[float, str]]:
    """student -> (auto score, submission timestamp) straight from the gradebook."""
    with sqlite3.connect(root / "course" / "gradebook.db") as db:
        rows = db.execute(
            "SELECT s.student_id, SUM(g.auto_score), s.timestamp FROM submitted_assignment s "
            "JOIN submitted_notebook n ON n.assignment_id = s.id "
            "JOIN grade g ON g.notebook_id = n.id GROUP BY s.id"
        ).fetchall()
    return {student: (score, ts) for student, score, ts in rows}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course where alice and bob handed in the same reference notebook, graded once."""
    root = tmp_path_factory.mktemp("faults")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    _run(root, "-m", "nbgrader", "generate_assignment", AID, "--force")
    for student in ("alice", "bob"):
        _submit_file(root, student, SOLUTION)
    out = _run(root, "-m", "grader", "autograde", AID).stdout
    return root, out


@pytest.fixture
def course(graded, tmp_path):
    root = tmp_path / "course_root"
    shutil.copytree(graded[0], root)
    return root


def test_screening_gives_one_reason_per_fault_and_keeps_a_notebook_missing_a_cell(tmp_path):
    known = screening.source_ids(ROOT)
    sub = tmp_path / "submitted"

    def put(student, data: bytes | None = None, name=f"{AID}.ipynb"):
        folder = sub / student / AID
        folder.mkdir(parents=True)
        if data is not None:
            (folder / name).write_bytes(data)
        return folder / name

    put("ok", SOLUTION.read_bytes())
    put("one_cell_gone", _without("test_quiz"))  # a deleted test cell: graded (0 for it)
    put("garbage", os.urandom(2000) + b"\xff")
    put("empty", b"")
    put("json", b'{"a": 1}')
    put("nofile", b"print(1)", name="lesson1.py")
    with put("huge", b"").open("wb") as fh:
        fh.truncate(screening.MAX_NOTEBOOK_BYTES + 1)  # sparse: no disk used
    put("lesson2", (ROOT / "solutions" / "lesson2" / "lesson2.ipynb").read_bytes())
    _stripped(put("stripped"))
    good, bad = screening.screen(sub, AID, AID, known[AID], known)
    assert good == ["ok", "one_cell_gone"]
    expect = {
        "garbage": "not a valid notebook file",
        "empty": "is empty",
        "json": "JSON but not a notebook",
        "nofile": "no lesson1.ipynb in the submission (found: lesson1.py)",
        "huge": "clear its outputs",
        "lesson2": "this looks like lesson2's notebook",
        "stripped": "none of lesson1's graded cells",
    }
    assert set(bad) == set(expect)
    for student, phrase in expect.items():
        assert phrase in bad[student] and "\n" not in bad[student], bad[student]
        assert "submit lesson1 again" in bad[student]
        assert str(tmp_path) not in bad[student]  # the file's name, not the instructor's path


def test_identical_submissions_are_grouped_but_not_the_untouched_release(tmp_path):
    sub = tmp_path / "submitted"
    release = ROOT / "exercises" / AID / f"{AID}.ipynb"
    for student, src in [("a", SOLUTION), ("b", SOLUTION), ("c", release), ("d", release)]:
        (sub / student / AID).mkdir(parents=True)
        shutil.copy(src, sub / student / AID / f"{AID}.ipynb")
    assert screening.identical_groups(sub, AID, AID, ["a", "b", "c", "d"], release) == [["a", "b"]]


@pytest.mark.system
@pytest.mark.slow
def test_bad_submissions_get_a_reason_each_others_are_graded_and_no_grade_is_lost(graded, course):
    _, first = graded
    assert (
        "note: alice, bob submitted byte-identical lesson1.ipynb files: possible copying" in first
    )
    before = _scores(course)
    assert before["alice"][0] == before["bob"][0] == FULL
    _submit_file(course, "alice", os.urandom(3000) + b"\xff")  # a newer, damaged submission
    _submit_file(course, "bob", _without("test_quiz"))  # a newer one, its quiz test cell deleted
    faults = {
        "carol": (ROOT / "solutions" / "lesson2" / "lesson2.ipynb", "looks like lesson2's"),
        "dave": (b"", "is empty"),
        "erin": (b'{"cells": 3}', "not a valid Jupyter notebook"),
        "hank": (None, "none of lesson1's graded cells"),
        "gina": (b"", "MiB (more than"),
    }
    for student, (src, _) in faults.items():
        path = _submit_file(course, student, src if src is not None else b"")
        if student == "hank":
            _stripped(path)
        if student == "gina":
            with path.open("wb") as fh:
                fh.truncate(100 * 2**20)  # sparse
    frank = course / "course" / "submitted" / "frank" / AID
    frank.mkdir(parents=True)
    (frank / "notes.txt").write_text("done!")
    out = _run(course, "-m", "grader", "autograde", AID).stdout
    lines = {
        s: [ln for ln in out.splitlines() if ln.startswith(f"[{s}] not graded")] for s in faults
    }
    assert "lesson1: 1 graded, 7 not gradable" in out, out[-3000:]
    for student, (_, phrase) in faults.items():
        assert len(lines[student]) == 1 and phrase in lines[student][0], out[-3000:]
    assert (
        "[alice] not graded, any earlier grade kept in the gradebook: lesson1.ipynb is not" in out
    )
    assert "[frank] not graded" in out and "found: notes.txt" in out
    after = _scores(course)
    assert after["alice"] == before["alice"]  # score and submission time untouched
    assert (course / "course" / "autograded" / "alice" / AID / f"{AID}.ipynb").is_file()
    # the others graded: the newest submission only (nbgrader alone kept the deleted cell's score)
    assert after["bob"][0] == FULL - _points("test_quiz") < FULL
    assert "graded cell 'test_quiz' is missing from the notebook: 0 points" in out
    assert not set(faults) & set(after)  # nothing recorded for a submission not graded
    assert "byte-identical" not in out


@pytest.mark.system
@pytest.mark.slow
def test_plain_nbgrader_autograde_refuses_them_too_and_keeps_the_grade(course):
    """Formgrader's path: nbgrader's own reading refuses a file that is not a notebook, and
    ScreenSubmission (first autograde preprocessor) another lesson's cells, before any score
    is saved."""
    assert _scores(course)["alice"][0] == _scores(course)["bob"][0] == FULL
    _submit_file(course, "alice", b"\x00garbage")
    _stripped(course / "course" / "submitted" / "bob" / AID / f"{AID}.ipynb")
    done = _run(course, "-m", "nbgrader", "autograde", AID, "--force", ok=False)
    log = done.stdout + done.stderr
    after = _scores(course)
    assert after["alice"][0] == after["bob"][0] == FULL, log[-3000:]
    assert done.returncode != 0
    assert "[effkit] bob/lesson1 not graded, earlier grades kept: none of lesson1's graded" in log
    assert "There was an error processing assignment 'lesson1' for student 'alice'" in log


@pytest.mark.system
@pytest.mark.slow
def test_a_submission_made_while_autograding_runs_is_kept_for_the_next_collect(course, tmp_path):
    """release -> fetch -> submit -> collect -> autograde; carl submits again mid-grading."""
    for other in ("alice", "bob"):  # only carl's submissions are graded here
        shutil.rmtree(course / "course" / "submitted" / other)
    home, cache = tmp_path / "carl", f"--Exchange.cache={tmp_path / 'cache'}"
    as_carl = [f"--Exchange.assignment_dir={home}", cache]
    _run(course, "-m", "nbgrader", "release_assignment", AID, "--force")
    _run(course, "-m", "nbgrader", "fetch_assignment", AID, *as_carl)
    shutil.copy(SOLUTION, home / AID / f"{AID}.ipynb")  # carl's work: the reference
    _run(course, "-m", "nbgrader", "submit", AID, "--student=carl", *as_carl)
    _run(course, "-m", "nbgrader", "collect", AID)
    submitted = course / "course" / "submitted" / "carl" / AID
    first = (submitted / "timestamp.txt").read_text()

    grading = subprocess.Popen(
        [sys.executable, "-m", "grader", "autograde", AID],
        cwd=ROOT,
        env=_env(course),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    log = []
    for line in grading.stdout:
        log.append(line)
        if "Grading carl/lesson1" in line:
            break
    # carl resubmits the untouched exercise while his first submission is being graded
    shutil.copy(course / "exercises" / AID / f"{AID}.ipynb", home / AID / f"{AID}.ipynb")
    time.sleep(1.1)  # nbgrader's timestamps: a later second
    _run(course, "-m", "nbgrader", "submit", AID, "--student=carl", *as_carl)
    overlapped = grading.poll() is None
    log.extend(grading.stdout)
    assert grading.wait() == 0, "".join(log)[-3000:]
    assert overlapped, "the second submission landed after grading ended"
    assert _scores(course)["carl"][0] == FULL  # the collected copy was graded, whole
    assert (submitted / "timestamp.txt").read_text() == first
    inbound = sorted((course / "course" / "exchange" / "effkit" / "inbound").glob("carl+lesson1+*"))
    assert len(inbound) == 2  # the new one waits in the exchange

    _run(course, "-m", "nbgrader", "collect", AID, "--update")
    second = (submitted / "timestamp.txt").read_text()
    assert second > first
    again = _run(course, "-m", "nbgrader", "collect", AID)  # the same folder collected twice
    assert "Submission already exists" in again.stdout + again.stderr
    assert (submitted / "timestamp.txt").read_text() == second
    _run(course, "-m", "grader", "autograde", AID)
    assert _scores(course)["carl"][0] == 0.0  # the newest (the untouched exercise) is graded
    assert len(list(inbound[0].parent.glob("carl+lesson1+*"))) == 2  # the first still on file
