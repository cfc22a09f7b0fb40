"""The sandbox around learner code, attacked directly: one small worker per attack class.

Each test runs a `measure_throughput` that attacks instead of measuring, in the same sandboxed
worker the grader uses (grader.sandbox.probe), and asserts what the grader sees. Protections that need
root (unprivileged user, namespaces, cgroups) are asserted where the tests run as root (CI) and
otherwise reported as unavailable, which is asserted too.
"""

import errno
import os
import time
from pathlib import Path

import pytest
from sandboxed_throughput import SETUP, session, throughput

from grader.assignments.lesson1 import checks as lesson1
from grader.common import course
from grader.sandbox import bwrap_view
from grader.sandbox.launch import Limits, is_root
from grader.sandbox.probe import ProbeSession
from grader.sandbox.proctree import descendants

ROOT_ONLY = pytest.mark.skipif(not is_root(), reason="needs root: reported as unavailable instead")


def _run(body: str, timeout_s: float = 30, limits: Limits | None = None):
    with session(body, limits) as s:
        return throughput(s, timeout_s), s


def test_without_root_the_report_lists_what_is_unavailable():
    r, s = _run("return 1.0")
    assert r.ok and r.data["value"] == 1.0
    if is_root():
        assert s.unavailable == bwrap_view.unavailable_here() and s.worker_uid == 65534
    else:
        assert any("unprivileged user" in u for u in s.unavailable)
        assert any("cgroup" in u for u in s.unavailable)


def test_not_on_sys_path_and_a_planted_module_is_not_imported():
    r, _ = _run("""open('json_planted.py', 'w').write('X = 1')
import importlib
try:
    importlib.import_module('json_planted')
    return 1.0
except ImportError:
    return 0.0""")
    assert r.ok and r.data["value"] == 0.0


@ROOT_ONLY
def test_a_worker_cannot_see_another_workers_files():
    r1, _ = _run(
        "open('/tmp/work/left_behind', 'w').write('x'); return float(os.path.exists('/tmp/work/left_behind'))"
    )
    r2, _ = _run("return float(os.path.exists('/tmp/work/left_behind'))")
    assert r1.data["value"] == 1.0 and r2.data["value"] == 0.0


@ROOT_ONLY
def test_no_write_to_the_course_the_grader_or_the_targets_and_no_read_of_sources(tmp_path):
    targets = course.course_dir() / "grader_targets.json"
    grader_file = Path(lesson1.__file__)
    source = course.source_notebook("lesson1", "lesson1")
    body = f"""hits = 0.0
for path in ({str(targets)!r}, {str(grader_file)!r}):
    try:
        open(path, 'a').close()
        hits += 1
    except OSError:
        pass
try:
    open({str(source)!r}).read()
    hits += 10
except OSError:
    pass
return hits"""
    before = grader_file.stat().st_mtime
    with session(body) as s:
        r = throughput(s)
    assert r.ok and r.data["value"] == 0.0
    assert grader_file.stat().st_mtime == before
    assert any("for writing" in f for f in s.evidence), s.evidence  # attempts are flagged


@ROOT_ONLY
def test_no_network():
    r, _ = _run("""import socket
try:
    socket.create_connection(('127.0.0.1', 9), timeout=2)
    return 0.0
except OSError as err:
    return float(err.errno or -1)""")
    assert r.ok and r.data["value"] in (errno.ENETUNREACH, errno.ECONNREFUSED, errno.EADDRNOTAVAIL)
    assert r.data["value"] != errno.ECONNREFUSED or not is_root()


