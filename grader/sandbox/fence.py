"""Seccomp filters for learner workers: kernel objects shared across gradings closed in every worker, the
CPU placement the grader chose fixed, and for lesson 11's ranks only internet sockets, no channel the grader
does not count.

`install(ranks=False)`, in every worker before learner code: keyrings (per uid, not namespaced: every
grading's worker is `nobody`), io_uring, bpf, perf_event_open and userfaultfd refused, as Docker's default
profile does, and sched_setaffinity: a timed worker is pinned to the cores its timing allows, and a learner
who widened the pin onto an idle core (the baseline's, while the baseline is paused) would time two cores
against one. `install(ranks=True)` adds lesson 11's: unix sockets, socketpair, locks, mincore, cachestat.
Unsupported architectures fail closed.
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
            "sched_setaffinity": 203,
            "perf_event_open": 298,
            "bpf": 321,
            "userfaultfd": 323,
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
            "sched_setaffinity": 122,
            "perf_event_open": 241,
            "bpf": 280,
            "userfaultfd": 282,
        },
    ),
}
_COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "cachestat": 451}
AF_INET, AF_INET6, AF_NETLINK, NETLINK_ROUTE = 2, 10, 16, 0
# fcntl's lock commands: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW
LOCK_CMDS = (5, 6, 7, 36, 37, 38)
# kernel objects one grading could share with another (a covert channel, a cache between learners) or use to
# reach the kernel's attack surface: refused in every learner worker
SHARED_KERNEL = (
    "add_key",
    "request_key",
    "keyctl",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
)
# the cores the grader pinned a worker to are the cores its timing counts: no learner code moves them
# (no cpuset cgroup is assumed; pthread_setaffinity_np is this call too). EPERM, as for the others.
PLACEMENT = ("sched_setaffinity",)
DENIED = ("socketpair", "flock", "mincore", "cachestat", *SHARED_KERNEL, *PLACEMENT)

_LD_W_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = (
    0,
    4,
    16,
    24,
    32,
)  # offsets in struct seccomp_data (little endian: low words)


def _number(nr: dict[str, int], name: str) -> int:
    return nr[name] if name in nr else _COMMON[name]


def _base_program(arch: int, nr: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """Every worker's filter: SHARED_KERNEL and PLACEMENT refused, everything else allowed, foreign ABIs refused."""
    deny = (_RET, 0, 0, _ERRNO | errno.EPERM)
    allow = (_RET, 0, 0, _ALLOW)
    numbers = [_number(nr, name) for name in (*SHARED_KERNEL, *PLACEMENT)]
    # each test jumps over the ones after it and the allow, to the deny
    dispatch = [(_JEQ, len(numbers) - i, 0, n) for i, n in enumerate(numbers)]
    return _head(arch) + dispatch + [allow, deny]


def _head(arch: int) -> list[tuple[int, int, int, int]]:
    deny = (_RET, 0, 0, _ERRNO | errno.EPERM)
    head = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ, 1, 0, arch), deny, (_LD_W_ABS, 0, 0, _NR)]
    if arch == _ABI["x86_64"][0]:
        head += [(_JGE, 0, 1, 0x40000000), deny]  # x32 numbers: the same calls by another door
    return head


def _program(arch: int, nr: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """Lesson 11's filter as (code, jt, jf, k); jumps are relative, so it is built back to front."""
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
    numbers = [_number(nr, name) for name in DENIED]
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
    return _head(arch) + out + tail


def supported() -> bool:
    """Whether this machine's ABI has a filter here (the parent asks too: its answer is its own)."""
    return platform.machine() in _ABI


def install(ranks: bool = True) -> str | None:
    """Fence this process (every thread) in: lesson 11's ranks' filter, or with ``ranks=False`` every
    worker's (SHARED_KERNEL); None when done, else why not (nothing installed)."""
    machine = platform.machine()
    if machine not in _ABI:
        return f"no seccomp fence for {machine}: keyrings, io_uring, bpf and (lesson 11) unix sockets are not refused"
    arch, nr = _ABI[machine]
    prog = _program(arch, nr) if ranks else _base_program(arch, nr)
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
