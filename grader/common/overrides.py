"""The instructor's speed-target overrides (``course/grader_targets.json``), read once per process.

The sandbox takes the snapshot before any learner code starts, so nothing a learner process writes
later (where no sandbox hides the course folder) can change this grading's targets.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from grader.common.course import course_dir


def overrides_path() -> Path:
    env = os.environ.get("EFFKIT_GRADER_TARGETS")
    return Path(env).expanduser() if env else course_dir() / "grader_targets.json"


def load_overrides(path: Path | None = None) -> tuple[dict, str]:
    path = path or overrides_path()
    try:
        if not path.is_file():
            return {}, "default"
    except PermissionError:  # a cohort learner's own check: the course folder is the instructor's
        return {}, "default (the instructor's overrides are not readable here)"
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"target overrides {path} are not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"target overrides {path} must be a JSON object of assignment -> class")
    return data, str(path)


_SNAPSHOTS: dict[str, tuple[dict, str]] = {}


def snapshot_overrides() -> tuple[dict, str]:
    """The instructor's overrides as they were the first time this process asked: taken by
    :func:`grader.sandbox.launch.launch` before any learner code starts, so nothing a learner process
    writes later (where no sandbox hides the course folder) can change this grading's targets."""
    key = str(overrides_path())
    if key not in _SNAPSHOTS:
        _SNAPSHOTS[key] = load_overrides(Path(key))
    return _SNAPSHOTS[key]