@ROOT_ONLY
def test_a_worker_without_gpu_cannot_reach_the_gpus_device_nodes(monkeypatch):
    """Lesson 11's ranks are budgeted in host memory: memory kept on a GPU is memory no cgroup counts.
    CUDA_VISIBLE_DEVICES is the worker's own to change before CUDA starts, so the device nodes
    themselves are replaced. No GPU here: a stand-in node (a character device, /dev/zero's numbers)
    and a stand-in caps folder, outside the /tmp the worker gets."""
    import shutil
    import stat

    from grader.sandbox import launch as sandbox

    stand_in = Path("/run") / f"effkit-test-gpu-{os.getpid()}"
    try:
        (stand_in / "nvidia-caps").mkdir(parents=True)
        (stand_in / "nvidia-caps" / "cap1").write_text("x")
        os.mknod(stand_in / "nvidia0", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
        os.chmod(stand_in / "nvidia0", 0o666)
        monkeypatch.setattr(sandbox, "GPU_NODES", str(stand_in / "nvidia*"))
        # hidden: /dev/null in its place (the unshare view) or no such node at all (the bwrap view)
        body = f"""import os
try:
    seen = len(open('{stand_in}/nvidia0', 'rb').read(4))
except OSError:
    seen = 0
try:
    seen += 10 * len(os.listdir('{stand_in}/nvidia-caps'))
except OSError:
    pass
return float(seen + 100 * (os.environ.get('CUDA_VISIBLE_DEVICES') == ''))"""
        for cpu_only, want in (
            (True, 100.0),
            (False, 14.0),
        ):  # hidden; and what an ordinary worker sees
            with session(body, cpu_only=cpu_only) as s:
                r = throughput(s)
            assert r.ok and r.data["value"] == want, (cpu_only, r.failure, r.data)
    finally:
        shutil.rmtree(stand_in, ignore_errors=True)


@ROOT_ONLY
def test_filling_the_disk_hits_the_workers_own_limit():
    r, _ = _run(
        """chunk = b'x' * (1 << 20)
try:
    with open('big', 'wb') as f:
        for _ in range(10_000):
            f.write(chunk)
    return 0.0
except OSError as err:
    return float(err.errno)""",
        limits=Limits(tmp_mb=16, file_mb=64),
    )
    assert r.ok and r.data["value"] in (errno.ENOSPC, errno.EFBIG)


@ROOT_ONLY
def test_a_memory_bomb_is_killed_in_its_cgroup_and_the_grader_survives():
    t = time.monotonic()
    r, _ = _run(
        "keep = []\nwhile True:\n    keep.append(bytearray(64 << 20))", limits=Limits(memory_mb=400)
    )
    assert not r.ok and "out of memory" in r.failure
    assert time.monotonic() - t < 60


@ROOT_ONLY
def test_a_fork_bomb_stops_at_the_pid_limit_and_is_killed_whole():
    t = time.monotonic()
    # A first call (steps=1) returns at once, so the worker's start and the probe's first imports
    # (5+ s at a load average of 8) are not inside the bomb's 5-second window.
    with session(
        "if steps == 1:\n    return 1.0\nwhile True:\n    try:\n        os.fork()\n"
        "    except OSError:\n        pass",
        limits=Limits(pids=24),
    ) as s:
        assert throughput(s, 60).ok
        r = throughput(s, 5, steps=2)
        assert (
            not r.ok
            and "did not return within 5 s" in r.failure
            and "limit of 24 processes" in r.failure
        )
        assert s.box is None  # killed; the next call would start a fresh worker
    assert time.monotonic() - t < 90  # a load average of 8 took ~20 s


@ROOT_ONLY
def test_a_process_that_leaves_the_session_is_still_frozen_and_killed():
    with session("""pid = os.fork()
if pid == 0:
    os.setsid()
    while True:
        pass
return float(pid)""") as s:
        r = throughput(s)
        child = _host_pid(
            s.box, int(r.data["value"])
        )  # the worker sees its own PID namespace's numbers
        assert child in s.box.members() and os.getsid(child) == child  # escaped the session ...
        assert s.box.left_session() == [child]  # (the parent sees it too)
        assert any("processes left running" in f for f in s.evidence)
        s.box.pause()  # ... but not the freezer
        state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cpu_before = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[11])
        time.sleep(0.3)
        cpu_after = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[11])
        assert cpu_after - cpu_before <= 1, state  # no CPU while frozen
        s.box.resume()
    assert _dead(child)


