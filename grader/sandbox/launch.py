"""The sandbox every process that runs learner code starts in, and the cgroup that holds its tree.

Learner code cannot read the grader's secrets, reach the network or outlive its grading.
``unshare``/``setpriv``/cgroups need root; without it only ``-I``, the private folder, rlimits and
the /proc walk apply.
"""

from __future__ import annotations

import atexit
import functools
import glob
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from grader.common import course
from grader.common.overrides import snapshot_overrides
from grader.sandbox import bwrap_view
from grader.sandbox.box import Sandbox, become_subreaper
from grader.sandbox.cgroups import Cgroup, sweep_stale_cgroups
from grader.sandbox.learner_view import view_mounts

CGROUP_FS = "/sys/fs/cgroup"

REPO_ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
GRADER_ONLY = 65533  # the uid of workers that hold no learner code (no passwd entry needed: setpriv takes numbers)
# What getpass.getuser() answers in a worker: a uid without a passwd entry (GRADER_ONLY) makes it
# raise KeyError, and torch 2.11 asks it when use_deterministic_algorithms imports inductor's config
# (lesson 6's baseline failed so on an H100 image).
USER_NAMES = {NOBODY: "nobody", GRADER_ONLY: "effkit-grader"}
# `ip link set lo up` without the `ip` command (GPU images ship no iproute2: lesson 11's ranks found
# no interface for 127.0.0.1 on an H100): SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP, run as root
# inside the worker's new network namespace. The kernel gives lo 127.0.0.1 and ::1 once it is up.
LOOPBACK_UP = (
    "import fcntl, socket, struct; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
    "f = struct.unpack('16sH22x', fcntl.ioctl(s, 0x8913, struct.pack('16sH22x', b'lo', 0)))[1]; "
    "fcntl.ioctl(s, 0x8914, struct.pack('16sH22x', b'lo', f | 1))"
)
# NVIDIA's device nodes (nvidia0.., nvidiactl, nvidia-uvm, the nvidia-caps folder): a worker launched
# with no_gpu=True sees /dev/null in their place. CUDA_VISIBLE_DEVICES alone is the worker's own to
# change before CUDA starts, and memory a worker keeps on a GPU is memory its cgroup never counts.
GPU_NODES = "/dev/nvidia*"
_swept = False
EXPOSED_AT = "/tmp/grader-inputs"  # where a worker sees the folder ``launch(expose=...)`` gives it
STATE_AT = (
    "/tmp/work/state"  # where it sees ``launch(state_dir=...)``: inside its working directory
)
# What the worker may keep: variables torch and OpenMP read, never the grader's configuration.
ENV_KEEP = (
    "PATH",
    "LANG",
    "LC_ALL",
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "EFFKIT_PROFILE",
    "EFFKIT_DATA",
    "TOKENIZERS_PARALLELISM",
)


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 4096  # whole tree; torch + a BERT worker needs ~1.5 GB
    pids: int = 128  # DataLoader workers and threads count; a fork bomb stops here
    tmp_mb: int = 256  # size of the worker's /tmp tmpfs (its working directory lives there)
    # RLIMIT_FSIZE: no single file larger. The timed worker's commit is one memfd of up to 2 GiB; every
    # worker gets that same limit, which learner code reads with getrlimit: one value tells no worker
    # from another, and every place a worker can write is a size-capped tmpfs (the room is the same)
    file_mb: int = 2048


