"""The course's interpreter, reachable by the other accounts tests run it as.

Tests run this venv's Python as other accounts (``nobody``, ``daemon``, learner accounts they make),
as a cohort's learners do. ``cohort up`` opens the folders above the interpreter to its own accounts
(``cohort_host.open_interpreter_path``, an ACL entry each); a test session opens them to every
account, traverse only, where one is closed: pyenv under a 0700 ``/root``, as on a fresh Debian
host, where such tests failed on a host kind whose ``/root`` was closed (AMD EPYC Zen 4,
2026-12-05) and passed where it was not. Folders the sandbox's workers reach are unaffected: they
see the interpreter through bubblewrap's binds. Sessions at once (make test's two lanes, a
developer's second run) share the change: each holds a shared lock while it runs, the modes as
found are kept in one file, and the last session to end puts them back.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import sys
from pathlib import Path

PLACE = Path("/run") if os.path.isdir("/run") else Path("/tmp")
LOCK = PLACE / "effkit-tests-interpreter.lock"  # shared by every session while it runs
EDIT = PLACE / "effkit-tests-interpreter.edit"  # exclusive, briefly: reading and writing the modes
MODES = PLACE / "effkit-tests-interpreter.json"


def _editing() -> int:
    fd = os.open(EDIT, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def open_interpreter_path() -> int | None:
    """Give every folder above the interpreter that other accounts cannot pass the traverse bit;
    returns the session's lock for :func:`restore`. Nothing without root."""
    if os.geteuid() != 0:
        return None
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)  # held while this session runs
    edit = _editing()
    try:
        found = json.loads(MODES.read_text()) if MODES.exists() else {}
        for folder in reversed(Path(os.path.realpath(sys.executable)).parents):
            mode = stat.S_IMODE(folder.stat().st_mode)
            if not mode & 0o001:
                found.setdefault(str(folder), mode)
                folder.chmod(mode | 0o001)
        MODES.write_text(json.dumps(found))
    finally:
        os.close(edit)
    return fd


def restore(fd: int | None) -> None:
    """Put the modes back if no other session still holds its lock; else leave that to the last."""
    if fd is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)  # another session runs: the last one to end restores
        return
    edit = _editing()
    try:
        found = json.loads(MODES.read_text()) if MODES.exists() else {}
        for folder, mode in found.items():
            os.chmod(folder, mode)
        MODES.unlink(missing_ok=True)
    finally:
        os.close(edit)
        os.close(fd)
