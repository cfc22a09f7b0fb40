"""Ray for the farm's driver: a private, token-authenticated Ray on this machine, or a cluster's.

Split from ``grader.frontends.farm`` (the driver's loop): how Ray is started and who may talk to it.

A private Ray's head runs as its own ``ray start --head --block`` process (``farm_head``) with
every agent port chosen here. Why: Ray 2.60's raylet waits a fixed 15 s for each agent (Python
processes) to write its port file when the port is left to the agent, and aborts past it; on a
loaded 2-core host (an instructor's grading machine) an agent's imports alone take ~30 s, so
``ray.init`` failed there ("The current node timed out during startup"). With the ports given,
the raylet registers at once and the agents come up in their own time
(``RAY_agent_register_timeout_ms``); a head that still does not come up is started once more.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

SLOT = "effkit_timed_slot"  # a custom resource: one unit per timed grading slot on a node

RAY_TMP = Path(f"/tmp/effkit-ray-{os.getuid()}")  # short: Ray's unix sockets live under it
# This driver's head's own folder in it: ``ray start`` writes ``ray_current_cluster`` into its
# temp dir, and Ray's address-less ``ray.init`` connects to whatever address that file names,
# stale or not; in a shared folder another farm's Ray would join ours (or a dead one)
HEAD_TMP = RAY_TMP / f"head-{os.getpid()}"
START_S = float(os.environ.get("EFFKIT_FARM_RAY_START_S", "300"))  # a head's start-up budget
ATTEMPTS = 2  # a head that did not start is started once more (fresh ports), then we give up
STARTED = "Ray runtime started."  # what ``ray start`` prints once its head is up


class RayStartError(RuntimeError):
    """The private Ray did not start: one line saying why, for the instructor."""


def _private_token() -> Path:
    """A fresh token in a 0700 folder, not Ray's default ~/.ray/auth_token (0644): a cohort host
    gives learners the traverse bit on /root (grader/frontends/cohort_host.py), and a file at a
    known path under it is then readable."""
    RAY_TMP.mkdir(mode=0o700, exist_ok=True)
    os.chmod(RAY_TMP, 0o700)
    # One token per driver: two farms on one host (a grading service's calls beside an
    # instructor's run) each keep their own Ray; a shared file would be overwritten under one
    token = RAY_TMP / f"auth_token.{os.getpid()}"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, secrets.token_hex(32).encode())
    os.close(fd)
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    return token


def _ray_env() -> None:
    """Ray reads these when it is first imported (its C++ config) and its processes inherit
    them: set before ``import ray`` and before the head starts."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a course host phones nobody
    # How long the raylet waits for its agents to register, and the head for its GCS port file:
    # 30 s by default, less than a busy 2-core host needs to import them
    os.environ.setdefault("RAY_agent_register_timeout_ms", "300000")
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "300")
    os.environ.setdefault("RAY_worker_register_timeout_seconds", "300")  # a worker's imports too


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free now (held open together so none repeats); a port taken in the
    moment before Ray binds it fails that start, which the second attempt covers."""
    held = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def head_command(slots: int, ports: list[int]) -> list[str]:
    """``ray start`` for a private head: ``slots`` CPUs and timed slots, every port given, no
    dashboard, no autoscaler monitor or log monitor (Python processes nobody here reads)."""
    gcs, agent_grpc, agent_http, metrics, runtime_env = ports
    return [
        sys.executable,
        "-m",
        "grader.frontends.farm_head",  # Ray's CLI, the raylet given its agent's HTTP port
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={gcs}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--dashboard-agent-listen-port={agent_http}",
        f"--metrics-export-port={metrics}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--num-cpus={slots}",
        f"--resources={json.dumps({SLOT: slots})}",
        "--include-dashboard=false",
        "--include-log-monitor=false",
        "--no-monitor",
        "--disable-usage-stats",
        f"--temp-dir={HEAD_TMP}",
    ]


def _stop(head: subprocess.Popen) -> None:
    """The head's process group (``ray start`` and the GCS, raylet and agents it started): SIGTERM,
    then SIGKILL for whatever is still there after 20 s."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(head.pid, sig)
        except ProcessLookupError:
            return  # the whole group is gone
        try:
            head.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.5)  # its children leave the group a moment after it


def _tail(log: Path, n: int = 400) -> str:
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    return ((errors or lines or ["no output"])[-1]).strip()[:n]


def start_head(slots: int, start_s: float = START_S) -> tuple[subprocess.Popen, str]:
    """A private head, up within ``start_s`` seconds (twice at most): its process and address.
    Raises RayStartError with one line when it does not come up."""
    why = ""
    for attempt in range(1, ATTEMPTS + 1):
        ports = free_ports(5)
        HEAD_TMP.mkdir(mode=0o700, exist_ok=True)
        log = HEAD_TMP / "head.log"
        with log.open("w") as out:  # the head's own output, read back for the reason
            head = subprocess.Popen(
                head_command(slots, ports),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own group: stopped as one, never by name
            )
        deadline = time.monotonic() + start_s
        while time.monotonic() < deadline and head.poll() is None:
            if STARTED in log.read_text(errors="replace"):
                return head, f"127.0.0.1:{ports[0]}"
            time.sleep(0.5)
        why = (
            f"it exited ({_tail(log)})"
            if head.poll() is not None
            else f"it was not up after {start_s:.0f} s (EFFKIT_FARM_RAY_START_S)"
        )
        _stop(head)
        if attempt < ATTEMPTS:
            print(f"grader farm: the private Ray did not start ({why}); starting it once more")
    raise RayStartError(f"the private Ray did not start twice: {why}; log: {log}")


@contextmanager
def ray_session(address: str | None, slots: int):
    """Ray for one farm run: join ``address`` (its token in ``RAY_AUTH_TOKEN_PATH``, set by whoever
    started it), or start a private head with a token of our own, its sockets and token in a
    0700 folder; on leaving, the driver disconnects and a private head is stopped, its token
    deleted. Token auth needs Ray >= 2.52. Not loopback only: Ray 2.60 binds its gRPC ports on
    every interface whatever the node's address says; the token is the guard."""
    _ray_env()
    token = head = None
    try:
        if not address:
            token = _private_token()
            head, address = start_head(slots)
        import ray  # optional heavy dependency: only the farm needs it

        ray.init(address=address, log_to_driver=False)
        try:
            yield ray
        finally:
            ray.shutdown()
    finally:
        if head is not None:
            _stop(head)
            shutil.rmtree(HEAD_TMP, ignore_errors=True)  # its sessions and logs: it ran, no story
        if token is not None:
            token.unlink(missing_ok=True)
