"""A started learner process and what holds it: its cgroup, or else its process tree by /proc walk.

``pause``/``resume`` freeze and thaw the whole tree (the freezer, else SIGSTOP/SIGCONT), ``escaped``
finds processes that left the worker's session, ``close`` kills everything and removes the group.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.sandbox.cgroups import Cgroup
from grader.sandbox.proctree import descendants


@dataclass
class Sandbox:
    """A started learner process, its cgroup (if any) and what the machine could not give."""

    proc: subprocess.Popen
    cgroup: Cgroup | None
    unavailable: list[str] = field(default_factory=list)
    workdir: Path | None = None  # only when there is no private tmpfs (then created by us)
    uid: int | None = None  # the worker's uid where it runs in a PID namespace of its own
    _worker: int | None = None

    @property
    def pid(self) -> int:
        """The worker's own process, numbered as the grader sees it. In a PID namespace ``proc`` is
        ``unshare``; its child, the namespace's init (a root shell), starts the worker, the first
        descendant running as the worker's uid (learner processes come later, deeper)."""
        if self.uid is None:
            return self.proc.pid
        deadline = time.monotonic() + 60
        while self._worker is None and self.proc.poll() is None and time.monotonic() < deadline:
            self._worker = next(
                (p for p in descendants(self.proc.pid) if _uid(p) == self.uid), None
            )
            if self._worker is None:
                time.sleep(0.005)
        return self._worker or self.proc.pid

    def members(self) -> list[int]:
        if self.cgroup is not None:
            return self.cgroup.pids()
        return descendants(self.proc.pid)

    def escaped(self) -> list[int]:
        """Live descendants outside the worker's session: not stopped by killpg. With a cgroup
        nothing escapes (the freezer holds every member), so this is empty."""
        if self.cgroup is not None:
            return []
        out = []
        for pid in descendants(self.proc.pid):
            try:
                if os.getsid(pid) != self.proc.pid:
                    out.append(pid)
            except ProcessLookupError:
                pass
        return out

    def left_session(self) -> list[int]:
        """Members that called ``setsid()`` (or were started in a new session): stopped with the
        worker only because the freezer / tree walk still finds them. Reported, never trusted."""
        out = []
        for pid in self.members():
            try:
                if pid != self.proc.pid and os.getsid(pid) != self.proc.pid:
                    out.append(pid)
            except ProcessLookupError:
                pass
        return out

    def pause(self) -> None:
        if self.proc.poll() is not None and not self.members():
            return
        if self.cgroup is not None and self.cgroup.freeze(True):
            return
        _signal_tree(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.cgroup is not None and self.cgroup.freeze(False):
            return
        _signal_tree(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()
        _signal_tree(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        self.kill()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _uid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _signal_tree(pid: int, sig: int) -> None:
    for target in [pid, *descendants(pid)]:
        try:
            os.killpg(target, sig) if target == pid else os.kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


def become_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants, so a double-forked learner process
    stays in our /proc walk (Linux prctl PR_SET_CHILD_SUBREAPER)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
