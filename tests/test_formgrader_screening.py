"""Formgrader's path (plain ``nbgrader autograde``): a bad submission gets the one-line reason
``python -m grader autograde`` gives, in the log formgrader shows and in the learner's feedback.

Before: another lesson's notebook failed with nbgrader's raw ``ValidationError: nbgrader cell does
not have a grade_id``, a text file renamed ``.ipynb`` with a ``JSONDecodeError`` traceback; the
learner got no feedback, and the empty gradebook record nbgrader had made counted as 0 in
formgrader's averages. Driven through nbgrader's exchange, as two learners would: release, fetch,
submit, collect, autograde, generate and release feedback, fetch feedback.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ~11 nbgrader commands: ~4 min on 2 loaded cores
ROOT = Path(__file__).resolve().parents[1]
AID = "lesson1"


def _run(root: Path, *args: str, ok: bool = True) -> str:
    env = dict(os.environ, EFFKIT_COURSE_ROOT=str(root))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=ROOT, env=env, text=True, capture_output=True
    )
    log = done.stdout + done.stderr
    assert not ok or done.returncode == 0, f"{args}:\n{log[-3000:]}"
    return log


@pytest.fixture
def course(tmp_path):
    root = tmp_path / "course_root"
    shutil.copytree(ROOT / "solutions", root / "solutions")
    _run(root, "generate_assignment", AID, "--force")
    _run(root, "release_assignment", AID, "--force")
    return root


def _as(learner: str, tmp_path: Path) -> list[str]:
    home = tmp_path / learner
    return [f"--Exchange.assignment_dir={home}", f"--Exchange.cache={home / '.cache'}"]


def test_bad_submissions_get_one_line_reasons_in_formgraders_log_and_the_feedback(course, tmp_path):
    bad = {
        "carol": ((ROOT / "solutions/lesson2/lesson2.ipynb").read_bytes(), "looks like lesson2's"),
        "erin": (b"my answers: 42\n", "not a valid notebook file"),
    }
    for learner, (content, _) in bad.items():
        _run(course, "fetch_assignment", AID, *_as(learner, tmp_path))
        (tmp_path / learner / AID / f"{AID}.ipynb").write_bytes(content)
        _run(course, "submit", AID, f"--student={learner}", *_as(learner, tmp_path))
    _run(course, "collect", AID)
    log = _run(course, "autograde", AID, "--force", ok=False)  # what formgrader's button runs
    for learner, (_, phrase) in bad.items():
        said = [ln for ln in log.splitlines() if f"[effkit] {learner}/{AID} not graded" in ln]
        assert len(said) == 1 and phrase in said[0], log[-4000:]
    # nbgrader's own failures (the JSON decoder's traceback, its sanitize step's ValidationError)
    assert "json/decoder.py" not in log and "does not have a grade_id" not in log, log[-4000:]
    with sqlite3.connect(course / "course" / "gradebook.db") as db:
        records = db.execute("SELECT COUNT(*) FROM submitted_assignment").fetchone()[0]
    assert records == 0, "an ungradable submission left a record averages count as 0"

    # nobody here was graded, so generate_feedback finds no notebook (it fails saying so); the
    # reasons' pages are in feedback/ already, which is what Release Feedback sends
    _run(course, "generate_feedback", AID, "--force", ok=False)
    _run(course, "release_feedback", AID)
    for learner, (_, phrase) in bad.items():
        _run(course, "fetch_feedback", AID, f"--student={learner}", *_as(learner, tmp_path))
        (page,) = (tmp_path / learner / AID / "feedback").glob(f"*/{AID}.html")
        text = page.read_text()
        assert phrase in text and "not graded" in text, text
        assert f"submit {AID} again" in text and "ask the learner" not in text, text