def learner_env() -> dict[str, str]:
    """What every worker that runs learner code finds in its environment besides ``ENV_KEEP``, the
    probe worker and the timed one alike (issue 52: the timed worker told itself apart by its
    variables and its inputs folder, ``$EFFKIT_GRADER_DATA``, set by :func:`launch` for both): no host
    data folder (effkit's caches in the private home, seeded by the parent where a run needs them),
    threads that sleep at barriers."""
    return {"EFFKIT_DATA": "", "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


@functools.cache
def empty_inputs() -> Path:
    """An empty, root-owned, read-only folder shown at ``EXPOSED_AT`` to a learner's worker that gets
    no inputs: the folder is there in every learner worker, filled only where the parent fills it."""
    path = Path(tempfile.mkdtemp(prefix="effkit-no-inputs-"))
    path.chmod(0o555)
    atexit.register(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def unavailable_lines(items: list[str], where: str = "") -> list[str]:
    """What a learner's view says of ``items``: a fixed test seed verbatim (a course that sets it by
    mistake must see it), every missing protection counted in one :func:`unavailable_note`."""
    said = [i for i in items if i.startswith("secret draws:")]
    rest = [i for i in items if not i.startswith("secret draws:")]
    return [f"protection unavailable here{where}: {i}" for i in said] + (
        [unavailable_note(rest, where)] if rest else []
    )


def unavailable_note(items: list[str], where: str = "") -> str:
    """The sandbox's missing protections as one line for a learner's view: how many, and who can act.
    The list itself stays in the report's JSON ("unavailable"): it named, among others, where the
    answer keys are, which only the instructor (grading as root) can do anything about."""
    return (
        f"protection unavailable here{where}: {len(items)} of the sandbox's protections are missing on "
        "this machine (grading without root or without cgroups); the report's JSON lists them for "
        "your instructor"
    )


def _preexec(limits: Limits, cgroup: Cgroup | None = None, cores: list[int] | None = None):
    def apply() -> None:
        # In the child, before exec: `unshare --fork` starts the worker at once, and a cgroup or
        # core set given to its pid afterwards would miss that child.
        if cgroup is not None:
            cgroup.add(os.getpid())
        if cores:
            os.sched_setaffinity(0, cores)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb << 20, limits.file_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if os.environ.get("EFFKIT_SANDBOX_NPROC"):  # fallback fork-bomb brake without cgroups
            n = int(os.environ["EFFKIT_SANDBOX_NPROC"])
            resource.setrlimit(resource.RLIMIT_NPROC, (n, n))

    return apply


def hidden_paths() -> list[Path]:
    """Folders learner code must not read: the course's private folder and the source notebooks."""
    out = [course.course_dir(), course.course_root() / course.SOURCE_DIR]
    return [p for p in out if p.is_dir()]


def launch(
    module: str,
    args: list[str],
    *,
    pass_fds: tuple[int, ...],
    limits: Limits = Limits(),
    log_path: Path | None = None,
    env_extra: dict | None = None,
    cores: list[int] | None = None,
    expose: Path | None = None,
    state_dir: Path | None = None,
    loopback: bool = False,
    grader_only: bool = False,
    netns: str | None = None,
    no_gpu: bool = False,
    lesson: str | None = None,
) -> Sandbox:
    """Start ``python -I -m module args`` sandboxed (see module doc); learner code must run only
    after this returns (the worker waits for the parent's first command).

    ``expose``: a folder of the parent's the worker may read (the grader's training inputs), shown
    read-only at ``EXPOSED_AT`` where the machine allows it; its path reaches the worker as
    ``$EFFKIT_GRADER_DATA``. Nothing else of the parent's is visible.

    ``state_dir``: an empty folder the parent created for this grading that outlives the worker
    (lesson 6 kills and restarts workers that must find their checkpoints again): handed to the
    worker's user (``nobody``), shown read-write at ``STATE_AT``, its path in
    ``$EFFKIT_GRADER_STATE``. The parent must treat everything in it as the learner's.

    ``grader_only``: the worker will run the grader's code only (a timed baseline): it runs as
    ``GRADER_ONLY``, not ``nobody``, so no learner process can signal, renice, re-pin or trace it.

    ``netns``: a path to another sandboxed worker's network namespace (its loopback up; best an open
    descriptor of the parent's, ``/proc/<parent>/fd/<n>``, which no exiting worker can turn into
    someone else's) that this one joins instead of making its own: ranks of one job in sandboxes
    and cgroups of their own that still reach each other, and nothing else (lesson 11 (b)).

    ``no_gpu``: the worker sees no GPU (``CUDA_VISIBLE_DEVICES=""``, and as root ``GPU_NODES`` absent
    from its bwrap view, or replaced by ``/dev/null`` in the unshare view): for tasks specified on the CPU whose budget is host
    memory (lesson 11), where device memory would be memory no cgroup counts.

    ``lesson``: the assignment whose learner code runs here; its ``learner_view.WITHHELD`` effkit
    functions raise in the worker."""
    unavailable: list[str] = []
    root = is_root()
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    # the same variables, and as root the same inputs folder, in every learner worker
    if not grader_only:
        expose = expose or (empty_inputs() if root else None)
        env.update(learner_env())
    env.update(env_extra or {})
    nodes = sorted(glob.glob(GPU_NODES)) if no_gpu else []
    if no_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # -I ignores it; harmless, documents intent
    boot = f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); import runpy; runpy.run_module({module!r}, run_name='__main__')"
    py = [sys.executable, "-I", "-c", boot, *args]
    workdir = None
    pidns = False
    uid = GRADER_ONLY if grader_only else NOBODY
    view_fds: list[int] = []  # descriptors the bwrap view reads its masked files from
    if root and bwrap_view.wanted() and all(map(shutil.which, ("unshare", "nsenter", "setpriv"))):
        if state_dir:
            os.chown(state_dir, uid, uid)
            os.chmod(state_dir, 0o700)
        mounts, view_fds = bwrap_view.view_args(
            lesson=lesson,
            grader_only=grader_only,
            gpu_nodes=[] if no_gpu else sorted(glob.glob(GPU_NODES)),
            tmp_mb=limits.tmp_mb,
            hidden=hidden_paths(),
            expose=expose,
            exposed_at=EXPOSED_AT,
            state_dir=state_dir,
            state_at=STATE_AT,
        )
        argv = bwrap_view.command(
            mounts, uid=uid, loopback=loopback, netns=netns, py=py, loopback_up=LOOPBACK_UP
        )
        env.update({"EFFKIT_GRADER_DATA": EXPOSED_AT} if expose else {})
        env.update({"EFFKIT_GRADER_STATE": STATE_AT} if state_dir else {})
        pidns = True
        env["HOME"] = "/tmp/work"
        env["USER"] = env["LOGNAME"] = USER_NAMES[uid]
        cwd = "/"
    elif root and shutil.which("unshare") and shutil.which("setpriv"):
        unavailable += [] if grader_only else [bwrap_view.MISSING]  # learner code: the view matters
        # Hide first: a course folder under /tmp (tests) disappears from view with the new /tmp.
        mounts = [
            f"mount -t tmpfs -o size=1k,mode=0 tmpfs {_q(hidden)}" for hidden in hidden_paths()
        ]
        mounts += [
            f"mount -t tmpfs -o size=1k,mode=0 tmpfs {_q(n)}"
            if os.path.isdir(n)
            else f"mount --bind /dev/null {_q(n)}"
            for n in nodes
        ]
        # the cgroup file system shows every grading's cgroups and memory counters: none in view
        if os.path.isdir(CGROUP_FS):
            mounts.append(f"mount -t tmpfs -o size=1k,mode=0 tmpfs {CGROUP_FS}")
        if not grader_only:  # the repository as a learner's worker sees it: effkit, the venv, worker-side grader code
            mounts += view_mounts(lesson=lesson)
        if netns is not None:
            pass  # the other worker's namespace: its loopback is up already, nothing more is reachable
        elif loopback:  # this namespace's lo only: nothing outside is reachable
            mounts.insert(0, f"{_q(sys.executable)} -I -S -c {_q(LOOPBACK_UP)}")
        # The code the worker runs (this repository, the venv) may itself live under /tmp (a CI
        # clone, say): carry those folders across the new /tmp, read-only to the worker, with the
        # hidden course folders inside them still hidden (--rbind keeps those tmpfs mounts).
        keep = _kept_under_tmp()
        if state_dir:
            os.chown(state_dir, uid, uid)
            os.chmod(state_dir, 0o700)
        if keep or expose or state_dir:
            mounts.append("mkdir -p /mnt && mount -t tmpfs -o size=1m tmpfs /mnt")
            mounts += [
                f"mkdir /mnt/k{i} && mount --rbind {_q(p)} /mnt/k{i}" for i, p in enumerate(keep)
            ]
        if expose:
            mounts.append(f"mkdir /mnt/expose && mount --bind {_q(expose)} /mnt/expose")
        if state_dir:
            mounts.append(f"mkdir /mnt/state && mount --bind {_q(state_dir)} /mnt/state")
        mounts += [
            f"mount -t tmpfs -o size={limits.tmp_mb}m,mode=1777 tmpfs /tmp",
            f"mount -t tmpfs -o size={min(limits.tmp_mb, 64)}m,mode=1777 tmpfs /dev/shm",
        ]
        mounts += [
            f"mkdir -p {_q(p)} && mount --rbind /mnt/k{i} {_q(p)}" for i, p in enumerate(keep)
        ]
        if expose:  # read-only: a learner cannot plant or change what the other worker reads
            mounts.append(
                f"mkdir -p {EXPOSED_AT} && mount --bind /mnt/expose {EXPOSED_AT} "
                f"&& mount -o remount,bind,ro {EXPOSED_AT}"
            )
            env["EFFKIT_GRADER_DATA"] = EXPOSED_AT
        mounts.append(f"mkdir -m 700 /tmp/work && chown {uid}:{uid} /tmp/work && cd /tmp/work")
        if state_dir:  # after /tmp/work exists, so the folder is inside the working directory
            mounts.append(f"mkdir {STATE_AT} && mount --bind /mnt/state {STATE_AT}")
            env["EFFKIT_GRADER_STATE"] = STATE_AT
        # Last, as root: every other mount of the namespace read-only (the host's /var/tmp, /run/lock
        # and any world-writable folder; see grader/sandbox/seal.py): the worker writes only its own tmpfs.
        own = ["/tmp", "/dev/shm", *([STATE_AT] if state_dir else [])]
        mounts.append(
            " ".join(
                _q(a)
                for a in [
                    sys.executable,
                    "-I",
                    "-S",
                    REPO_ROOT / "grader" / "sandbox" / "seal.py",
                    *own,
                ]
            )
        )
        drop = f"setpriv --reuid={uid} --regid={uid} --clear-groups --no-new-privs --inh-caps=-all"
        # No `exec`: the shell stays the PID namespace's init (root, unreachable to the worker's
        # uid) and reaps the orphans a learner leaves; `exit` keeps sh from exec'ing the last command.
        script = (
            " && ".join(mounts) + " && " + drop + " " + " ".join(_q(a) for a in py) + "; exit $?"
        )
        # A namespace of each kind per sandbox: its own processes only (--pid, --mount-proc: a fresh
        # /proc), its own SysV IPC and POSIX queues (--ipc), no network; --kill-child: if unshare
        # dies, the namespace's init and with it every process inside does too.
        argv = [
            "unshare",
            "--mount",
            "--net",
            "--ipc",
            "--pid",
            "--cgroup",  # rooted at its own cgroup (joined in _preexec): no other grading's in view
            "--fork",
            *_kill_child(),
            "--mount-proc",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
        ]
        if netns is not None:
            argv = ["nsenter", f"--net={netns}", *[a for a in argv if a != "--net"]]
        pidns = True
        env["HOME"] = "/tmp/work"
        env["USER"] = env["LOGNAME"] = USER_NAMES[uid]
        cwd = "/"
    else:
        unavailable += [
            "unprivileged user (not root)",
            "network isolation (unshare -n needs root)",
            "a user of its own for the grader's baseline worker (not root): a learner's process could "
            "signal or renice it",
            "private /tmp tmpfs and hidden course folders (unshare -m needs root)",
            "a read-only view of the host's files: its world-writable folders (/var/tmp, ...) are "
            "shared with other gradings and outlive this one (needs root)",
            "a PID and IPC namespace of its own (needs root): processes and SysV/POSIX IPC of other "
            "gradings are visible",
            "the grader's own code hidden from the worker (unshare -m needs root): it can import and "
            "read the checks and answer keys",
        ]
        workdir = Path(tempfile.mkdtemp(prefix="effkit-worker-"))
        workdir.chmod(0o700)
        env["HOME"] = str(workdir)
        if expose:
            unavailable.append(
                "read-only view of the grader's inputs (the worker could change them)"
            )
            env["EFFKIT_GRADER_DATA"] = str(expose)
        if nodes:
            unavailable.append(
                "the GPU hidden from the worker (only CUDA_VISIBLE_DEVICES, which it could change)"
            )
        if state_dir:  # a link, so the folder is inside the working directory here too
            (workdir / "state").symlink_to(Path(state_dir).resolve(), target_is_directory=True)
            env["EFFKIT_GRADER_STATE"] = str(workdir / "state")
        argv, cwd = py, str(workdir)
    cgroup = None
    name = f"w{os.getpid()}-{uuid.uuid4().hex[:8]}"  # the prefix names us: see sweep_stale_cgroups
    snapshot_overrides()  # the instructor's targets, read before any learner code of this process
    global _swept
    if root and not _swept:  # once per grader process: workers a dead grading left frozen
        _swept = True
        sweep_stale_cgroups()
    try:
        cgroup = Cgroup(name, limits) if root else None
        if cgroup is not None and not cgroup.dirs:
            cgroup = None
    except OSError:
        cgroup = None
    if cgroup is None:
        unavailable.append(
            "cgroup (pids/memory limits, freezer): processes tracked by a /proc walk instead"
        )
        become_subreaper()
    else:
        missing = [c for c in ("pids", "memory", "freezer") if c not in cgroup.dirs]
        unavailable += [f"cgroup controller {c}" for c in missing]
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(*pass_fds, *view_fds),
            start_new_session=True,
            cwd=cwd,
            env=env,
            preexec_fn=_preexec(limits, cgroup, cores),
        )
    finally:
        if log_path:
            log.close()
        for fd in view_fds:  # bwrap holds its own copies
            os.close(fd)
    return Sandbox(proc, cgroup, unavailable, workdir, uid if pidns else None)


