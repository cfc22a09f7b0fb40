"""Descendants of a process, by a walk of ``/proc``: the one piece of the sandbox a worker needs.

Its own module because the rest of the sandbox stays out of the worker's view.
"""

from __future__ import annotations

import os
from pathlib import Path


def descendants(root: int) -> list[int]:
    """Every live process whose ancestry reaches ``root`` (a /proc walk; orphans re-parented to a
    subreaper above us are found through it, see ``grader.sandbox.box.become_subreaper``)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, frontier = [], {root}
    while frontier:
        kids = {p for p, pp in parent.items() if pp in frontier and p not in out and p != root}
        out += sorted(kids)
        frontier = kids
    return out