def _dead(pid: int, within_s: float = 5.0) -> bool:
    """Gone, a zombie, or dead and being reaped ("X": seen for a moment on a loaded machine)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X") or time.monotonic() > deadline:
            return state in ("Z", "X")
        time.sleep(0.05)


def _host_pid(box, pid: int) -> int:
    """The grader's number for a process the worker knows as ``pid`` (the last field of NSpid is
    its number in the innermost namespace); ``pid`` itself without a PID namespace."""
    for member in box.members():
        try:
            nspid = next(
                ln
                for ln in Path(f"/proc/{member}/status").read_text().splitlines()
                if ln.startswith("NSpid:")
            )
        except (OSError, StopIteration):
            continue
        if len(nspid.split()) > 2 and int(nspid.split()[-1]) == pid:
            return member
    return pid


def test_descendants_walk_finds_grandchildren():
    import subprocess

    p = subprocess.Popen(["sh", "-c", "sleep 5 & sleep 5 & wait"])
    try:
        deadline = time.monotonic() + 5
        while len(descendants(p.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(descendants(p.pid)) >= 2
    finally:
        for pid in descendants(p.pid):
            os.kill(pid, 9)
        p.kill()
        p.wait()


def test_the_parent_refuses_linked_baseline_and_untrained_weights(tmp_path):
    import torch

    from grader.sandbox.commit import encode
    from grader.timed.protocol import weights_problems

    class Data:
        init_paths = [tmp_path / "init0.pt"]

        @staticmethod
        def weights_path(role, r):
            return tmp_path / f"{role}{r}.pt"

    def state(w):  # weights as a worker commits them: safetensors, never a pickle
        return encode({"model": {"w": w}, "optimizer": {}})

    init = {"w": torch.zeros(3)}
    torch.save(init, Data.init_paths[0])  # the grader's own file
    Data.weights_path("baseline", 0).write_bytes(state(torch.ones(3)))
    learner = Data.weights_path("learner", 0)
    learner.write_bytes(state(torch.full((3,), 0.5)))
    flags = []
    assert weights_problems(Data, range(1), flags) == [] and flags == []
    learner.write_bytes(state(torch.ones(3)))
    assert (
        weights_problems(Data, range(1), flags) == []
        and "bit-identical to the baseline's" in flags[0]
    )
    learner.write_bytes(state(torch.zeros(3)))
    assert "never moved" in weights_problems(Data, range(1))[0]
    learner.unlink()
    learner.symlink_to(Data.weights_path("baseline", 0))
    assert "is a link" in weights_problems(Data, range(1))[0]


# -- the timed workers (grader.sandbox.supervisor.start_worker): the same sandbox, plus read-only inputs --
TIMED_ATTACK = """import json, os, sys, pathlib
inputs = pathlib.Path(os.environ["EFFKIT_GRADER_DATA"])
found = {"uid": os.getuid(), "cwd": os.getcwd(), "path0": sys.path[0], "wrote": [], "read": []}
found["inputs"] = sorted(p.name for p in inputs.iterdir())
found["init"] = (inputs / "init0.pt").read_text()
for target in (inputs / "init0.pt", inputs / "planted.py"):
    try:
        target.write_text("changed by the learner")
        found["wrote"].append(target.name)
    except OSError:
        pass
for secret in (WORKDIR + "/baseline-0.pt", WORKDIR + "/inputs/init0.pt"):
    try:
        found["read"].append(open(secret).read())
    except OSError:
        pass
raise RuntimeError("REPORT " + json.dumps(found))
"""


@ROOT_ONLY
def test_a_timed_worker_reads_only_its_inputs_read_only_as_nobody(tmp_path):
    """The timed worker (lessons 2-3) used to run as root in the grader's own folder: it could read
    the baseline's weights and rewrite the initial weights both workers load."""
    import json

    from grader.sandbox.supervisor import WorkerFailed, start_worker

    workdir = tmp_path / "grading"
    workdir.mkdir(mode=0o700)
    inputs = workdir / "inputs"
    inputs.mkdir(mode=0o755)
    (inputs / "init0.pt").write_text("initial weights")
    (inputs / "init0.pt").chmod(0o644)
    (workdir / "baseline-0.pt").write_text("the baseline's weights")
    config = {
        "assignment_module": "grader.assignments.lesson2.runtime",
        "device": "cpu",
        "role": "learner",
    }
    w = start_worker("learner", workdir, config, inputs=inputs)
    try:
        w.expect("ready", 120, "starting up")
        w.send(
            cmd="load",
            cells=[("attack", TIMED_ATTACK.replace("WORKDIR", repr(str(workdir))))],
            object_name="FastPipeline",
        )
        with pytest.raises(WorkerFailed) as failed:
            w.expect("loaded", 60, "running the attack")
        assert w.unavailable == bwrap_view.unavailable_here() and w.box.cgroup is not None
    finally:
        w.close()
    found = json.loads(str(failed.value).split("REPORT ", 1)[1])
    assert found["uid"] == 65534 and found["wrote"] == [] and found["read"] == []
    assert found["inputs"] == ["init0.pt"] and found["init"] == "initial weights"
    assert found["cwd"] == "/tmp/work" and found["path0"] != found["cwd"]
    assert (inputs / "init0.pt").read_text() == "initial weights"
    assert sorted(p.name for p in inputs.iterdir()) == ["init0.pt"]


