"""Shared by the farm's tests: a temporary course with lesson 1 generated, submissions, the gradebook.

Lesson 1 is the quickest exercise to grade (~15-20 s on 2 cores): the farm's tests grade it
through the real pipeline, never a stand-in grader.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AID = "lesson1"
SOLUTION = ROOT / "solutions" / AID / f"{AID}.ipynb"
STUB = ROOT / "exercises" / AID / f"{AID}.ipynb"
FULL = 12.0


def env(root: Path, **extra) -> dict:
    out = dict(os.environ, EFFKIT_COURSE_ROOT=str(root), EFFKIT_GRADER_TEST_SEED="1", **extra)
    out["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), out.get("PATH", "")])
    return out


@functools.cache
def _generated() -> Path:
    """One course with lesson 1 generated, made once per test process (nbgrader takes seconds)."""
    root = Path(tempfile.mkdtemp(prefix="effkit-farm-course-"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(ROOT / "solutions", root / "solutions")
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", AID, "--force"],
        cwd=ROOT,
        env=env(root),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return root


def make_course(root: Path) -> Path:
    """``root`` with solutions/ and lesson 1 in nbgrader's gradebook (generate_assignment)."""
    shutil.copytree(_generated(), root, dirs_exist_ok=True)
    return root


def submit(root: Path, student: str, source: Path | bytes | None) -> Path:
    """``source`` as the student's collected notebook (None: a folder without the notebook)."""
    folder = root / "course" / "submitted" / student / AID
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    path = folder / f"{AID}.ipynb"
    if source is None:
        (folder / "notes.txt").write_text("done!")
    elif isinstance(source, bytes):
        path.write_bytes(source)
    else:
        shutil.copy(source, path)
    return path


def _with_quiz(notebook: Path, source: str) -> bytes:
    """``notebook`` with its quiz cell's source replaced."""
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "quiz":
            cell["source"] = source
    return json.dumps(nb).encode()


def slow_stub(seconds: float) -> bytes:
    """Lesson 1's untouched exercise whose quiz cell first sleeps ``seconds``: still 0 points, but a
    grading long enough that a test can act between two of them on a busy core."""
    return _with_quiz(STUB, f"import time\ntime.sleep({seconds})\nraise NotImplementedError()\n")


def endless_loop() -> bytes:
    """Lesson 1's reference with its quiz cell replaced by an endless loop (a grading that hangs)."""
    return _with_quiz(SOLUTION, "while True:\n    pass\n")


def scores(root: Path) -> dict[str, list[float]]:
    """student -> [total auto score of each recorded submission], straight from the gradebook."""
    out: dict[str, list[float]] = {}
    with sqlite3.connect(root / "course" / "gradebook.db") as db:
        rows = db.execute(
            "SELECT s.student_id, SUM(g.auto_score) FROM submitted_assignment s "
            "JOIN submitted_notebook n ON n.assignment_id = s.id "
            "JOIN grade g ON g.notebook_id = n.id GROUP BY s.id"
        ).fetchall()
    for student, score in rows:
        out.setdefault(student, []).append(score)
    return out


def processes(needle: str) -> list[int]:
    """Live processes whose command line contains ``needle``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if needle.encode() in cmd:
                out.append(int(entry))
    return out
