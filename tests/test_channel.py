"""The grader's pipes carry weights of bert-base size in seconds, and many events in linear time.

The writer is a separate process, as a worker is (``benchmarks/channel_bench.py``). On main 8a3ab40
the parent grew an immutable ``bytes`` per pipe read: 55 MB took 11 s, 110 MB 43 s, and 440 MB
(bert-base in fp32) never arrived within a grading's 240 s (lesson 3 on an H200: 9/14).
"""

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from script_module import load

from grader.sandbox import channel, supervisor

ROOT = Path(__file__).resolve().parents[1]
BERT_BASE_BYTES = 440 * 10**6


def _bench():
    return load("benchmarks/channel_bench.py")


@pytest.mark.parametrize("reader", ["worker", "endpoint"])
def test_a_bert_base_sized_blob_crosses_in_under_ten_seconds(reader):
    # 30 s of deadline: the quadratic reader fails here by timing out, not by hanging the suite.
    seconds, ok = _bench().send(BERT_BASE_BYTES, reader, timeout_s=30)
    assert ok, "the bytes that arrived are not the bytes sent"
    assert seconds < 10, f"440 MB took {seconds:.1f} s"


EVENTS = r"""
import os, sys
out = os.fdopen(int(sys.argv[1]), "wb", buffering=0)
line = b'{"event": "step", "loss": 0.123456789, "pad": "' + b"x" * 60 + b'"}\n'
out.write(line * int(sys.argv[2]))
"""


def test_many_events_in_one_burst_are_read_in_linear_time():
    # 200,000 events (~20 MB) written at once into a pipe widened to 1 MiB, as the grader's are: a
    # reader that re-copies what is left after each line moves ~100 GB here; a linear one, 20 MB.
    n = 200_000
    r, w = os.pipe()
    fcntl.fcntl(r, 1031, 1 << 20)  # F_SETPIPE_SZ
    child = subprocess.Popen([sys.executable, "-c", EVENTS, str(w), str(n)], pass_fds=(w,))
    os.close(w)
    try:
        worker = supervisor.Worker("learner", None, r, -1, Path(os.devnull))
        t0 = time.perf_counter()
        for _ in range(n):
            event, _ = worker.event(30, "reporting its steps")
        seconds = time.perf_counter() - t0
    finally:
        child.kill()
        os.close(r)
    assert event["event"] == "step" and len(event["pad"]) == 60
    assert seconds < 15, f"{n} events took {seconds:.1f} s"


def test_a_line_without_end_is_refused_at_its_cap_and_a_short_blob_is_a_crash():
    r, w = os.pipe()
    os.write(w, b"x" * 4096)
    reader = channel.PipeReader(r)
    with pytest.raises(channel.ChannelError) as err:
        reader.line(time.monotonic() + 5, max_line=1024)
    assert err.value.kind == "protocol"
    os.write(w, b"\n" + b"ab")
    os.close(w)
    reader = channel.PipeReader(r)
    assert reader.line(time.monotonic() + 5) == b""  # the rest of the refused line was left unread
    with pytest.raises(channel.ChannelError) as err:
        reader.blob(5, time.monotonic() + 5)
    assert err.value.kind == "crash"
    os.close(r)


def test_a_blob_that_never_comes_times_out_on_the_deadline():
    r, w = os.pipe()
    worker = supervisor.Worker("learner", None, r, -1, Path(os.devnull))
    t0 = time.perf_counter()
    with pytest.raises(supervisor.WorkerFailed) as err:
        worker.blob(1000, 0.5, "sending the weights of run 1")
    assert err.value.kind == "timeout"
    assert time.perf_counter() - t0 < 3
    os.close(r)
    os.close(w)


def test_probe_blobs_arrive_as_bytes():
    # lesson 13 told raw bytes from arrays by isinstance(data, bytes): a bytearray blob was read as
    # floats and the reference's ONNX file arrived corrupted (2/10 under nbgrader)
    r, w = os.pipe()
    os.write(w, b'{"event": "x", "_blobs": [3]}\nabc')
    _, (blob,) = channel.Endpoint(r, -1).receive(5)
    assert type(blob) is bytes and blob == b"abc"
    os.close(r)
    os.close(w)


def _sealed_memfd(data: bytes, seals: int = supervisor.SEALS) -> int:
    fd = os.memfd_create("effkit-commit", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def test_a_commit_is_copied_only_from_a_sealed_memfd_of_the_announced_size(tmp_path):
    """The off-the-clock hand-over opens a descriptor of the worker's: anything but a memfd sealed
    against change, of exactly the announced size, is refused before a byte is read (a FIFO would
    block the parent, a device could act on open, an unsealed one could change while copied)."""
    data = os.urandom(3 << 20)
    fds = []
    try:
        fds.append(good := _sealed_memfd(data))
        assert bytes(supervisor.read_sealed_memfd(os.getpid(), good, len(data))) == data
        with pytest.raises(ValueError, match="holds"):
            supervisor.read_sealed_memfd(
                os.getpid(), good, len(data) + 1
            )  # announced size must match
        fds.append(loose := _sealed_memfd(data, seals=0))
        with pytest.raises(ValueError, match="not sealed"):
            supervisor.read_sealed_memfd(os.getpid(), loose, len(data))
        fds.append(shrinkable := _sealed_memfd(data, seals=fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW))
        with pytest.raises(ValueError, match="not sealed"):
            supervisor.read_sealed_memfd(os.getpid(), shrinkable, len(data))
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        fds.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        (tmp_path / "file").write_bytes(data)
        fds.append(os.open(tmp_path / "file", os.O_RDONLY))
        fds += os.pipe()
        fds.append(os.open("/dev/zero", os.O_RDONLY))
        for fd in fds[3:]:
            t0 = time.perf_counter()
            with pytest.raises(ValueError, match="not a memfd"):
                supervisor.read_sealed_memfd(os.getpid(), fd, len(data))
            assert time.perf_counter() - t0 < 5
    finally:
        for fd in fds:
            os.close(fd)


def test_a_worker_announcing_a_bad_descriptor_fails_its_grading_as_a_protocol_error():
    class Box:
        cgroup, pid = object(), os.getpid()

    w = supervisor.Worker.__new__(supervisor.Worker)
    w.role, w.box, w.stopped = "learner", Box(), True
    for event in (
        {"memfd": 0, "nbytes": 10},
        {"memfd": "3", "nbytes": 10},
        {"nbytes": 10},
        {"memfd": 1, "nbytes": supervisor.MAX_BLOB_BYTES + 1},
    ):
        with pytest.raises(supervisor.WorkerFailed) as err:
            w.commit(event, 1.0, "sending the weights")
        assert err.value.kind == "protocol"


def test_without_leave_to_read_the_workers_descriptors_commits_stay_on_the_pipe(monkeypatch):
    """Root without CAP_SYS_PTRACE (a default container) cannot open another uid's /proc/<pid>/fd:
    the grading then keeps the pipe, rather than failing every commit as the learner's fault."""

    class Box:
        cgroup, pid = object(), os.getpid()

    def refused(path):
        raise PermissionError(13, "Permission denied", path)

    w = supervisor.Worker.__new__(supervisor.Worker)
    w.role, w.box, w.memfd_ok = "learner", Box(), None
    monkeypatch.setattr(supervisor.os, "listdir", refused)
    assert w.uses_memfd() is False
    w.memfd_ok = None
    monkeypatch.undo()
    assert w.uses_memfd() is True