class StateFolder:
    """A folder that outlives the workers of one grading (for ``launch(state_dir=...)``: a worker
    killed and restarted must find its checkpoints again). Where the grader is root it is its own
    size-limited tmpfs, so a learner cannot fill the parent's disk or ``/dev/shm`` through it, and
    it costs serialisation, not the disk's mood; elsewhere a private temporary folder, and
    ``unavailable`` says so. ``close()`` unmounts and removes it (idempotent)."""

    def __init__(self, size_mb: int = 128):
        self.path = Path(tempfile.mkdtemp(prefix="effkit-state-"))
        self.path.chmod(0o700)
        self.unavailable: list[str] = []
        self.mounted = False
        if is_root() and shutil.which("mount"):
            done = subprocess.run(
                [
                    "mount",
                    "-t",
                    "tmpfs",
                    "-o",
                    f"size={size_mb}m,mode=0700",
                    "tmpfs",
                    str(self.path),
                ],
                capture_output=True,
                text=True,
            )
            self.mounted = done.returncode == 0
        if not self.mounted:
            self.unavailable.append(
                "a size limit on the checkpoint folder (it is on the grader's disk)"
            )

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False
        shutil.rmtree(self.path, ignore_errors=True)


@functools.cache
def _kill_child() -> list[str]:
    """``--kill-child`` where this unshare has it (util-linux >= 2.32; older GPU images may not):
    without it the cgroup kill, or the session's, still ends the namespace's processes."""
    done = subprocess.run(["unshare", "--help"], capture_output=True, text=True)
    return ["--kill-child"] if "--kill-child" in done.stdout else []


def _kept_under_tmp() -> list[Path]:
    """This repository and the Python installation, where they live under /tmp (outermost only)."""
    tmp = Path("/tmp").resolve()
    paths = {Path(p).resolve() for p in (REPO_ROOT, sys.prefix, sys.base_prefix)}
    under = sorted(p for p in paths if p != tmp and tmp in p.parents)
    return [p for p in under if not any(q in p.parents for q in under)]


def _q(arg) -> str:
    return shlex.quote(str(arg))
