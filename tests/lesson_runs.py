"""Run each lesson once per test session, in the smoke profile, and share the executed copy.

tests/test_notebooks.py checks what the lessons printed; tests/test_site.py builds the course site
from the same executed notebooks, so CI runs every lesson once, not twice.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

_TMP = Path(tempfile.mkdtemp(prefix="effkit-lessons-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)  # 13 executed lessons: ~350 MB a session
EXECUTED = _TMP / "executed"
SMOKE_ENV = {"EFFKIT_PROFILE": "smoke", "MPLBACKEND": "Agg", "EFFKIT_DATA": str(_TMP / "data")}


@functools.cache
def executed(slug: str) -> tuple[Path, float]:
    """(path of the executed notebook, wall seconds); the kernel inherits SMOKE_ENV."""
    from effkit.lesson_build import execute

    saved = {key: os.environ.get(key) for key in SMOKE_ENV}
    os.environ.update(SMOKE_ENV)
    try:
        return execute(slug, EXECUTED, timeout_s=1200)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
