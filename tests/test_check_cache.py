"""What Validate runs in a learner's kernel (grader/kit/in_notebook.py): a private report, a real reason.

Validate runs every test cell at once and the report of one ``python -m grader check`` answers
them all, kept in ``/tmp/effkit-check-<uid>-*.json``. It was 0644 there (scores and speed-ups
readable by every account), and a file another account planted under that name would have been
read as the learner's own verdict.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from grader.kit import in_notebook


@pytest.fixture
def notebook(tmp_path, monkeypatch):
    monkeypatch.setattr(in_notebook.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    runs = []

    def grader_check(cmd, **kw):  # the grader's process, replaced: this test is about the cache
        runs.append(cmd)
        Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps({"points": len(runs)}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(in_notebook.subprocess, "run", grader_check)
    path = tmp_path / "lesson1.ipynb"
    path.write_text("{}")
    return path, runs


def _cache(tmp_path: Path) -> Path:
    (found,) = tmp_path.glob(f"effkit-check-{os.getuid()}-*.json")
    return found


def test_the_cached_report_is_private_and_reused(notebook):
    path, runs = notebook
    assert in_notebook._check_report(path) == {"points": 1}
    cache = _cache(path.parent)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert in_notebook._check_report(path) == {"points": 1} and len(runs) == 1


def test_a_report_readable_by_others_or_planted_is_never_used(notebook):
    path, runs = notebook
    in_notebook._check_report(path)
    cache = _cache(path.parent)
    cache.write_text(json.dumps({"points": 99}))
    cache.chmod(0o644)  # as another account's file would be, or an old 0644 report
    assert in_notebook._check_report(path) == {"points": 2}
    if os.geteuid() == 0:  # a 0600 file owned by another account under the learner's name
        cache.write_text(json.dumps({"points": 99}))
        cache.chmod(0o600)
        os.chown(cache, 65534, 65534)
        assert in_notebook._check_report(path) == {"points": 3}


def test_validate_on_another_lessons_notebook_names_the_real_problem(tmp_path, monkeypatch):
    """Lesson 2's notebook saved as lesson1/lesson1.ipynb: its test cells ask for lesson2.ipynb.
    Validate (which runs the notebook in its own folder) blamed the working directory."""
    folder = tmp_path / "lesson1"
    folder.mkdir()
    (folder / "lesson1.ipynb").write_text("{}")
    monkeypatch.chdir(folder)
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(FileNotFoundError) as err:
        in_notebook.check_my_work("test_pipeline", "lesson2.ipynb")
    said = str(err.value)
    assert "lesson1/ holds lesson1.ipynb" in said and "another lesson's notebook" in said, said
    assert "run this from your notebook's folder" not in said


@pytest.mark.parametrize(
    "cell, said",
    [
        (  # wrong answers: Validate must not say which, or that any is wrong
            {"passed": False, "lines": [], "reason": "3 of 5 answers right. q2: (b) — because"},
            "every question has an answer",
        ),
        ({"passed": True, "lines": ["all 5 answers right"], "reason": ""}, "every question has"),
    ],
)
def test_validate_on_the_quiz_says_nothing_of_right_or_wrong(
    notebook, monkeypatch, capsys, cell, said
):
    """A learner who could read right/wrong from Validate would find the key by resubmitting: the
    verdict and its per-option feedback come at autograde (issue 50)."""
    path, _ = notebook
    report = {"out_of_kernel": {"cells": {"test_quiz": cell}, "flags": []}}
    monkeypatch.setattr(in_notebook, "_check_report", lambda nb: report)
    monkeypatch.chdir(path.parent)
    in_notebook.check_my_work("test_quiz", path.name)
    out = capsys.readouterr().out
    assert said in out and "right" not in out.replace("are right", "") and "(b)" not in out, out
    assert "points" not in out, out


def test_validate_on_the_quiz_names_the_unanswered_questions_only(notebook, monkeypatch):
    path, _ = notebook
    cell = {
        "passed": False,
        "lines": [],
        "reason": "3 of 5 answers right. q1: (c) — x; q4: no answer",
    }
    report = {"out_of_kernel": {"cells": {"test_quiz": cell}, "flags": []}}
    monkeypatch.setattr(in_notebook, "_check_report", lambda nb: report)
    monkeypatch.chdir(path.parent)
    with pytest.raises(AssertionError) as err:
        in_notebook.check_my_work("test_quiz", path.name)
    assert "q4" in str(err.value) and "q1" not in str(err.value) and "right" not in str(err.value)
