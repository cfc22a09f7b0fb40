"""One cgroup per learner process tree, and the sweep of groups a dead grading left behind.

Limits, freezing and killing act on the whole tree, and nothing outlives its grading. Needs root
or a delegated subtree; without one, launch falls back to a /proc walk.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "effkit-grader"


class Cgroup:
    """One cgroup per worker, v1 (one directory per controller) or v2 (one directory)."""

    def __init__(self, name: str, limits):  # a grader.sandbox.launch.Limits
        self.dirs: dict[str, Path] = {}
        self.v2 = (CGROUP_ROOT / "cgroup.controllers").is_file()
        if self.v2:
            d = CGROUP_ROOT / CGROUP_PARENT / name
            d.mkdir(parents=True)
            self.dirs = {c: d for c in ("pids", "memory", "freezer")}
            _write(d / "pids.max", str(limits.pids))
            _write(d / "memory.max", str(limits.memory_mb << 20))
            _write(d / "memory.swap.max", "0")
        else:
            for ctl in ("pids", "memory", "freezer"):
                base = CGROUP_ROOT / ctl
                if not base.is_dir():
                    continue
                d = base / CGROUP_PARENT / name
                try:
                    d.mkdir(parents=True)
                except OSError:
                    continue
                self.dirs[ctl] = d
            if "pids" in self.dirs:
                _write(self.dirs["pids"] / "pids.max", str(limits.pids))
            if "memory" in self.dirs:
                _write(self.dirs["memory"] / "memory.limit_in_bytes", str(limits.memory_mb << 20))
                _write(
                    self.dirs["memory"] / "memory.memsw.limit_in_bytes", str(limits.memory_mb << 20)
                )

    def add(self, pid: int) -> None:
        for d in set(self.dirs.values()):
            (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        d = (
            self.dirs.get("freezer")
            or self.dirs.get("pids")
            or next(iter(self.dirs.values()), None)
        )
        if d is None:
            return []
        try:
            return [int(x) for x in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def freeze(self, frozen: bool = True) -> bool:
        d = self.dirs.get("freezer")
        if d is None:
            return False
        if self.v2:
            (d / "cgroup.freeze").write_text("1" if frozen else "0")
            want, state = ("frozen 1" if frozen else "frozen 0"), d / "cgroup.events"
        else:
            (d / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
            want, state = ("FROZEN" if frozen else "THAWED"), d / "freezer.state"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # FREEZING until every task is stopped
            if want in state.read_text():
                return True
            time.sleep(0.002)
        return False

    def kill(self) -> None:
        self.freeze(True)  # nobody forks while we kill
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.freeze(False)
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.01)

    def oom_killed(self) -> bool:
        d = self.dirs.get("memory")
        try:
            if self.v2:
                events = (d / "memory.events").read_text()
                return any(
                    line.split()[0] == "oom_kill" and int(line.split()[1]) > 0
                    for line in events.splitlines()
                )
            control = dict(
                line.split() for line in (d / "memory.oom_control").read_text().splitlines()
            )
            peak = int((d / "memory.max_usage_in_bytes").read_text())
            limit = int((d / "memory.limit_in_bytes").read_text())
            return int(control.get("oom_kill", 0)) > 0 or peak >= 0.95 * limit
        except (OSError, AttributeError, ValueError, IndexError):
            return False

    def memory_bytes(self) -> tuple[int, int] | None:
        """(usage now, peak usage since the group was made) in bytes, as the kernel charges them to
        the group and its descendants (v1 ``memory.usage_in_bytes`` / ``max_usage_in_bytes``; v2
        ``memory.current`` / ``memory.peak``), or None without a memory controller. Only root can
        reset these files: a member can add to them by touching pages, never take away. v1 with swap
        accounting: memory + swap (``memory.memsw.*``), since a member may push its own pages to swap
        (``MADV_PAGEOUT``) and the plain figures leave those out (v2 groups get no swap at all)."""
        d = self.dirs.get("memory")
        v1 = ("memory.usage_in_bytes", "memory.max_usage_in_bytes")
        choices = (
            [("memory.current", "memory.peak")]
            if self.v2
            else [tuple(n.replace(".", ".memsw.", 1) for n in v1), v1]
        )
        for names in choices:
            try:
                now, peak = (int((d / name).read_text().split()[0]) for name in names)
            except (OSError, TypeError, ValueError, IndexError):
                continue
            return now, peak
        return None

    def pids_exhausted(self) -> bool:
        d = self.dirs.get("pids")
        try:
            fields = (d / "pids.events").read_text().split()
            return int(fields[fields.index("max") + 1]) > 0
        except (OSError, AttributeError, ValueError, IndexError):
            return False

    def remove(self) -> None:
        for d in set(self.dirs.values()):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)


def sweep_stale_cgroups() -> list[str]:
    """Thaw, kill and remove the worker cgroups of graders that died (a killed or crashed grading
    leaves its workers frozen). A group's name starts with ``w<grader pid>-``; only groups whose
    grader process is gone are touched, so concurrent gradings are safe. Returns what it removed."""
    removed = []
    for base in [CGROUP_ROOT / CGROUP_PARENT] + [
        CGROUP_ROOT / c / CGROUP_PARENT for c in ("freezer", "pids", "memory")
    ]:
        if not base.is_dir():
            continue
        for d in base.iterdir():
            owner = d.name[1:].split("-", 1)[0]
            if not (d.is_dir() and d.name.startswith("w") and owner.isdigit()):
                continue
            if Path(f"/proc/{owner}").exists():
                continue  # its grader is alive
            _thaw_and_kill(d)
            for _ in range(50):
                try:
                    d.rmdir()
                    removed.append(str(d))
                    break
                except OSError:
                    time.sleep(0.02)
    return removed


def _thaw_and_kill(d: Path) -> None:
    for state, value in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
        _write(d / state, value)
    try:
        pids = [int(x) for x in (d / "cgroup.procs").read_text().split()]
    except OSError:
        pids = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if not (d / "cgroup.procs").read_text().split():
                return
        except OSError:
            return
        time.sleep(0.02)


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError:
        pass  # e.g. memsw without swap accounting: the memory limit alone still applies
