"""Supervising worker processes: start them fresh, talk over pipes, stop and kill their groups.

The parent never blocks forever on learner code, and an idle worker is frozen. ``perf_counter`` is
captured at import: import this module only where no learner code has run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.sandbox.channel import ChannelError, PipeReader, widen
from grader.sandbox.commit import SEALS
from grader.sandbox.launch import Limits, launch, learner_env

if TYPE_CHECKING:
    from grader.sandbox.box import Sandbox

_clock = time.perf_counter  # captured at import; this process never runs learner code
REPO_ROOT = Path(__file__).resolve().parents[2]
PRIORITY_NICE = -10  # for the measured processes, when permitted (see boost_priority)
MAX_BLOB_BYTES = 2 << 30  # weights a worker may send back (bert-base in fp32 is ~440 MB)
MAX_EVENT_BYTES = 16 << 20  # one JSON event line (error events carry a traceback)


class WorkerFailed(RuntimeError):
    """A worker reported an error, crashed, or timed out; ``message`` is for the learner."""

    def __init__(self, message: str, kind: str = "error", detail: str = "", role: str = ""):
        super().__init__(message)
        self.kind, self.detail, self.role = kind, detail, role


@dataclass
class Worker:
    """A timed worker: its sandbox (:class:`grader.sandbox.box.Sandbox`: process, cgroup, what the
    machine could not give) and the two pipes the parent opened. Stopping, resuming, finding
    escaped processes and killing are the sandbox's; the worker adds the channel and a graceful exit."""

    role: str  # "baseline" or "learner"
    box: Sandbox
    evt_fd: int
    cmd_fd: int
    log_path: Path
    stopped: bool = False
    closed: bool = False
    memfd_ok: bool | None = None  # uses_memfd's answer, probed once

    def __post_init__(self) -> None:
        self.reader = PipeReader(self.evt_fd, clock=_clock)

    @property
    def proc(self) -> subprocess.Popen:
        return self.box.proc

    @property
    def unavailable(self) -> list[str]:
        return self.box.unavailable

    def escaped(self) -> list[int]:
        """Descendants that nothing would stop (none with a cgroup: the freezer holds them all)."""
        return self.box.escaped()

    def send(self, **cmd) -> float:
        self.resume()
        data = (json.dumps(cmd) + "\n").encode()
        t = _clock()
        os.write(self.cmd_fd, data)
        return t

    def _read(self, what: str, timeout_s: float, read):
        """``read(deadline)`` on the event pipe, its failures told as the learner should read them."""
        try:
            return read(_clock() + timeout_s)
        except ChannelError as err:
            if err.kind == "timeout":
                raise WorkerFailed(
                    f"the {self.role} did not finish {what} within {timeout_s:.0f} s "
                    f"(an infinite loop, or far slower than the baseline); stopped it",
                    kind="timeout",
                    role=self.role,
                ) from None
            if err.kind == "crash":
                code = self.proc.wait(timeout=10)
                raise WorkerFailed(
                    f"the {self.role} process died during {what} (exit code {code}); "
                    f"last output:\n{self.log_tail()}",
                    kind="crash",
                    role=self.role,
                ) from None
            raise WorkerFailed(
                f"the {self.role} process broke the grader's pipe: {err}",
                kind="protocol",
                role=self.role,
            ) from None

    def blob(self, n: object, timeout_s: float, what: str) -> bytearray:
        """The ``n`` raw bytes that follow an event on the pipe (the worker's weights)."""
        if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= MAX_BLOB_BYTES:
            raise WorkerFailed(
                f"the {self.role} announced {n!r} bytes of weights (at most "
                f"{MAX_BLOB_BYTES >> 20} MiB): refused",
                kind="protocol",
                role=self.role,
            )
        return self._read(what, timeout_s, lambda deadline: self.reader.blob(n, deadline))

    def uses_memfd(self) -> bool:
        """Commits through a sealed memfd need the freezer (the parent reads the worker's fd table
        while nothing in the worker runs) and leave to read that table: root without
        CAP_SYS_PTRACE (a default container) may not open another uid's /proc/<pid>/fd."""
        if self.memfd_ok is None:
            self.memfd_ok = (
                hasattr(os, "memfd_create") and getattr(self.box, "cgroup", None) is not None
            )
            try:
                self.memfd_ok = self.memfd_ok and os.listdir(f"/proc/{self.box.pid}/fd") is not None
            except OSError:
                self.memfd_ok = False
        return self.memfd_ok

    def commit(self, event: dict, timeout_s: float, what: str) -> bytearray:
        """The training state an event announced: from the worker's sealed memfd (the worker is
        frozen first: the copy is off the clock) or the bytes after it on the pipe."""
        if (
            not self.uses_memfd()
        ):  # what the parent asked for (grader.timed.protocol), whatever the event says
            return self.blob(event.get("nbytes"), timeout_s, what)
        self.pause()
        n, fd_no = event.get("nbytes"), event.get("memfd")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, fd_no)) or not (
            0 < n <= MAX_BLOB_BYTES and 0 <= fd_no < 1 << 20
        ):
            raise WorkerFailed(
                f"the {self.role} announced {n!r} bytes of weights in descriptor {fd_no!r} "
                f"(at most {MAX_BLOB_BYTES >> 20} MiB): refused",
                kind="protocol",
                role=self.role,
            )
        try:
            return read_sealed_memfd(self.box.pid, fd_no, n)
        except (OSError, ValueError) as err:
            raise WorkerFailed(
                f"the {self.role} did not hand over {what} as the grader asked ({err})",
                kind="protocol",
                role=self.role,
            ) from None

    def event(self, timeout_s: float, what: str) -> tuple[dict, float]:
        """Next JSON event and the parent's clock when it arrived."""
        line = self._read(
            what, timeout_s, lambda deadline: self.reader.line(deadline, max_line=MAX_EVENT_BYTES)
        )
        t = _clock()
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):  # learner code wrote to the grader's pipe
            raise WorkerFailed(
                f"the {self.role} process sent garbage on the grader's pipe: {line[:80]!r}",
                kind="protocol",
                role=self.role,
            )
        if event.get("event") == "error":
            raise WorkerFailed(
                event.get("message", "error"),
                kind=event.get("kind", "error"),
                detail=event.get("traceback", ""),
                role=self.role,
            )
        return event, t

    def expect(self, name: str, timeout_s: float, what: str) -> tuple[dict, float]:
        while True:
            event, t = self.event(timeout_s, what)
            if event.get("event") == name:
                return event, t

    def pause(self) -> None:
        if not self.stopped and self.proc.poll() is None:
            self.box.pause()
            self.stopped = True

    def resume(self) -> None:
        if self.stopped and self.proc.poll() is None:
            self.box.resume()
        self.stopped = False

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.proc.poll() is None:
                self.resume()
                try:
                    os.write(self.cmd_fd, b'{"cmd": "exit"}\n')
                    self.proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
        finally:
            self.box.close()  # every member killed (also those that left the group), cgroup removed
            for fd in (self.evt_fd, self.cmd_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass


def start_worker(
    role: str, workdir: Path, config: dict, cpu_cores: int | None = None, inputs: Path | None = None
) -> Worker:
    """A fresh ``python -m grader.sandbox.worker`` in the sandbox (:func:`grader.sandbox.launch.launch`): its own
    session and cgroup, a private empty working directory, no network, an unprivileged user where
    the grader is root, and of the parent's files only ``inputs`` (read-only). Its weights come
    back over its event pipe (:meth:`Worker.blob`), never through a file it could redirect.

    ``cpu_cores``: pin the worker, and the DataLoader processes it will fork, to that many cores
    with as many OpenMP threads. On a 2-core machine that makes a timing independent of what runs
    on the other core, and removes OpenMP barrier stalls altogether (one thread); the naive
    pipeline's workers then share the training's core, so the per-sample transforms cost what they
    cost instead of hiding behind spare cores a GPU host would spend on feeding the GPU."""
    evt_r, evt_w = os.pipe()
    cmd_r, cmd_w = os.pipe()
    widen(evt_r)  # weights come back this way: 1 MiB a read
    log_path = workdir / f"{role}.log"
    # OpenMP threads that spin at barriers collapse when another process takes one of their cores:
    # on this 2-core machine with 3-4 other jobs, a training step ran 3x slower with the default
    # policy than with PASSIVE (threads sleep at barriers), and both recipes slowed alike, which
    # squeezed a correct solution's speedup to ~1.0x. Both workers get the same setting. An empty
    # EFFKIT_DATA sends effkit's caches (the BERT tokenizer) to the worker's private home.
    env = learner_env()  # the learner's worker gets it anyway: the baseline runs as it does
    cores = None
    if cpu_cores and hasattr(os, "sched_getaffinity"):
        cores = sorted(os.sched_getaffinity(0))[
            -cpu_cores:
        ]  # the last cores: away from core 0's IRQs
        env["OMP_NUM_THREADS"] = str(len(cores))
    # A commit's memfd is one file of up to MAX_BLOB_BYTES (RLIMIT_FSIZE counts it); every place a
    # worker can write is a size-limited tmpfs and memory is its cgroup's: the larger cap adds no room.
    limits = Limits(memory_mb=8192, pids=256, file_mb=MAX_BLOB_BYTES >> 20)  # file_mb: the default
    try:
        box = launch(
            "grader.sandbox.worker",
            [json.dumps(config), str(evt_w), str(cmd_r)],
            pass_fds=(evt_w, cmd_r),
            limits=limits,
            log_path=log_path,
            env_extra=env,
            cores=cores,
            expose=inputs,
            grader_only=role == "baseline",
            # the lesson's answers withheld as in its probe worker: the same view of effkit in both
            lesson=None if role == "baseline" else config["assignment_module"].split(".")[-2],
        )
    finally:
        os.close(evt_w)
        os.close(cmd_r)
    boost_priority(box.pid)
    return Worker(role, box, evt_r, cmd_w, log_path)


@contextlib.contextmanager
def boosted_self(nice: int = PRIORITY_NICE):
    """The grading process itself (data, evaluation) at the workers' priority, then restored."""
    old_nice = os.getpriority(os.PRIO_PROCESS, 0)
    group = Path("/proc/self/autogroup")
    try:
        old_group = group.read_text().split("nice")[-1].strip()
    except OSError:
        old_group = None
    changed = boost_priority(os.getpid(), nice, whole_group=False)
    try:
        yield changed
    finally:
        if changed:
            try:
                os.setpriority(os.PRIO_PROCESS, 0, old_nice)
                if old_group is not None:
                    group.write_text(old_group)
            except OSError:
                pass


def boost_priority(pid: int, nice: int = PRIORITY_NICE, whole_group: bool = True) -> bool:
    """Give a worker's session a higher CPU priority when we may (root or CAP_SYS_NICE).

    Both workers get the same boost, so the comparison stays fair; it makes other load on a shared
    machine matter less. Why it matters: the learner's pipeline typically runs as one process whose
    2 OpenMP threads stall at every barrier when one of them is preempted, while the baseline's
    DataLoader workers are independent processes - so contention alone shrinks the measured
    speedup. Linux's autogroup scheduling weighs *sessions* (each worker has its own), hence the
    autogroup nice; the plain nice covers kernels without autogroup. Returns whether it worked.
    """
    ok = False
    try:
        os.setpriority(os.PRIO_PGRP if whole_group else os.PRIO_PROCESS, pid, nice)
        ok = True
    except (OSError, AttributeError):
        pass
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
        ok = True
    except OSError:
        pass
    return ok


def read_sealed_memfd(pid: int, fd_no: int, n: int) -> bytearray:
    """Copy ``n`` bytes out of process ``pid``'s descriptor ``fd_no`` when it is a memfd sealed against
    writes and resizing, of exactly that size; ``ValueError`` otherwise. Only its name is looked at
    before opening (a device or FIFO is never opened); O_NONBLOCK keeps even a swapped one harmless."""
    link = f"/proc/{pid}/fd/{fd_no}"
    if not os.readlink(link).startswith("/memfd:"):
        raise ValueError("the descriptor is not a memfd")
    fd = os.open(link, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:") or not stat.S_ISREG(
            st.st_mode
        ):
            raise ValueError("the descriptor is not a memfd")
        if st.st_size != n or fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS:
            raise ValueError(f"the memfd holds {st.st_size} bytes, not {n}, or is not sealed")
        out, at = bytearray(n), 0
        view = memoryview(out)
        while at < n:
            got = os.preadv(fd, [view[at:]], at)
            if got <= 0:
                raise ValueError(f"the memfd ended after {at} of {n} bytes")
            at += got
        return out
    finally:
        os.close(fd)