@ROOT_ONLY
def test_a_dead_gradings_frozen_workers_are_swept_and_live_ones_kept():
    import subprocess

    from grader.sandbox.cgroups import CGROUP_PARENT, CGROUP_ROOT, Cgroup, sweep_stale_cgroups

    gone = subprocess.Popen(["true"])
    gone.wait()  # a grader pid that no longer exists
    stale = Cgroup(f"w{gone.pid}-deadbeef", Limits())
    live = Cgroup(f"w{os.getpid()}-alive000", Limits())
    victim = subprocess.Popen(["sleep", "60"])
    try:
        stale.add(victim.pid)
        assert stale.freeze(True)
        removed = sweep_stale_cgroups()
        assert victim.wait(timeout=10) == -9  # thawed and killed
        # gone, by this sweep or by another grader's on the same machine (each grading sweeps at its
        # start, so under load another one may get there first and leave `removed` empty here)
        assert all(not d.exists() for d in stale.dirs.values())
        assert all(d.exists() for d in live.dirs.values())
        assert all(CGROUP_PARENT in str(d) and str(CGROUP_ROOT) in str(d) for d in removed if d)
    finally:
        victim.kill()
        live.remove()
        stale.remove()


def test_a_state_dir_outlives_the_worker_and_only_it_is_shared(tmp_path):
    """launch(state_dir=...) (lesson 6: checkpoints that survive a SIGKILLed worker): the folder is
    the worker's own (inside its working directory, owned by its user); what one worker writes there
    the next one reads; its private /tmp/work is still fresh each time."""
    state = tmp_path / "state"
    state.mkdir()
    write = """d = os.environ['EFFKIT_GRADER_STATE']
open(os.path.join(d, 'ckpt'), 'w').write('42')
open('/tmp/work/private', 'w').write('x')
return float(d.startswith(os.getcwd()))"""
    read = """d = os.environ['EFFKIT_GRADER_STATE']
return float(open(os.path.join(d, 'ckpt')).read()) + 100 * os.path.exists('/tmp/work/private')"""
    for body, want in ((write, 1.0), (read, 42.0)):
        worker = session(body)
        worker.state_dir = state
        with worker as s:
            r = throughput(s)
        assert r.ok and r.data["value"] == want, r
        assert not [f for f in s.evidence if "outside its working directory" in f], s.evidence
    assert (state / "ckpt").read_text() == "42"
    if is_root():
        assert (state / "ckpt").stat().st_uid == 65534 and state.stat().st_uid == 65534


@ROOT_ONLY
def test_a_state_folder_is_size_limited_and_gone_after_close():
    """Lesson 6's checkpoint folder outlives its workers: it must not be a way to fill the disk."""
    import errno

    from grader.sandbox.launch import StateFolder

    folder = StateFolder(size_mb=1)
    try:
        assert folder.mounted and folder.unavailable == []
        (folder.path / "small").write_bytes(b"x" * 1000)
        with pytest.raises(OSError) as full:
            (folder.path / "big").write_bytes(b"x" * (2 << 20))
        assert full.value.errno == errno.ENOSPC
    finally:
        folder.close()
    assert not folder.path.exists()
    folder.close()  # idempotent


@ROOT_ONLY
def test_a_worker_whose_uid_has_no_passwd_entry_can_still_ask_its_user_name(tmp_path):
    """getpass.getuser() in the grader-only worker (uid 65533, no passwd entry) raised KeyError: torch
    2.11 asks it when use_deterministic_algorithms imports inductor's config, and lesson 6's baseline
    failed so on an H100 image. The stdlib's timeit runs the statement in the sandboxed worker."""
    from grader.sandbox.launch import launch

    for grader_only, name in ((True, "effkit-grader"), (False, "nobody")):
        log = tmp_path / f"{name}.log"
        box = launch(
            "timeit",
            ["-n1", "-r1", "-s", "import getpass", f"assert getpass.getuser() == {name!r}"],
            pass_fds=(),
            log_path=log,
            grader_only=grader_only,
        )
        try:
            assert box.proc.wait(timeout=60) == 0, log.read_text()
        finally:
            box.close()


