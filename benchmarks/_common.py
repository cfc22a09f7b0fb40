"""Code the benchmark scripts share. Standard library only: the lease scripts run it on a lent
machine's own Python. A script imports it with its own folder on ``sys.path``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def pip_download(dest: Path, specs: list[str], *options: str) -> None:
    """Binary wheels of ``specs`` (no dependencies) from the registry or pip's cache into ``dest``;
    ``options`` go to ``pip download`` (a target ``--platform``, ``--python-version``, ...)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            *options,
            "-d",
            str(dest),
            *specs,
        ],
        check=True,
    )
