"""Parent side of correctness checks: a sandboxed worker per grading, driven call by call.

Never trust ``CallResult.data`` as a verdict: verify it against your own reference.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.sandbox import fence
from grader.sandbox.box import Sandbox
from grader.sandbox.channel import MAX_BLOB, ChannelError, Endpoint, widen
from grader.sandbox.cpu_budget import more_time, tree_cpu_seconds
from grader.sandbox.launch import Limits, launch


@dataclass
class CallResult:
    ok: bool  # the call returned data (not: the data is right)
    data: dict = field(default_factory=dict)
    blobs: list[bytes] = field(default_factory=list)
    failure: str = ""  # learner-facing: raised / timed out / crashed, with the reason


class ProbeSession:
    def __init__(
        self,
        probes: str,
        setup: list[tuple[str, str]],
        cells: list[tuple[str, str]],
        names: list[str],
        limits: Limits | None = None,
        startup_timeout_s: float = 120.0,
        loopback: bool = False,
        grader_only: bool = False,
        join: ProbeSession | None = None,
        cpu_only: bool = False,
    ):
        self.probes, self.setup, self.cells, self.names = probes, setup, cells, names
        self.limits, self.startup_timeout_s = limits or Limits(), startup_timeout_s
        self.loopback = loopback  # see launch(loopback=...): ranks of one worker talking over TCP
        self.cpu_only = cpu_only  # see Assignment.cpu_only: the worker sees no GPU
        self.join = (
            join  # another session whose network namespace this worker joins (launch(netns=...))
        )
        self.netns_fd: int | None = (
            None  # this worker's namespace, held open from before any learner code
        )
        self.evidence: list[str] = []
        self.unavailable: list[str] = []
        self.load_errors: list[dict] = []
        self.defined: list[str] = []
        self.box: Sandbox | None = None
        self.end: Endpoint | None = None
        self.worker_uid: int | None = None
        self.state_dir: Path | None = None  # see launch(state_dir=...): outlives each worker
        self.netns: int | None = None
        self.memory_at_setup: int | None = None  # see memory_growth
        if grader_only and cells:
            raise ValueError(
                "a grader-only session runs no learner cell"
            )  # its uid is the baseline's
        self.grader_only = grader_only  # see launch(grader_only=...)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        evt_r, evt_w = os.pipe()
        cmd_r, cmd_w = os.pipe()
        widen(evt_r)  # tensors and files come back this way: 1 MiB a read
        # one thread, as the timed worker on a CPU (its spec pins it to one core with one thread)
        env = {
            "OMP_NUM_THREADS": "1",
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
        }
        try:
            self.log = tempfile.NamedTemporaryFile(
                prefix="effkit-probe-", suffix=".log", delete=False
            )  # noqa: SIM115
            self.log.close()
            self.box = launch(
                "grader.sandbox.probe_worker",
                [str(evt_w), str(cmd_r)],
                pass_fds=(evt_w, cmd_r),
                limits=self.limits,
                env_extra=env,
                log_path=Path(self.log.name),
                state_dir=self.state_dir,
                loopback=self.loopback,
                grader_only=self.grader_only,
                netns=self._join_path(),
                no_gpu=self.cpu_only,
                lesson=self.probes.split(".")[-2],
            )
        finally:
            os.close(evt_w)
            os.close(cmd_r)
        self.end = Endpoint(evt_r, cmd_w)
        for item in self.box.unavailable:
            if item not in self.unavailable:
                self.unavailable.append(item)
        try:
            ready, _ = self.end.receive(self.startup_timeout_s)
        except ChannelError as err:
            raise ChannelError(f"{err}; worker output:\n{self.log_tail()}", err.kind) from err
        self.worker_uid = ready.get("uid")
        self.netns = _netns(self.box.pid)  # the worker's own namespace, before any learner code ran
        if self.loopback and self.netns is not None and self.netns != _netns("self"):
            self.netns_fd = os.open(f"/proc/{self.box.pid}/ns/net", os.O_RDONLY)
        if self.join is not None and (self.netns is None or self.netns != self.join.netns):
            raise ChannelError(
                "the worker did not start in the namespace it was to join", "protocol"
            )
        if self.loopback and self.netns is not None and self.netns == _netns("self"):
            note = "a network namespace of the worker's own: its loopback traffic is counted with the host's"
            if note not in self.unavailable:
                self.unavailable.append(note)
        # ranks that talk over the loopback may talk over nothing else (grader/sandbox/fence.py)
        self.end.send(
            {
                "cmd": "load",
                "probes": self.probes,
                "setup": self.setup,
                "cells": self.cells,
                "names": self.names,
                "fence": self.loopback,
            }
        )
        try:
            setup, _ = self.end.receive(self.startup_timeout_s)
            if setup.get("event") != "setup_loaded":
                raise ChannelError(f"unexpected answer to load: {str(setup)[:80]}", "protocol")
            # the kernel's charge with torch, the probes and the setup cell loaded and no learner cell
            # run yet: memory_growth's zero
            self.memory_at_setup = self._memory()[0]
            self.end.send({"cmd": "cells"})
            loaded, _ = self.end.receive(self.startup_timeout_s)
        except ChannelError as err:
            raise ChannelError(f"{err}; worker output:\n{self.log_tail()}", err.kind) from err
        if loaded.get("event") != "loaded":
            raise ChannelError(f"unexpected answer to load: {str(loaded)[:80]}", "protocol")
        self.load_errors = loaded.get("errors", [])
        if (
            self.loopback and not fence.supported()
        ):  # the parent's own knowledge, not the worker's word
            note = f"no seccomp fence on {platform.machine()}: the ranks' unix sockets and locks are not refused"
            if note not in self.unavailable:
                self.unavailable.append(note)
        self.defined = loaded.get("defined", [])
        self._note(loaded.get("evidence", []))

    def _join_path(self) -> str | None:
        if self.join is None:
            return None
        if self.join.netns_fd is None:
            if self.join.netns is not None and self.join.netns == _netns("self"):
                return (
                    None  # no namespaces here (not root): both workers are on the host's loopback
                )
            raise ChannelError(
                "the session to join holds no network namespace of its own", "protocol"
            )
        return f"/proc/{os.getpid()}/fd/{self.join.netns_fd}"

    def _note(self, evidence) -> None:
        for item in evidence if isinstance(evidence, list) else []:
            if isinstance(item, str) and item not in self.evidence:
                self.evidence.append(item[:300])

    def close(self) -> None:
        if self.end is not None:
            try:
                self.end.send({"cmd": "exit"})
            except OSError:
                pass
        if self.box is not None:
            self.box.close()
        if self.netns_fd is not None:
            os.close(self.netns_fd)
            self.netns_fd = None
        if self.end is not None:
            self.end.close()
        self.box = self.end = None
        if getattr(self, "log", None) is not None:
            Path(self.log.name).unlink(missing_ok=True)
            self.log = None

    def loopback_bytes(self) -> int | None:
        """Bytes sent so far over the loopback of the network namespace the worker started in, as
        the kernel counts them (``/proc/<worker>/net/dev``): evidence no process of the sandbox can
        write, only add to by sending. Starts the worker if none runs. None when there is no worker
        (its cells did not load: the next ``call`` says why) or when it has left the namespace it
        started in (then nothing it sends is measured: the caller refuses the run)."""
        if self.box is None:
            try:
                self.start()
            except ChannelError:
                self.close()
                return None
        if self.netns is None or _netns(self.box.pid) != self.netns:
            return None
        return loopback_tx_bytes(self.box.pid)

    def memory_growth(self) -> int | None:
        """Peak bytes the kernel charged to the sandbox's memory cgroup above its charge once torch, the
        probes and the setup cell had loaded, before any learner cell ran: what the cells and every
        call since allocated at their worst moment, every process of the sandbox together (a page touched at load and reused
        later counts; pages shared between processes count once). Evidence no sandboxed process
        can lower. Without a memory cgroup (not root): the worker process's own VmHWM instead, children
        not counted, noted in ``unavailable``. None without a worker."""
        if self.box is None or self.memory_at_setup is None:
            return None
        peak = self._memory()[1]
        return None if peak is None else peak - self.memory_at_setup

    def _memory(self) -> tuple[int | None, int | None]:
        """(now, peak) bytes: the sandbox's memory cgroup, else (no root) the worker process's own
        VmRSS / VmHWM, which its code could reset (``/proc/self/clear_refs``): said in ``unavailable``."""
        got = self.box.cgroup.memory_bytes() if self.box.cgroup is not None else None
        if got is not None:
            return got
        note = "a memory cgroup per worker: memory read from the worker process's VmHWM, which it could reset"
        if note not in self.unavailable:
            self.unavailable.append(note)
        try:
            fields = dict(
                line.split(":", 1)
                for line in Path(f"/proc/{self.box.pid}/status").read_text().splitlines()
            )
            return int(fields["VmRSS"].split()[0]) << 10, int(fields["VmHWM"].split()[0]) << 10
        except (OSError, KeyError, ValueError, IndexError):
            return None, None

    def log_tail(self, lines: int = 8) -> str:
        try:
            return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AttributeError):
            return ""

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # -- calls ----------------------------------------------------------------------------------
    def call(
        self, probe: str, timeout_s: float, serve=None, max_blob: int = MAX_BLOB, **args
    ) -> CallResult:
        """Run ``probe`` in the worker; ``serve(request, blobs) -> reply`` answers its requests; a result
        carrying a blob over ``max_blob`` bytes is refused unread (and the worker stopped)."""
        if self.box is None:
            try:
                self.start()
            except ChannelError as err:
                self.close()
                return CallResult(False, failure=f"your solution cells did not load ({err})")
        start = time.monotonic()
        deadline, cpu0 = start + timeout_s, tree_cpu_seconds(self.box.proc.pid)
        try:
            self.end.send({"cmd": "call", "probe": probe, "args": args})
            while True:
                try:
                    msg, blobs = self.end.receive(max(0.01, deadline - time.monotonic()), max_blob)
                except ChannelError as err:  # the wall clock ran out: was the worker working?
                    cpu = tree_cpu_seconds(self.box.proc.pid)
                    used = None if cpu is None or cpu0 is None else cpu - cpu0
                    extra = more_time(timeout_s, time.monotonic() - start, used)
                    if err.kind != "timeout" or not extra:
                        raise
                    deadline = time.monotonic() + extra
                    continue
                kind = msg.get("event")
                if kind == "dev" and serve is not None:
                    self.end.send({"cmd": "dev_ok", **serve(msg, blobs)})
                    continue
                self._note(msg.get("evidence"))
                if kind == "result":
                    data = msg.get("data")
                    return CallResult(True, data if isinstance(data, dict) else {}, blobs)
                if kind == "raised":
                    return CallResult(
                        False,
                        failure=f"raised {str(msg.get('message'))[:400]}",
                        data={"traceback": str(msg.get("traceback", ""))[:2000]},
                    )
                raise ChannelError(f"unexpected message {str(msg)[:80]}", "protocol")
        except ChannelError as err:
            oom = self.box.cgroup is not None and self.box.cgroup.oom_killed()
            forks = self.box.cgroup is not None and self.box.cgroup.pids_exhausted()
            self.close()  # kills the whole tree; the next call starts a fresh worker
            if err.kind == "too_big":
                why = f"sent more than the grader accepts: {err}"
            elif err.kind == "timeout":
                why = (
                    f"did not return within {timeout_s:.0f} s of CPU time (an infinite loop?); the grader "
                    f"stopped it after {time.monotonic() - start:.0f} s"
                )
            elif oom:
                why = f"ran out of memory (limit {self.limits.memory_mb} MB) and was killed"
            else:
                why = f"crashed or broke the grader's channel ({err})"
            if forks:
                why += f"; it hit the limit of {self.limits.pids} processes"
            return CallResult(False, failure=why)


def _netns(pid) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def loopback_tx_bytes(pid="self") -> int | None:
    """Bytes ``lo`` has sent in ``pid``'s network namespace (on a loopback every byte sent is also
    received, so this is the traffic between the namespace's processes), or None if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
            name, _, fields = line.partition(":")
            if name.strip() == "lo":
                return int(fields.split()[8])  # receive: 8 fields, then transmit bytes
    except (OSError, ValueError, IndexError):
        return None
    return None