@ROOT_ONLY
def test_a_learners_worker_cannot_signal_renice_repin_or_read_a_grader_only_worker():
    """A timed baseline (lessons 2, 3, 6, 10) is slowed by anything that stops, deprioritises or
    re-pins it while the learner's side looks fast. It runs as another unprivileged uid than the
    learner's worker, so the kernel refuses all of it; the same calls on the learner's own child
    succeed, so the test can fail."""
    import signal

    baseline = ProbeSession("grader.assignments.lesson1.probes", SETUP, [], [], grader_only=True)
    with pytest.raises(ValueError, match="no learner cell"):
        ProbeSession(
            "grader.assignments.lesson1.probes",
            SETUP,
            [("measure_throughput", "x = 1")],
            [],
            grader_only=True,
        )
    baseline.start()
    try:
        assert baseline.worker_uid not in (None, 0, 65534)
        target = baseline.box.pid
        # one letter per attempt (the probe returns at most 100 characters): D done, P refused
        # (EPERM / EACCES / EIO), S no such process (ESRCH / ENOENT: not in the worker's PID
        # namespace), X anything else; baseline first, then the worker's own child
        attempts = f"""
out = ''
for pid in ({target}, mine.pid):
    for call in (lambda: os.kill(pid, {int(signal.SIGSTOP)}), lambda: os.kill(pid, {int(signal.SIGCONT)}),
                 lambda: os.setpriority(os.PRIO_PROCESS, pid, 19), lambda: os.sched_setaffinity(pid, {{0}}),
                 lambda: open(f'/proc/{{pid}}/mem', 'rb').read(1)):
        try:
            call()
            out += 'D'
        except OSError as err:
            out += 'P' if err.errno in (1, 5, 13) else 'S' if err.errno in (2, 3) else 'X'
mine.kill()"""
        r, _ = _run(
            "import subprocess\nmine = subprocess.Popen(['sleep', '30'])"
            + attempts
            + "\nreturn out"
        )
        assert r.ok, r.failure
        said = r.data.get("value")
        # not in the worker's PID namespace (S), the repin refused by the fence before the kernel looks (P)
        assert said[:5] == "SSSPS", f"stop, cont, renice, repin, /proc/mem of the baseline: {said}"
        # on its own child stop, cont and renice work (the uid is what refuses them above); re-pinning
        # is refused by the worker's fence even there (grader/sandbox/fence.py: PLACEMENT)
        assert said[5:9] == "DDDP", (
            f"the same on the worker's own child must work but the repin: {said}"
        )
        # The uid alone still refuses all five where the baseline's pid is visible (the grader's PID
        # namespace): a learner's uid, no capabilities, in the host's namespace.
        import subprocess
        import sys

        host = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--no-new-privs",
                "--inh-caps=-all",
                sys.executable,
                "-I",
                "-c",
                "import os, subprocess\nmine = subprocess.Popen(['sleep', '30'])"
                + attempts
                + "\nprint(out)",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert host.stdout[:5] == "PPPPP" and host.stdout[5:9] == "DDDD", (host.stdout, host.stderr)
        assert os.getpriority(os.PRIO_PROCESS, target) == 0  # nothing got through
    finally:
        baseline.close()


@ROOT_ONLY
def test_a_worker_sees_no_other_gradings_cgroups_and_no_keyring():
    """A worker graded beside another grading listed its cgroups and read their memory counters, and
    read the key another grading's worker had written to the shared `nobody` keyring: now the cgroup
    file system is out of view (a cgroup namespace rooted at its own) and keyrings are refused."""
    body = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": 248, "aarch64": 217}[os.uname().machine]
added = libc.syscall(nr, b"user", b"side", b"x", 1, -4)
try:
    seen = len(os.listdir('/sys/fs/cgroup'))
except OSError:
    seen = -1
mine = open('/proc/self/cgroup').read().strip().rsplit(':', 1)[-1]
return float(added == -1 and ctypes.get_errno() == 1) + 10 * float(seen <= 0) + 100 * float(mine == '/')"""
    r, _ = _run(body)
    assert r.ok and r.data["value"] == 111.0, r
