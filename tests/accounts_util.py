"""The course's interpreter, reachable by the other accounts tests run it as.

Tests run this venv's Python as other accounts (``nobody``, ``daemon``, learner accounts they make),
as a cohort's learners do. ``cohort up`` opens the folders above the interpreter to its own accounts
(``cohort_host.open_interpreter_path``, an ACL entry each); a test session opens them to every
account, traverse only, where one is closed: pyenv under a 0700 ``/root``, as on a fresh Debian
host, where five such tests failed on a host kind whose ``/root`` was closed (AMD EPYC Zen 4,
2026-12-05) and passed where it was not. Folders the sandbox's workers reach are unaffected: they
see the interpreter through bubblewrap's binds.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def open_interpreter_path() -> list[tuple[str, int]]:
    """Give every folder above the interpreter that other accounts cannot pass the traverse bit;
    returns (folder, mode before) for :func:`restore`. Nothing without root."""
    opened: list[tuple[str, int]] = []
    if os.geteuid() != 0:
        return opened
    for folder in reversed(Path(os.path.realpath(sys.executable)).parents):
        mode = stat.S_IMODE(folder.stat().st_mode)
        if not mode & 0o001:
            folder.chmod(mode | 0o001)
            opened.append((str(folder), mode))
    return opened


def restore(opened: list[tuple[str, int]]) -> None:
    for folder, mode in opened:
        os.chmod(folder, mode)
