"""Keep stderr out of graded cells: capture it (and warnings) and replay it on stdout.

nbgrader gives a test cell zero points if anything reaches its stderr, so even fd 2 is swapped
(``os.dup2``). Processes forked meanwhile keep writing to the capture file until they exit.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator

PREFIX = "[captured stderr] "
MAX_REPLAY_CHARS = 4000  # a runaway warning loop must not flood the notebook


class Captured:
    """What a ``quiet()`` block caught; filled in when the block exits."""

    def __init__(self) -> None:
        self.text = ""
        self.warnings: list[str] = []

    @property
    def empty(self) -> bool:
        return not self.text.strip() and not self.warnings


@contextlib.contextmanager
def quiet(replay: bool = True) -> Iterator[Captured]:
    """Capture stderr (Python and fd level) and warnings; replay them on stdout afterwards."""
    captured = Captured()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fd = _dup_stderr_fd()
    tmp = tempfile.TemporaryFile(mode="w+b")
    if saved_fd is not None:
        os.dup2(tmp.fileno(), 2)
    py_buffer = io.StringIO()
    old_stderr = sys.stderr
    sys.stderr = py_buffer
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            yield captured
    finally:
        sys.stderr = old_stderr
        if saved_fd is not None:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
        tmp.seek(0)
        fd_text = tmp.read().decode("utf-8", errors="replace")
        tmp.close()
        captured.text = py_buffer.getvalue() + fd_text
        captured.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
        if replay:
            _replay(captured)


def _dup_stderr_fd() -> int | None:
    try:
        return os.dup(2)
    except OSError:  # no fd 2 (some embedded interpreters): Python-level capture still works
        return None


def _replay(captured: Captured) -> None:
    lines = [ln for ln in captured.text.splitlines() if ln.strip()]
    lines += [f"warning: {w}" for w in captured.warnings]
    text = "\n".join(PREFIX + ln for ln in lines)
    if len(text) > MAX_REPLAY_CHARS:
        text = (
            text[:MAX_REPLAY_CHARS] + f"\n{PREFIX}... ({len(text) - MAX_REPLAY_CHARS} more chars)"
        )
    if text:
        print(text, flush=True)
