"""What a notebook's locked cells call, in the learner's kernel: a fresh grader process does the work.

``check_my_work`` (a test cell) and ``grade_saved_notebook`` (the performance cell) run
``python -m grader check|perf`` on the *saved* notebook and print its verdict. Under ``nbgrader
autograde`` they only print a note: the grader fills those cells from outside the kernel.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.common.quiet import quiet
from grader.scoring.quiz import SEALED


def _own_file(path: Path) -> bool:
    """A regular file this account owns and alone can read: only such a cached report is used (in
    a shared /tmp another account could plant one under this account's name)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _check_report(notebook: Path) -> dict:
    """``python -m grader check`` of the saved notebook. Validation (nbgrader's Validate button)
    runs every test cell in one go: the report is kept per saved version of the notebook, so one
    grading answers them all."""
    state = notebook.stat()
    key = hashlib.sha256(f"{notebook.resolve()}:{state.st_mtime_ns}:{state.st_size}".encode())
    cache = Path(tempfile.gettempdir()) / f"effkit-check-{os.getuid()}-{key.hexdigest()[:16]}.json"
    if os.environ.get("NBGRADER_EXECUTION") == "validate" and _own_file(cache):
        return json.loads(cache.read_text())
    print(f"Checking the solution cells *saved* in {notebook} (save first) ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        proc = subprocess.run(
            [sys.executable, "-m", "grader", "check", str(notebook), "--json", str(out)],
            capture_output=True,
            text=True,
        )
        if not out.is_file():
            raise RuntimeError(f"the grader could not run:\n{proc.stdout[-2000:]}")
        text = out.read_text()
    # the learner's own scores: never readable by another account, even in a shared /tmp
    try:
        fd = os.open(cache, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError:  # another account's file by that name: no cache, never theirs
        return json.loads(text)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return json.loads(text)


def _points(notebook: Path, grade_id: str) -> float:
    """The cell's points as nbgrader will count them (its metadata in the saved notebook)."""
    for cell in json.loads(notebook.read_text()).get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") == grade_id:
            return float(meta.get("points", 0))
    return 0.0


def _missing_notebook(notebook: Path) -> str:
    """Why this cell's notebook is not where the cell runs. Validate runs a notebook in its own
    folder, so a missing one there is nearly always another lesson's notebook saved (or fetched)
    under this folder's name, not a wrong working directory."""
    here = Path.cwd()
    others = sorted(p.name for p in here.glob("*.ipynb"))
    if not others:
        return f"cannot find {notebook.resolve()}: run this from your notebook's folder"
    return (
        f"this cell is from {notebook.name}, but {here.name}/ holds {', '.join(others)}: it looks "
        f"like another lesson's notebook saved under another name. Each lesson's notebook keeps "
        f"its own name in its own folder: open {notebook.stem}'s notebook (fetch it again from "
        f"the Assignment List if needed) and validate that one"
    )


def check_my_work(grade_id: str, notebook: str) -> None:
    """What a notebook's test cell runs: the grader's own check of the *saved* notebook, in a fresh
    process (``python -m grader check``, the same code as autograding); nbgrader's Validate button
    runs it too, so a failing check shows the grader's reason before submitting. Under autograde
    the grader overwrites this cell's output, so it only prints a note there."""
    if os.environ.get("NBGRADER_EXECUTION", "validate") != "validate":
        print(
            "Graded by the grader outside this notebook's kernel; its verdict replaces this output."
        )
        return
    if not Path(notebook).is_file():
        raise FileNotFoundError(_missing_notebook(Path(notebook)))
    report = _check_report(Path(notebook))
    cell = (report.get("out_of_kernel") or {}).get("cells", {}).get(grade_id)
    if cell is None:
        raise RuntimeError(f"the grader has no check called {grade_id!r}")
    if grade_id == QUIZ_GRADE_ID:
        _say_only_what_is_unanswered(cell)
        return
    points = _points(Path(notebook), grade_id)
    earned = points if cell["passed"] else 0
    print(
        f"{grade_id}: {earned:g} / {points:g} points ({'passed' if cell['passed'] else 'failed'})"
    )
    for line in cell["lines"]:
        print(line)
    for flag in report["out_of_kernel"]["flags"]:
        print(f"flag: {flag}")
    if not cell["passed"]:
        raise AssertionError(cell["reason"])


# The quiz cell: Validate says which questions have no answer and nothing about right or wrong, so a
# learner cannot find the key by resubmitting; the verdict and its per-option feedback come at autograde.
# On a cohort hub the key is closed to the learner's account (grader.scoring.quiz.SEALED): the same line.
QUIZ_GRADE_ID = "test_quiz"
_UNANSWERED = re.compile(r"\b(q\d+): no answer\b")


def _say_only_what_is_unanswered(cell: dict) -> None:
    said = " ".join([cell.get("reason") or "", *cell.get("lines", [])])
    missing = _UNANSWERED.findall(said)
    if missing:
        raise AssertionError(f"no answer yet to {', '.join(missing)} (set them in QUIZ_ANSWERS)")
    judged = "answers right" in said or SEALED in said  # graded, or to be graded at autograde
    if not cell["passed"] and not judged:  # the cell itself failed: its own reason
        raise AssertionError(cell["reason"])
    print(
        f"{QUIZ_GRADE_ID}: every question has an answer; whether they are right is said when your "
        "work is graded, not here"
    )


def grade_saved_notebook(notebook: str) -> float | None:
    """What a notebook's performance cell runs. Under ``nbgrader autograde`` the grader does the
    work outside this kernel (its preprocessor fills in the cell), so this only prints a note and
    returns 0 (fail-safe: without the preprocessor the cell earns nothing). Run interactively, it
    grades the solution cells *saved* in ``notebook`` in fresh processes (``python -m grader
    perf``) and returns the points."""
    mode = os.environ.get("NBGRADER_EXECUTION")
    if mode == "autograde":
        print(
            "Performance is measured by the grader outside this notebook's kernel; "
            "its feedback replaces this output."
        )
        return 0.0
    if mode == "validate":
        print(f"Skipped while validating: run `python -m grader check {notebook}` to measure.")
        return None
    path = Path(notebook)
    if not path.is_file():
        raise FileNotFoundError(
            f"cannot find {path.resolve()}: run this cell from the folder of your "
            f"notebook, or pass grade_performance(notebook='path/to/{path.name}')"
        )
    print(f"Grading the solution cells *saved* in {path} (save the notebook first) ...", flush=True)
    with quiet(), tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "grader", "perf", str(path), "--json", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            print(line, end="", flush=True)
        if proc.wait() != 0 or not out.is_file():
            raise RuntimeError(f"the grader could not run (exit code {proc.returncode}); see above")
        return json.loads(out.read_text())["points"]
