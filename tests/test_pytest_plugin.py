"""The grader's pytest face (grader/frontends/pytest_plugin.py): ``pytest --effkit-submission NB``
collects each graded check of the notebook's lesson as an item with its points and reason, graded
once by ``python -m grader check`` in its own process; ``--junitxml`` carries them to a CI runner.

Lesson 1 is graded (its quickest grading): the reference earns every item, the untouched stub none,
and the junit file says the same with the points."""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import tomllib

from grader import assignments

ROOT = Path(__file__).resolve().parents[1]


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """A pytest of its own in ``tmp_path`` (no project config, so only the plugin's items)."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        # the same out-of-kernel draws every run (grader.scoring.checks.TEST_SEED_ENV): a reference
        # must not fail CI on an unlucky task
        EFFKIT_GRADER_TEST_SEED="1",
    )
    cmd = [sys.executable, "-m", "pytest", "-p", "grader.frontends.pytest_plugin", "-p"]
    cmd += ["no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull, *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def _junit(path: Path) -> dict[str, dict]:
    """testcase name -> {"outcome", "message", and its properties}."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        failure = case.find("failure")
        out[case.get("name")] = {
            "outcome": "failed" if failure is not None else "passed",
            "message": "" if failure is None else failure.get("message", ""),
            **props,
        }
    return out


@pytest.mark.timed
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["solutions", "exercises"])
def test_a_lessons_checks_are_items_with_their_points_and_reasons(tmp_path, kind):
    notebook = tmp_path / "lesson1.ipynb"
    shutil.copy(ROOT / kind / "lesson1" / "lesson1.ipynb", notebook)
    proc = _pytest(tmp_path, "--effkit-submission", str(notebook), "--junitxml", "out.xml", "-v")
    log = proc.stdout + proc.stderr
    cases = _junit(tmp_path / "out.xml")
    points = assignments.manifest("lesson1").points
    assert sorted(cases) == sorted(points), log
    for gid, case in cases.items():
        assert float(case["max_points"]) == points[gid]
        if kind == "solutions":
            assert case["outcome"] == "passed" and float(case["points"]) == points[gid], (gid, log)
        else:  # the stub: every check fails, says why, and earns nothing
            assert case["outcome"] == "failed" and float(case["points"]) == 0, (gid, log)
            assert "NotImplementedError" in case["reason"], case
            assert case["message"].startswith(f"0 / {points[gid]:g} points: "), case
    assert proc.returncode == (0 if kind == "solutions" else 1), log
    assert log.count("grading out of the kernel") <= 1  # graded once, not per item


@pytest.mark.parametrize(
    "args, error",
    [
        (["--effkit-submission", "missing.ipynb"], "--effkit-submission: no such notebook: "),
        (
            ["--effkit-submission", "notes.ipynb"],
            "pass --effkit-assignment if you renamed the file",
        ),
        (
            ["--effkit-submission", "notes.ipynb", "--effkit-assignment", "lesson99"],
            "unknown assignment 'lesson99'",
        ),
        (["--effkit-submission", "notes.ipynb", "tests"], "pass no test paths beside it"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(tmp_path, args, error):
    (tmp_path / "notes.ipynb").write_text("{}")
    (tmp_path / "tests").mkdir()
    proc = _pytest(tmp_path, *args)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert error in proc.stderr, proc.stderr


def test_an_installed_effkit_gives_pytest_the_option_without_p(tmp_path):
    """pyproject's ``pytest11`` entry point (as an install writes it) loads the plugin, and naming it
    after its module keeps ``-p grader.frontends.pytest_plugin`` beside it from loading it twice."""
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    info = tmp_path / "site" / "effkit-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: effkit\nVersion: 0\n")
    lines = "".join(f"{k} = {v}\n" for k, v in points["pytest11"].items())
    (info / "entry_points.txt").write_text(f"[pytest11]\n{lines}")
    env = dict(os.environ, PYTHONPATH=f"{info.parent}{os.pathsep}{ROOT}")
    for extra in ([], ["-p", "grader.frontends.pytest_plugin"]):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *extra, "-c", os.devnull, "--rootdir", str(tmp_path)]
            + ["-p", "no:cacheprovider", "--effkit-submission", "missing.ipynb"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert "--effkit-submission: no such notebook" in proc.stderr, (extra, proc.stderr)
