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
    cmd = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()[-1]  # fmt: skip
    assert "jupyter lab" in cmd
    assert ("--allow-root" in cmd) == (os.getuid() == 0), cmd
