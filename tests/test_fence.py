"""grader/sandbox/fence.py: a fenced process opens internet sockets (and gloo's NETLINK_ROUTE) and nothing that
reaches another process of its network namespace, uid or file system without a counted byte."""

import os
import subprocess
import sys

import pytest

from grader.sandbox import fence

# what both probes do with a refused call: its errno, or "ok"
HELPERS = r"""
libc = ctypes.CDLL(None, use_errno=True)
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as err:
        return err.errno
def syscall(*args):
    if libc.syscall(*args) == -1:
        raise OSError(ctypes.get_errno(), "")
"""

PROBE = (
    r"""
import ctypes, fcntl, json, os, socket, sys, threading
early = socket.socket(socket.AF_INET)  # made before: still usable
from grader.sandbox import fence
print(fence.install(), file=sys.stderr)
"""
    + HELPERS
    + r"""
nr = {"x86_64": {"keyctl": 250, "add_key": 248, "io_uring_setup": 425},
      "aarch64": {"keyctl": 219, "add_key": 217, "io_uring_setup": 425}}[os.uname().machine]
f = open(sys.executable, "rb")
got = {
    "inet": attempt(lambda: socket.socket(socket.AF_INET).close()),
    "inet6": attempt(lambda: socket.socket(socket.AF_INET6).close()),
    "netlink_route": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()),
    "netlink_usersock": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 2)),
    "unix": attempt(lambda: socket.socket(socket.AF_UNIX)),
    "unix_dgram": attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)),
    "socketpair": attempt(socket.socketpair),
    "flock": attempt(lambda: fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)),
    "posix_lock": attempt(lambda: fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB)),
    "getfl": attempt(lambda: fcntl.fcntl(f, fcntl.F_GETFL)),
    "keyctl": attempt(lambda: syscall(nr["keyctl"], 0, -4, 0)),  # KEYCTL_GET_KEYRING_ID, @u
    "add_key": attempt(lambda: syscall(nr["add_key"], b"user", b"side", b"x", 1, -4)),
    "io_uring": attempt(lambda: syscall(nr["io_uring_setup"], 1, ctypes.create_string_buffer(120))),
    "early": attempt(lambda: early.close()),
}
box = {}
t = threading.Thread(target=lambda: box.update(thread=attempt(lambda: socket.socket(socket.AF_UNIX))))
t.start(); t.join()
got["thread"] = box["thread"]
got["child"] = subprocess_rc = __import__("subprocess").run(
    [sys.executable, "-c", "import socket; socket.socket(socket.AF_UNIX)"], capture_output=True).returncode
print(json.dumps(got))
"""
)


@pytest.mark.skipif(not fence.supported(), reason="no filter for this machine's ABI")
def test_a_fenced_process_opens_only_internet_sockets_and_no_other_channel():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = __import__("json").loads(done.stdout.splitlines()[-1])
    allowed = {"inet", "inet6", "netlink_route", "getfl", "early"}
    assert {k for k, v in got.items() if v == "ok"} == allowed, got
    assert all(got[k] == 1 for k in got if k not in allowed | {"child"}), got  # EPERM, not a crash
    assert got["child"] != 0, "a child process escaped the fence"


BASE_PROBE = (
    r"""
import ctypes, json, os, socket, sys
from grader.sandbox import fence
print(fence.install(ranks=False), file=sys.stderr)
"""
    + HELPERS
    + r"""
nr = {"x86_64": {"keyctl": 250, "add_key": 248, "io_uring_setup": 425, "bpf": 321, "perf_event_open": 298},
      "aarch64": {"keyctl": 219, "add_key": 217, "io_uring_setup": 425, "bpf": 280, "perf_event_open": 241}}[
    os.uname().machine]
import threading
pinned = os.sched_getaffinity(0)
thread_pin = []
pinner = threading.Thread(target=lambda: thread_pin.append(attempt(lambda: os.sched_setaffinity(0, pinned))))
pinner.start()
pinner.join()
got = {
    "keyctl": attempt(lambda: syscall(nr["keyctl"], 0, -4, 0)),
    "add_key": attempt(lambda: syscall(nr["add_key"], b"user", b"side", b"x", 1, -4)),
    "io_uring": attempt(lambda: syscall(nr["io_uring_setup"], 1, ctypes.create_string_buffer(120))),
    "bpf": attempt(lambda: syscall(nr["bpf"], 0, 0, 0)),
    "perf_event_open": attempt(lambda: syscall(nr["perf_event_open"], 0, 0, -1, -1, 0)),
    "unix": attempt(lambda: socket.socket(socket.AF_UNIX).close()),
    "socketpair": attempt(lambda: [s.close() for s in socket.socketpair()]),
    "read": attempt(lambda: open(sys.executable, "rb").read(16)),
    # the same set it has: harmless, yet refused, as a wider one would be (one core is all a CI host may have)
    "repin": attempt(lambda: os.sched_setaffinity(0, pinned)),
    "repin_child": attempt(lambda: os.sched_setaffinity(__import__("subprocess").Popen(["sleep", "5"]).pid, pinned)),
    "getaffinity": attempt(lambda: os.sched_getaffinity(0)),
}
got["repin_thread"] = thread_pin[0] if thread_pin else "none"
print(json.dumps(got))
"""
)


@pytest.mark.skipif(not fence.supported(), reason="no filter for this machine's ABI")
def test_every_worker_is_refused_the_kernel_objects_gradings_would_share():
    """Keyrings are per uid and every grading's worker is `nobody`: a second grading read the key the
    first wrote. Every worker's fence refuses keyrings, io_uring, bpf and perf events (EPERM), and
    changing any CPU affinity (its own, a thread's, a child's: a timed worker widened onto the idle
    core would time two cores against one), and leaves everything else to the sandbox (lesson 11's
    ranks add their own filter on top)."""
    done = subprocess.run(
        [sys.executable, "-c", BASE_PROBE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    got = __import__("json").loads(done.stdout.splitlines()[-1])
    refused = {
        "keyctl",
        "add_key",
        "io_uring",
        "bpf",
        "perf_event_open",
        "repin",
        "repin_child",
        "repin_thread",
    }
    assert {k for k in got if got[k] == 1} == refused, got  # EPERM, not a crash
    os.sched_setaffinity(
        0, os.sched_getaffinity(0)
    )  # unfenced, the same call works: the refusal is the fence's
    assert all(got[k] == "ok" for k in got if k not in refused), got
