"""Limits per learner: the hub's own spawner (jupyterhub_config.py) confines each learner's server.

Two system accounts stand in for learners A and B, each started exactly as JupyterHub starts a
learner's server (the spawner's ``make_preexec_fn``, run as root, then the learner's command), with
small limits so the bombs stay cheap: A's 3 GiB allocation is killed at A's limit and A's disk-filling
write to ``/tmp`` stops at A's tmpfs, while B, running beside it, keeps working and sees none of
A's files (a Validate report, a pre-created ``/tmp/torchinductor_<B>``). Before: 2 GiB of memory
and 1 GiB in the host's ``/tmp`` succeeded at once, reports were 0644 in the shared ``/tmp``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from grader.frontends import cohort, cohort_limits

ROOT = Path(__file__).resolve().parents[1]
A, B = "nobody", "daemon"  # any two accounts that are not root
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or cohort_limits.kind() is None,
    reason="needs root and a writable cgroup file system (as `cohort up` does)",
)

A_PROBE = r"""
import errno, json, os, sys
out = {}
open(f"/tmp/effkit-check-{os.getuid()}-0123456789abcdef.json", "w").write('{"points": 12}')
os.mkdir("/tmp/torchinductor_daemon", 0o777)  # planted for B's torch.compile
try:
    with open("/tmp/fill", "wb") as fh:
        for _ in range(4096):
            fh.write(b"x" * 2**20)
            fh.flush()
    out["fill"] = "4 GiB written"
except OSError as err:
    out["fill"] = errno.errorcode[err.errno]
print(json.dumps(out), flush=True)
blob = bytearray(3 << 30)  # 3 GiB, every page touched
print("allocated", len(blob), flush=True)
"""

B_PROBE = r"""
import json, os, sys
sys.stdin.readline()  # A has finished
blob = bytearray(64 << 20)
with open("/tmp/mine", "wb") as fh:
    fh.write(b"y" * (8 << 20))
print(json.dumps({"tmp": sorted(os.listdir("/tmp")), "alive": True}), flush=True)
"""

CPU_PROBE = r"""
import multiprocessing as mp, os, time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
procs = [mp.Process(target=spin, args=(3.0,)) for _ in range(2)]
[p.start() for p in procs]
[p.join() for p in procs]
t = os.times()
print(t.children_user + t.children_system, flush=True)
"""


@pytest.fixture
def spawner(tmp_path, monkeypatch):
    """The spawner class of jupyterhub_config.py, loaded from a plan with small limits."""
    from traitlets.config.loader import PyFileConfigLoader

    plan = cohort.Plan(
        instructor="t-instructor", learners=[A, B], url="http://127.0.0.1:8123", hub_port=1,
        proxy_api_port=2, service_port=3, state_dir=str(tmp_path), exchange="/nonexistent",
        learner_config="/nonexistent", venv_bin=str(Path(sys.executable).parent),
        proxy_command="chp", memory_mb=256, cpus=0.2, tmp_mb=32, grader="t-grader",
    )  # fmt: skip
    state = tmp_path / "cohort.json"
    state.write_text(json.dumps(asdict(plan)))
    monkeypatch.setenv("EFFKIT_COHORT_STATE", str(state))
    config = PyFileConfigLoader("jupyterhub_config.py", path=str(ROOT)).load_config()
    yield config.JupyterHub.spawner_class
    cohort_limits.remove([A, B])


def _start(spawner, user: str, probe: str, **kw) -> subprocess.Popen:
    # as JupyterHub's LocalProcessSpawner.start does: preexec_fn made in the hub, run in the child
    return subprocess.Popen(
        [sys.executable, "-I", "-c", probe],
        preexec_fn=spawner.make_preexec_fn(None, user),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_a_learners_memory_and_tmp_bombs_stop_at_their_own_limits_and_the_others_keep_working(
    spawner,
):
    b = _start(spawner, B, B_PROBE, stdin=subprocess.PIPE)
    a = _start(spawner, A, A_PROBE)
    a_out, a_err = a.communicate(timeout=120)
    b_out, b_err = b.communicate("go\n", timeout=120)
    assert "allocated" not in a_out, "A's 3 GiB allocation succeeded: no memory limit"
    assert a.returncode in (-9, 1), (a.returncode, a_err[-2000:])  # OOM-killed, or MemoryError
    assert json.loads(a_out.splitlines()[0]) == {"fill": "ENOSPC"}, a_out  # its own tmpfs filled
    assert b.returncode == 0, b_err[-2000:]
    seen = json.loads(b_out)
    # none of A's files, no planted folder; only the course and venv, where they lie under /tmp
    # (a CI clone), bound back over B's private /tmp
    kept = {
        p.resolve().relative_to("/tmp").parts[0]
        for p in (ROOT, Path(sys.executable).parent.parent)
        if p.resolve().is_relative_to("/tmp")
    }
    assert seen == {"tmp": sorted({"mine"} | kept), "alive": True}, seen
    host_tmp = os.listdir("/tmp")
    assert "fill" not in host_tmp and "mine" not in host_tmp  # nothing reached the host's /tmp
    assert not Path("/tmp/torchinductor_daemon").exists() or (
        Path("/tmp/torchinductor_daemon").stat().st_uid != pwd.getpwnam(A).pw_uid
    )


def test_a_learners_processes_share_their_cpu_limit(spawner):
    probe = _start(spawner, A, CPU_PROBE)
    out, err = probe.communicate(timeout=60)
    assert probe.returncode == 0, err[-2000:]
    used = float(out)
    # two busy processes for 3 s under a 0.2-core limit: at most ~0.6 CPU-seconds
    assert used < 1.2, f"{used:.2f} CPU-seconds in 3 s: no CPU limit"


def test_the_limits_come_from_the_plan_and_say_what_the_host_lacks(tmp_path):
    root = tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text("")
    assert cohort_limits.kind(root) == "v1"
    groups, missing = cohort_limits.prepare("x", cohort_limits.Limits(memory_mb=100), root)
    assert (
        root / "memory" / cohort_limits.PARENT / "x" / "memory.limit_in_bytes"
    ).read_text() == str(100 << 20)
    assert root / "cpu" / cohort_limits.PARENT / "x" in groups  # made, no kernel behind it
    shutil.rmtree(root)
    root.mkdir()
    assert cohort_limits.kind(root) is None
    assert cohort_limits.prepare("x", cohort_limits.Limits(), root) == (
        [],
        ["memory, CPU and tasks per learner (no writable cgroup file system)"],
    )
