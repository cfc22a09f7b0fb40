"""`make test-oldest-torch`: the exercise tests on the oldest torch the course declares.

pyproject.toml declares ``torch>=X.Y`` (= ``effkit.MIN_TORCH``); CI's main venv has the newest
torch, the GPU machines ship their own (2.11 on the H100). This builds a second venv,
``.venv-oldest-torch/``, with ``torch==X.Y.*`` and the torchvision pip pairs with it (the
registry's usual wheels, CUDA builds that also run on a CPU) plus the course extra, once (a stamp
names the floor and the pyproject.toml it was built for), then runs the exercise tests there: every reference graded to
full marks, the stubs to 0, each wrong submission as it deserves, on that torch.

    python tests/oldest_torch.py            # build if needed, then test
    python tests/oldest_torch.py -k lesson5 # extra pytest arguments

Cost: the first build downloads torch and its CUDA libraries (~3 GB, ~2.5 min on the course's
machine); the tests then take about as long as in the main venv.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-oldest-torch"
STAMP = VENV / ".effkit-oldest-torch"
TESTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_lesson*_exercise.py"))


def floor() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [d for d in deps if re.match(r"torch\b", d)]
    return re.fullmatch(r"torch>=(\d+\.\d+)", torch.replace(" ", "")).group(1)


def build(version: str) -> None:
    import hashlib

    # rebuilt when the floor or pyproject.toml (the course extra it installs) changes
    key = f"{version} {hashlib.sha256((ROOT / 'pyproject.toml').read_bytes()).hexdigest()[:16]}"
    if STAMP.is_file() and STAMP.read_text() == key:
        return
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    subprocess.run(
        pip
        + [
            f"torch=={version}.*",
            "torchvision",
            "-e",
            f"{ROOT}[course]",
            "pytest>=8",
            "pytest-timeout>=2.3",
        ],
        check=True,
        cwd=ROOT,
    )
    STAMP.write_text(key)


def main(argv: list[str]) -> int:
    version = floor()
    build(version)
    python = str(VENV / "bin" / "python")
    found = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not found.startswith(version + "."):
        print(f"oldest-torch: expected torch {version}.*, the venv has {found}", file=sys.stderr)
        return 2
    print(f"oldest-torch: torch {found} (pyproject.toml declares torch>={version})", flush=True)
    return subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS, *argv], cwd=ROOT
    ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
