"""Letting the cohort's accounts, and only them, pass through folders above the course's interpreter.

Learners' kernels run the course's Python, which may sit under a 0700 ``/root`` (pyenv). Opening
the folder to everyone (o+x) lets every account on the machine read world-readable files under it
by path, and taking that bit away under a running grading broke its workers. A POSIX ACL entry
``user:<learner>:--x`` per account opens it to the cohort alone; ``cohort down`` removes exactly those
entries (the accounts' processes have ended) and the folder's mode is as before. Written as the
kernel's ``system.posix_acl_access`` attribute, so no ``acl`` package is needed.
"""

from __future__ import annotations

import os
import stat
import struct

XATTR = "system.posix_acl_access"
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
NO_ID = 0xFFFFFFFF
TRAVERSE = 0o1


def _read(path: str) -> list[tuple[int, int, int]]:
    """(tag, perm, id) entries: the folder's ACL, or the three its mode stands for."""
    try:
        raw = os.getxattr(path, XATTR)
    except OSError:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        return [
            (USER_OBJ, mode >> 6 & 7, NO_ID),
            (GROUP_OBJ, mode >> 3 & 7, NO_ID),
            (OTHER, mode & 7, NO_ID),
        ]
    return [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]


def _write(path: str, entries: list[tuple[int, int, int]]) -> None:
    named = [e for e in entries if e[0] in (USER, GROUP)]
    base = [e for e in entries if e[0] not in (USER, GROUP, MASK)]
    if named:  # the mask caps every named entry and the owning group: their union
        group = next(p for t, p, _ in base if t == GROUP_OBJ)
        mask = group
        for _, perm, _ in named:
            mask |= perm
        base.append((MASK, mask, NO_ID))
    entries = sorted(base + named, key=lambda e: (e[0], e[2]))
    os.setxattr(
        path, XATTR, struct.pack("<I", VERSION) + b"".join(struct.pack("<HHI", *e) for e in entries)
    )


LIST = 0o4


def open_to(path: str, uids: list[int], perm: int = TRAVERSE) -> None:
    """Add ``user:<uid>:--x`` (or ``perm``) for each uid (kept entries' permissions only gain)."""
    entries = _read(path)
    have = {i: n for n, (t, _, i) in enumerate(entries) if t == USER}
    for uid in uids:
        if uid in have:
            t, kept, i = entries[have[uid]]
            entries[have[uid]] = (t, kept | perm, i)
        else:
            entries.append((USER, perm, uid))
    _write(path, entries)


def close_to(path: str, uids: list[int], mode: int) -> None:
    """Remove the uids' entries; with no named entry left the ACL goes and ``mode`` comes back
    (an ACL's mask shows as the group bits, so the mode is put back by hand)."""
    entries = [e for e in _read(path) if not (e[0] == USER and e[2] in uids)]
    if any(t in (USER, GROUP) for t, _, _ in entries):
        _write(path, entries)
        return
    try:
        os.removexattr(path, XATTR)
    except OSError:
        pass
    os.chmod(path, mode)


def traverses(path: str, uid: int) -> bool:
    """Whether the ACL lets ``uid`` pass (an entry of its own, within the mask)."""
    entries = _read(path)
    mask = next((p for t, p, _ in entries if t == MASK), 7)
    return any(t == USER and i == uid and p & mask & TRAVERSE for t, p, i in entries)
