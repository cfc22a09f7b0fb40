"""Seal a sandbox's mount namespace: every mount read-only but the sandbox's own writable ones.

Read-only by default, so no place that outlives a grading stays writable. Standard library only
(``python -I -S``); exits non-zero when a mount cannot be sealed, so the worker never starts.
"""

import ctypes
import os
import re
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
# Per-mount flags a bind remount must restate or it clears them (mount(2), MS_REMOUNT | MS_BIND).
KEPT = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 1024,
    "nodiratime": 2048,
    "relatime": 1 << 21,
    "strictatime": 1 << 24,
    "nosymfollow": 256,
}
UNSEALED = ("/proc",)  # per PID namespace already; learner tools write /proc/self/* legitimately


def mounts() -> list[tuple[str, list[str]]]:
    """(mount point, per-mount options) of this namespace, in mount order."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split(" - ", 1)[0].split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            out.append((point, fields[5].split(",")))
    return out


def seal(writable: set[str]) -> list[str]:
    """Remount every mount but ``writable`` and ``UNSEALED`` read-only; returns what failed."""
    libc = ctypes.CDLL(None, use_errno=True)
    failed = []
    for point, options in mounts():
        if point in writable or any(point == u or point.startswith(u + "/") for u in UNSEALED):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in options:
            flags |= KEPT.get(option, 0)
        if libc.mount(b"none", point.encode(), None, flags, None) != 0:
            err = ctypes.get_errno()
            if err != 2:  # ENOENT: shadowed by a mount above it (the host's /tmp/...), unreachable
                failed.append(f"{point}: {os.strerror(err)}")
    return failed


if __name__ == "__main__":
    problems = seal(set(sys.argv[1:]))
    if problems:
        sys.exit("could not make read-only: " + "; ".join(problems))
