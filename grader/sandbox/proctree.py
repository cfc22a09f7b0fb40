"""Descendants of a process, by a walk of ``/proc``: the one piece of the sandbox a worker needs.

**What it does.** ``descendants(pid)`` lists every live process whose ancestry reaches ``pid``. The
parent uses it to find a worker's tree without a cgroup (:mod:`grader.sandbox.launch`); the probe worker
uses it to report processes learner code left running (:mod:`grader.sandbox.probe_worker`).

**Why its own module.** The worker sees only the grader modules it runs (:mod:`grader.sandbox.learner_view`);
the sandbox itself is the parent's code and stays out of that view.
"""

from __future__ import annotations

import os
from pathlib import Path


def descendants(root: int) -> list[int]:
    """Every live process whose ancestry reaches ``root`` (a /proc walk; orphans re-parented to a
    subreaper above us are found through it, see ``grader.sandbox.launch.become_subreaper``)."""
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
