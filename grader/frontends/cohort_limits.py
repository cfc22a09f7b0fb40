"""Limits per learner in a cohort: memory, CPU and tasks in a cgroup of their own, a private ``/tmp``.

JupyterHub's local spawner starts each learner's server as their Unix user; ``jupyterhub_config.py``'s
spawner calls :func:`prepare` in the hub (as root) and :func:`enter` in the child before it drops to
the learner. Why not systemdspawner (its ``mem_limit``/``cpu_limit``/``isolate_tmp``): it needs
systemd as PID 1, which course containers (this one included) lack; cgroups and mount namespaces are
what it uses underneath, and both work here: cgroup v2, or v1 with one folder per controller.
Everything a learner's kernels, terminals and checks run sits in their group, so one learner's 3 GiB
allocation is killed at their own limit and the others keep running. ``/tmp``, ``/var/tmp`` and
``/dev/shm`` are fresh size-limited tmpfs per server (charged to the learner's memory), so no learner
reads another's Validate reports or pre-creates ``/tmp/torchinductor_<user>`` for them.
"""

from __future__ import annotations

import ctypes
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "effkit-cohort"
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 0x1000, 0x4000, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)  # loaded in the hub: the forked child only calls it


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 3072  # kernels, checks, terminals and /tmp together; torch + a BERT ~1.5 GB
    cpus: float = 1.0
    tmp_mb: int = 512  # each of /tmp, /var/tmp, /dev/shm (all charged to memory_mb)
    tasks: int = 2048  # processes + threads


def kind(root: Path = CGROUP_ROOT) -> str | None:
    """Which cgroup file system: "v2", "v1" (a folder per controller), or None when no cgroup file system can be written."""
    if (root / "cgroup.controllers").is_file():
        return "v2" if os.access(root, os.W_OK) else None
    if (root / "memory" / "memory.limit_in_bytes").is_file() and os.access(
        root / "memory", os.W_OK
    ):
        return "v1"
    return None


def _write(path: Path, value: str, said: list[str]) -> None:
    try:
        path.write_text(value)
    except OSError as err:
        said.append(f"{path.name}: {err.strerror}")


def prepare(user: str, limits: Limits, root: Path = CGROUP_ROOT) -> tuple[list[Path], list[str]]:
    """Make (or reuse) ``user``'s cgroup with the limits; returns its folders (the ones the child
    joins) and what could not be limited, one phrase each."""
    how, said, dirs = kind(root), [], []
    if how is None:
        return [], ["memory, CPU and tasks per learner (no writable cgroup file system)"]
    if how == "v2":
        group = root / PARENT / user
        group.mkdir(parents=True, exist_ok=True)
        # controllers reach a group only if every parent hands them down
        for parent in (root, root / PARENT):
            _write(parent / "cgroup.subtree_control", "+memory +cpu +pids", said)
        _write(group / "memory.max", str(limits.memory_mb << 20), said)
        _write(group / "memory.swap.max", "0", said)
        _write(group / "cpu.max", f"{int(limits.cpus * 100_000)} 100000", said)
        _write(group / "pids.max", str(limits.tasks), said)
        return [group], said
    for ctl in ("memory", "cpu", "pids"):
        group = root / ctl / PARENT / user
        try:
            group.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            said.append(f"{ctl} ({err.strerror})")
            continue
        dirs.append(group)
    for group in dirs:
        ctl = group.parent.parent.name
        if ctl == "memory":
            _write(group / "memory.limit_in_bytes", str(limits.memory_mb << 20), said)
            if (group / "memory.memsw.limit_in_bytes").exists():  # swap accounted: none either
                _write(group / "memory.memsw.limit_in_bytes", str(limits.memory_mb << 20), said)
        elif ctl == "cpu":
            _write(group / "cpu.cfs_period_us", "100000", said)
            _write(group / "cpu.cfs_quota_us", str(int(limits.cpus * 100_000)), said)
        else:
            _write(group / "pids.max", str(limits.tasks), said)
    return dirs, said


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def enter(dirs: list[Path], tmp_mb: int, keep: list[Path] = ()) -> None:
    """In the child, as root, before it becomes the learner: join the groups, then a mount
    namespace of its own whose ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are empty tmpfs. ``keep``:
    folders the server needs (the course, its venv) that stay in view where they lie under one of
    those (a clone in ``/tmp``, as CI makes). Raises (the server does not start) rather than run a
    learner unconfined."""
    for group in dirs:
        (group / "cgroup.procs").write_text(str(os.getpid()))
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # the host's mounts stay the host's: nothing mounted here propagates back
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    kept = _outermost(keep)
    for place in PRIVATE_TMP:
        if not os.path.isdir(place):
            continue
        # held open before the tmpfs hides them, bound back into it through /proc/self/fd
        held = [(k, os.open(k, os.O_PATH)) for k in kept if k.is_relative_to(place)]
        opts = f"size={tmp_mb}m,mode=1777".encode()
        _check(
            _libc.mount(b"tmpfs", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts),
            f"mount tmpfs on {place}",
        )
        for folder, fd in held:
            os.makedirs(folder, exist_ok=True)
            source = f"/proc/self/fd/{fd}".encode()
            _check(
                _libc.mount(source, str(folder).encode(), None, MS_BIND | MS_REC, None),
                f"bind {folder} back over the private {place}",
            )
            os.close(fd)


def _outermost(folders) -> list[Path]:
    """Existing ``folders``, resolved, without those inside another one of them."""
    real = sorted({Path(f).resolve() for f in folders if Path(f).is_dir()})
    return [f for f in real if not any(f != o and f.is_relative_to(o) for o in real)]


def remove(users: list[str], root: Path = CGROUP_ROOT) -> None:
    """The groups of ``users`` (empty once their processes ended), then the parent if empty."""
    bases = [root / PARENT] + [root / ctl / PARENT for ctl in ("memory", "cpu", "pids")]
    for base in bases:
        for user in users:
            for _ in range(250):  # killed processes leave their group once reaped: up to 5 s
                try:
                    (base / user).rmdir()
                    break
                except OSError as err:
                    if err.errno != errno.EBUSY:
                        break  # ENOENT: none made here
                    time.sleep(0.02)
        try:
            base.rmdir()
        except OSError:
            pass
