"""`make lab` must start JupyterLab for whoever runs it: Jupyter refuses root without --allow-root
(containers and course VMs often run as root), and a normal user must not get the flag."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_allows_root_only_for_root():
    # under `make test` (as in CI) the child make inherits MAKELEVEL and prints "make[1]: Leaving
    # directory" last: pick the recipe's own line, not the last one
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "lab"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if "jupyter lab" in line]
    assert len(lines) == 1, out
    cmd = lines[0]
    assert ("--allow-root" in cmd) == (os.getuid() == 0), cmd


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_cohort_starts_and_make_cohort_down_stops():
    def recipe(*goals: str) -> list[str]:
        out = subprocess.run(
            ["make", "--no-print-directory", "-n", *goals],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [line for line in out.splitlines() if "-m grader cohort" in line]

    assert [line.split("-m grader ")[1].strip() for line in recipe("cohort")] == ["cohort up"]
    assert [line.split("-m grader ")[1].strip() for line in recipe("cohort", "down")] == [
        "cohort down"
    ]
    alone = subprocess.run(["make", "--no-print-directory", "down"], cwd=ROOT, capture_output=True)
    assert (
        alone.returncode != 0 and b"make cohort down" in alone.stdout
    )  # `make down` alone is a slip
