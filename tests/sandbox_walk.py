"""Run *inside* a sandbox (``sandbox.launch("tests.sandbox_walk", ...)``) by test_grader_sandbox.py.

``mark TOKEN SECONDS``: walk the whole filesystem (not /proc, /sys) and try to create a file in every
directory (``os.access`` alone misses nothing the kernel refuses, but the create attempt is what
counts); leave a file ``effkit-mark-TOKEN`` in each one that took it, a SysV shared-memory segment
message queue and semaphores keyed from TOKEN, a POSIX message queue; print one JSON line (each writable directory with the mount it
lies on), then stay alive SECONDS so that another sandbox can look for it.

``probe PID SECRET`` (TOKEN in ``$EFFKIT_TEST_TOKEN``: neither is in its own command line and
environment both): what this sandbox can see of another one started with ``mark TOKEN``
and ``SECRET`` in its environment (its host PID): its /proc entries, any process whose command line
names TOKEN, any environment holding SECRET, any file it marked, its SysV and POSIX IPC objects. One JSON line.
"""

import ctypes
import json
import os
import sys
import time
import zlib

SKIP = ("/proc", "/sys")


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount point, major:minor, fs type, options) of this process's mount namespace."""
    out = []
    for line in open("/proc/self/mountinfo"):
        left, right = line.split(" - ", 1)
        f, r = left.split(), right.split()
        point = f[4].encode().decode("unicode_escape")
        out.append((point, f[2], r[0], f[5] + "," + r[2]))
    return out


def _mount_of(path: str, mounts) -> tuple[str, str, str, str]:
    best = ("", "", "", "")
    for m in mounts:  # the last (topmost) of the longest matching mount points
        if (path == m[0] or path.startswith(m[0].rstrip("/") + "/")) and len(m[0]) >= len(best[0]):
            best = m
    return best


def _try_create(d: str, name: str, keep: bool) -> bool:
    try:
        fd = os.open(
            os.path.join(d, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644
        )
    except (
        FileExistsError
    ):  # marked already: the same directory reached by another path (a bind mount)
        return keep
    except OSError:
        return False
    os.close(fd)
    if not keep:
        os.unlink(os.path.join(d, name))
    return True


def every_dir():
    """Every directory below / but /proc and /sys, also those this process cannot list."""
    yield "/"
    for top, dirs, _ in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in SKIP]
        for d in dirs:  # os.walk never enters one it cannot list: it is still yielded here
            if not os.path.islink(os.path.join(top, d)):
                yield os.path.join(top, d)


def writable_dirs(token: str, keep: bool) -> list[str]:
    return [d for d in every_dir() if _try_create(d, f"effkit-mark-{token}", keep)]


def _key(token: str) -> int:
    return zlib.crc32(token.encode()) & 0x7FFFFFFF


def queue_name(token: str) -> bytes:
    return f"/effkit-{token[:16]}".encode()


def _sysv(token: str, create: bool) -> dict:
    """SysV shared memory, message queue and semaphores, and a POSIX message queue, for TOKEN."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = 0o1666 if create else 0o666  # IPC_CREAT | rw for all (another grading's nobody)
    mq_flags = os.O_RDWR | (os.O_CREAT if create else 0)
    return {
        "shm": libc.shmget(_key(token), 4096, flags) >= 0,
        "msg": libc.msgget(_key(token), flags) >= 0,
        "sem": libc.semget(_key(token), 1, flags) >= 0,
        "mq": libc.mq_open(queue_name(token), mq_flags, 0o666, None) >= 0,
    }


def mark(token: str, seconds: float) -> dict:
    mounts = _mounts()
    dirs = writable_dirs(token, keep=True)
    report = {
        "pid": os.getpid(),
        "sysv": _sysv(token, create=True),
        "writable": [[d, *_mount_of(d, mounts)] for d in dirs],
    }
    print(json.dumps(report), flush=True)
    time.sleep(seconds)
    return report


def _attempt(fn) -> str:
    try:
        fn()
        return "done"
    except OSError as err:
        return f"refused ({err.strerror})"


def probe(pid: int, token: str, secret: str) -> dict:
    seen, named, leaked = [], [], []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        seen.append(int(entry))
        try:
            if token.encode() in open(f"/proc/{entry}/cmdline", "rb").read():
                named.append(int(entry))
        except OSError:
            pass
        try:
            if secret.encode() in open(f"/proc/{entry}/environ", "rb").read():
                leaked.append(int(entry))
        except OSError:
            pass
    marks = [d for d in every_dir() if os.path.lexists(f"{d}/effkit-mark-{token}")]
    report = {
        "seen": sorted(seen),
        "named": named,
        "leaked": leaked,
        "marks": marks,
        "sysv": _sysv(token, create=False),
        "environ": _attempt(lambda: open(f"/proc/{pid}/environ", "rb").read()),
        "mem": _attempt(lambda: open(f"/proc/{pid}/mem", "rb").close()),
        "root": _attempt(lambda: os.listdir(f"/proc/{pid}/root/tmp")),
        "signal": _attempt(lambda: os.kill(pid, 0)),
    }
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    if sys.argv[1] == "mark":
        mark(sys.argv[2], float(sys.argv[3]))
    else:
        probe(int(sys.argv[2]), os.environ["EFFKIT_TEST_TOKEN"], sys.argv[3])
