"""Where the course lives on disk: the same rules as ``nbgrader_config.py``, without nbgrader.

Must agree with ``nbgrader_config.py``. Installed from a wheel, set ``EFFKIT_COURSE_ROOT``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SOURCE_DIR = "solutions"
RELEASE_DIR = "exercises"


def course_root() -> Path:
    env = os.environ.get("EFFKIT_COURSE_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    repo = Path(__file__).resolve().parents[2]
    if (repo / SOURCE_DIR).is_dir():
        return repo
    return Path.cwd().resolve()


def course_dir(root: Path | None = None) -> Path:
    """The private, git-ignored course folder (submissions, gradebook, reports, overrides)."""
    return (root or course_root()) / os.environ.get("EFFKIT_COURSE_DIR", "course")


def source_notebook(assignment: str, notebook: str, root: Path | None = None) -> Path:
    return (root or course_root()) / SOURCE_DIR / assignment / f"{notebook}.ipynb"


def release_notebook(assignment: str, notebook: str, root: Path | None = None) -> Path:
    return (root or course_root()) / RELEASE_DIR / assignment / f"{notebook}.ipynb"


def write_report(path: str | Path, report: object) -> Path:
    """Write a ``--json`` report, creating its folder: callers (``make gpu-check``, CI, a learner
    typing ``--json out/x.json``) name a path in a folder nothing else creates."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str))
    return path
