"""Gradings sealed from the host and from each other (issue 41, classes 2 and 3).

A real sandbox (``sandbox.launch``) runs ``tests/sandbox_walk.py``, which walks the whole filesystem
from inside and tries to create a file in every directory: each one that takes it must be a
size-limited tmpfs of that sandbox (or the grading's own state folder), and what was written there
must be gone once the sandbox is closed. Two sandboxes at once must not see each other's processes,
environments, memory, root, files or IPC objects (SysV, POSIX queues). Needs root; elsewhere the report lists these
protections as unavailable (``test_grader_sandbox.py``).
"""

import ctypes
import json
import os
import subprocess
import time
import uuid
import zlib
from pathlib import Path

import pytest
from sandbox_walk import queue_name  # tests/ is on sys.path

from grader.sandbox import learner_view
from grader.sandbox.launch import STATE_AT, StateFolder, is_root, launch

IPC = ("shm", "msg", "sem", "mq")  # SysV shared memory, queues, semaphores; a POSIX message queue
pytestmark = pytest.mark.skipif(not is_root(), reason="needs root: reported as unavailable instead")


@pytest.fixture(autouse=True)
def _walker_in_the_view(monkeypatch):
    """The walker runs as a learner's worker would, so it must be in the repository view such a
    worker gets (grader.sandbox.learner_view), like a worker-side module: nothing else of tests/ is."""
    monkeypatch.setattr(
        learner_view, "WORKER_MODULES", (*learner_view.WORKER_MODULES, "tests.sandbox_walk")
    )


def _walker(tmp_path: Path, name: str, args: list[str], **kw):
    log = tmp_path / f"{name}.log"
    return launch("tests.sandbox_walk", args, pass_fds=(), log_path=log, **kw), log


def _report(box, log: Path, timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                return json.loads(line)
        if box.proc.poll() is not None and box.members() == []:
            break
        time.sleep(0.1)
    pytest.fail(f"no report from the sandboxed walk:\n{log.read_text(errors='replace')[-3000:]}")


def _host_devices() -> set[str]:
    """major:minor of every filesystem mounted in the grader's (host) mount namespace."""
    return {line.split()[2] for line in open("/proc/self/mountinfo")}


def _dev(path: Path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def _ipc_left(token: str) -> list[str]:
    """The IPC objects a walk with ``token`` made that exist in the grader's IPC namespace."""
    key = str(zlib.crc32(token.encode()) & 0x7FFFFFFF)
    left = []
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as f:
            left += [kind for line in f.readlines()[1:] if line.split()[0] == key]
    libc = ctypes.CDLL(None, use_errno=True)
    mq = libc.mq_open(queue_name(token), os.O_RDONLY, 0, None)
    if mq >= 0:
        libc.mq_close(mq)
        left.append("mq")
    return left


def _clean_host(token: str, dirs) -> None:
    """Undo what a walk could leave on the host when the seal is broken (the test failing)."""
    for d in dirs:
        with_mark = Path(d) / f"effkit-mark-{token}"
        if with_mark.is_file() and not with_mark.is_symlink():
            with_mark.unlink()
    key = str(zlib.crc32(token.encode()) & 0x7FFFFFFF)
    subprocess.run(["ipcrm", "-M", key, "-Q", key, "-S", key], capture_output=True)
    ctypes.CDLL(None).mq_unlink(queue_name(token))


def test_every_place_a_worker_can_write_is_its_own_bounded_tmpfs_and_gone_after_close(tmp_path):
    """Lesson 2 was graded 12/12 at 102x from weights an earlier grading left in /var/tmp, and
    600 MB were left behind by another: the host's sticky folders (/var/tmp, /run/lock, ...) were
    writable by ``nobody`` and outlived every grading. SysV IPC objects outlive their creator too."""
    token = uuid.uuid4().hex
    state = StateFolder(size_mb=1)  # lesson 6's folder: the grading's own, mounted by the grader
    writable: list = []
    try:
        box, log = _walker(tmp_path, "walk", ["mark", token, "0"], state_dir=state.path)
        try:
            report = _report(box, log)
            writable = report["writable"]
            box.proc.wait(timeout=60)
        finally:
            box.close()
        found = {w[0]: w for w in writable}
        assert "/tmp/work" in found and STATE_AT in found, sorted(found)  # the walk does find them
        host, state_dev = _host_devices(), _dev(state.path)
        shared = [
            w
            for w in writable
            if w[3] != "tmpfs"
            or "size=" not in w[4]  # a tmpfs with a size limit ...
            or (w[2] in host and not (w[2] == state_dev and w[0].startswith(STATE_AT)))
        ]  # ... not the host's
        assert shared == [], f"writable and not the sandbox's own: {[w[:4] for w in shared]}"
        left = [w[0] for w in writable if os.path.lexists(Path(w[0]) / f"effkit-mark-{token}")]
        assert left == [], f"outlived the sandbox: {left}"
        assert _ipc_left(token) == [], "IPC objects outlived the sandbox"
        assert report["sysv"] == dict.fromkeys(IPC, True)  # made inside, so the check can fail
    finally:
        _clean_host(token, [w[0] for w in writable])
        state.close()


def test_two_gradings_at_once_cannot_see_or_touch_each_other(tmp_path):
    """A worker saw the workers of another grading running at the same time (same ``nobody`` uid,
    one PID namespace) and could read their environment, open their memory, enter their root."""
    token, secret = uuid.uuid4().hex, uuid.uuid4().hex
    other, other_log = _walker(
        tmp_path, "other", ["mark", token, "120"], env_extra={"EFFKIT_TEST_SECRET": secret}
    )
    marked: list = []
    try:
        marked = [w[0] for w in _report(other, other_log)["writable"]]
        me, log = _walker(
            tmp_path,
            "me",
            ["probe", str(other.pid), secret],
            env_extra={"EFFKIT_TEST_TOKEN": token},
        )
        try:
            seen = _report(me, log)
        finally:
            me.close()
        assert other.proc.poll() is None  # the other grading was alive the whole time
        assert other.pid not in seen["seen"] and seen["named"] == [], seen
        assert seen["leaked"] == [], f"the other grading's environment was readable: {seen}"
        assert all(seen[k].startswith("refused") for k in ("environ", "mem", "root", "signal")), (
            seen
        )
        assert seen["marks"] == [], f"a file the other grading wrote: {seen['marks']}"
        assert seen["sysv"] == dict.fromkeys(IPC, False), (
            f"the other grading's IPC objects: {seen['sysv']}"
        )
    finally:
        other.close()
        _clean_host(token, marked)
