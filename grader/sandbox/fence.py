"""A seccomp filter for lesson 11's rank workers: only internet sockets, no channel the grader does not count.

Ranks must share no channel the grader does not see; this closes unix sockets, keyrings, locks and
the like. Installed before any learner cell runs; unsupported architectures fail closed.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# (audit arch, {name: number}) of the ABIs filtered; numbers from the kernel's syscall tables.
_ABI = {
    "x86_64": (
        0xC000003E,
        {
            "socket": 41,
            "socketpair": 53,
            "fcntl": 72,
            "flock": 73,
            "mincore": 27,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "seccomp": 317,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198,
            "socketpair": 199,
            "fcntl": 25,
            "flock": 32,
            "mincore": 232,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "seccomp": 277,
        },
    ),
}
_COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "cachestat": 451}
AF_INET, AF_INET6, AF_NETLINK, NETLINK_ROUTE = 2, 10, 16, 0
# fcntl's lock commands: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW
LOCK_CMDS = (5, 6, 7, 36, 37, 38)
DENIED = ("socketpair", "flock", "mincore", "add_key", "request_key", "keyctl", *_COMMON)

_LD_W_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = (
    0,
    4,
    16,
    24,
    32,
)  # offsets in struct seccomp_data (little endian: low words)


def _program(arch: int, nr: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k); jumps are relative, so it is built back to front."""
    deny = (_RET, 0, 0, _ERRNO | errno.EPERM)
    allow = (_RET, 0, 0, _ALLOW)
    # socket: AF_INET / AF_INET6, and AF_NETLINK for NETLINK_ROUTE only (gloo's getifaddrs; an
    # unprivileged NETLINK_ROUTE socket may talk to the kernel only, never to another process's port)
    sock = [
        (_LD_W_ABS, 0, 0, _ARG0),
        (_JEQ, 5, 0, AF_INET),
        (_JEQ, 4, 0, AF_INET6),
        (_JEQ, 0, 2, AF_NETLINK),
        (_LD_W_ABS, 0, 0, _ARG2),
        (_JEQ, 1, 0, NETLINK_ROUTE),
        deny,
        allow,
    ]
    # fcntl: the lock commands denied, every other command allowed
    lock = [(_LD_W_ABS, 0, 0, _ARG1)]
    lock += [(_JEQ, len(LOCK_CMDS) - i, 0, cmd) for i, cmd in enumerate(LOCK_CMDS)] + [allow, deny]
    numbers = [nr[name] if name in nr else _COMMON[name] for name in DENIED]
    # after the dispatch: [allow][deny][fcntl block][socket block]
    tail = [allow, deny, *lock, *sock]
    dispatch = [(_JEQ, 0, 0, nr["socket"]), (_JEQ, 0, 0, nr["fcntl"])] + [
        (_JEQ, 0, 0, n) for n in numbers
    ]
    n = len(dispatch)
    out = []
    for i, (code, _, _, k) in enumerate(dispatch):
        ahead = n - 1 - i  # instructions between this one and the tail
        if i == 0:
            target = ahead + 2 + len(lock)  # the socket block
        elif i == 1:
            target = ahead + 2  # the fcntl block
        else:
            target = ahead + 1  # deny
        out.append((code, target, 0, k))
    head = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ, 1, 0, arch), deny, (_LD_W_ABS, 0, 0, _NR)]
    if arch == _ABI["x86_64"][0]:
        head += [(_JGE, 0, 1, 0x40000000), deny]  # x32 numbers: the same calls by another door
    return head + out + tail


def supported() -> bool:
    """Whether this machine's ABI has a filter here (the parent asks too: its answer is its own)."""
    return platform.machine() in _ABI


def install() -> str | None:
    """Fence this process (every thread) in; None when done, else why not (nothing installed)."""
    machine = platform.machine()
    if machine not in _ABI:
        return f"no seccomp fence for {machine}: the ranks' unix sockets and locks are not refused"
    arch, nr = _ABI[machine]
    prog = _program(arch, nr)
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if (
        libc.prctl(38, 1, 0, 0, 0) != 0
    ):  # PR_SET_NO_NEW_PRIVS: required to filter without CAP_SYS_ADMIN
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {errno.errorcode.get(ctypes.get_errno())}"
    libc.syscall.restype = ctypes.c_long
    got = libc.syscall(
        nr["seccomp"], 1, 1, ctypes.byref(fprog)
    )  # SET_MODE_FILTER, FILTER_FLAG_TSYNC
    if got != 0:
        return f"seccomp(SET_MODE_FILTER, TSYNC) failed: {got} {errno.errorcode.get(ctypes.get_errno())}"
    return None
