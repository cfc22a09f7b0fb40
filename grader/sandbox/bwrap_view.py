"""A worker's file view built by bubblewrap: an empty root with only what the worker needs, read-only.

The ``unshare`` path shows the host minus masked paths, so another readable checkout of the course (an
instructor's clone, a backup under /srv) stays reachable by path (issue 52 §2). Here the root is empty:
the system folders, the Python installation, the repository view (``learner_view``: worker modules and
effkit with the lesson's answers withheld) and the grading's inputs are bound read-only; ``/tmp`` and
``/dev/shm`` are size-capped tmpfs; ``/dev`` is minimal, GPU nodes bound only when granted; no cgroup
file system. Where bwrap is missing (a GPU image without network) or ``EFFKIT_SANDBOX_VIEW=unshare``,
the ``unshare`` view stays and every report says so (:data:`MISSING`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from grader.sandbox import learner_view
from grader.sandbox.learner_view import (
    REPO_ROOT,
    effkit_files,
    module_file,
    other_copies,
    withheld_files,
    withheld_source,
)

# The system's own files (programs, libraries, configuration, the kernel's read-only views); on a
# merged-/usr system the /bin, /lib... entries are links, made again as links inside.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")


MISSING = (
    "an allow-list file view (bubblewrap is not installed, or EFFKIT_SANDBOX_VIEW=unshare): the worker "
    "sees the host's files less the course's, so another readable copy of the course on this machine "
    "is reachable by path"
)


def wanted() -> bool:
    """Whether this grader builds views with bubblewrap: installed, and not turned off."""
    return os.environ.get("EFFKIT_SANDBOX_VIEW") != "unshare" and shutil.which("bwrap") is not None


def unavailable_here() -> list[str]:
    """What a root grader's reports list about the file view on this machine: nothing, or MISSING."""
    return [] if wanted() else [MISSING]


def prefixes() -> list[str]:
    """The Python installation this grader runs (a venv and the one it was made from), resolved."""
    return sorted({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix)})


def data_fd(text: str) -> int:
    """A memfd holding ``text``, at offset 0, for ``--ro-bind-data`` (no file on the host)."""
    fd = os.memfd_create("effkit-view", os.MFD_CLOEXEC)
    os.write(fd, text.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def view_args(
    *,
    lesson: str | None,
    grader_only: bool,
    gpu_nodes: list[str],
    tmp_mb: int,
    hidden: list[Path],
    expose: Path | None,
    exposed_at: str,
    state_dir: Path | None,
    state_at: str,
    root: Path = REPO_ROOT,
) -> tuple[list[str], list[int]]:
    """bwrap's mount arguments for one worker, and the descriptors they read (pass them, then close
    them in the parent). ``gpu_nodes``: the device nodes bound (none for a worker without the GPU)."""
    args: list[str] = []
    fds: list[int] = []
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    # not even another grading's cgroup names: the cgroup namespace roots the worker at its own group
    args += ["--size", "1024", "--perms", "0000", "--tmpfs", "/sys/fs/cgroup"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(min(tmp_mb, 64) << 20), "--perms", "1777", "--tmpfs", "/dev/shm"]
    for node in gpu_nodes:
        args += ["--dev-bind", node, node]
    args += ["--size", str(tmp_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--perms", "0700", "--dir", "/tmp/work"]
    # the Python installation (a venv and the one it was made from), wherever it lives
    for prefix in prefixes():
        args += ["--ro-bind", prefix, prefix]
    # an installed copy of the course inside that installation (site-packages) is not ours to show
    for copy in [*other_copies("grader", root), *other_copies("effkit", root)]:
        if any(Path(pre) in copy.parents for pre in prefixes()):
            args += ["--size", "1024", "--perms", "0000", "--tmpfs", str(copy)]
    # runs no learner code: the repository whole, the course's private folders hidden
    if grader_only:
        args += ["--ro-bind", str(root), str(root)]
        for path in hidden:
            if root.resolve() in path.resolve().parents:
                args += ["--size", "1024", "--perms", "0000", "--tmpfs", str(path)]
    else:
        args += _repository_view(root, lesson, fds)
    # the course's data sets, for the grader's own workers: a learner's finds none in any worker
    # (launch.learner_env), so that no folder tells the probe worker from the timed one
    data = os.environ.get("EFFKIT_DATA")
    if grader_only and data and Path(data).is_dir():
        args += ["--ro-bind", str(Path(data).resolve()), data]
    if expose is not None:
        args += ["--ro-bind", str(expose), exposed_at]
    if state_dir is not None:
        args += ["--bind", str(state_dir), state_at]
    return with_parents(args), fds


BINDS = ("--ro-bind", "--bind", "--dev-bind", "--ro-bind-data")


def with_parents(args: list[str]) -> list[str]:
    """``args`` with a ``--dir`` (0755) before each bind for every folder above its destination that
    nothing bound yet: bwrap makes missing ones itself, but with the grader's umask (0700 under 077),
    which would shut the worker's user out of its own Python and view."""
    out: list[str] = []
    made: set[str] = {"/"}
    bound: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in BINDS:
            dest = args[i + 2]
            for parent in reversed(Path(dest).parents):
                p = str(parent)
                if p not in made and not any(p == b or p.startswith(b + "/") for b in bound):
                    out += ["--perms", "0755", "--dir", p]
                    made.add(p)
            bound.append(dest)
            out += args[i : i + 3]
            i += 3
        else:
            if args[i] in ("--dir", "--tmpfs") and i + 1 < len(args):
                made.add(args[i + 1])  # made with its own mode (/tmp/work: 0700)
            out.append(args[i])
            i += 1
    return out


def _repository_view(root: Path, lesson: str | None, fds: list[int]) -> list[str]:
    """One read-only bind per file a learner's worker may read; withheld answers as masked copies."""
    args: list[str] = []
    for name in learner_view.WORKER_MODULES:  # read now: a test adds its own worker module
        src = module_file(name, root)
        args += ["--ro-bind", str(src), str(src)]
    withheld = withheld_files(root, lesson)
    for src in effkit_files(root):
        if src in withheld:
            fd = data_fd(withheld_source(src, list(withheld[src]), lesson or "", withheld[src]))
            fds.append(fd)
            args += ["--perms", "0644", "--ro-bind-data", str(fd), str(src)]
        else:
            args += ["--ro-bind", str(src), str(src)]
    return args


def command(
    args: list[str], *, uid: int, loopback: bool, netns: str | None, py: list[str], loopback_up: str
) -> list[str]:
    """The whole command line: a network namespace of its own (loopback down unless ``loopback``) or
    ``netns`` joined, bwrap with every other namespace, then as root inside only what needs root
    (the working folder handed to ``uid``, the loopback) before ``setpriv`` drops to ``uid``."""
    drop = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
    ]
    inside = f"chown {uid}:{uid} /tmp/work && cd /tmp/work && "
    caps = ["CAP_CHOWN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]
    if loopback and netns is None:
        inside += f"{_q(sys.executable)} -I -S -c {_q(loopback_up)} && "
        caps.append("CAP_NET_ADMIN")
    inside += "exec " + " ".join(_q(a) for a in [*drop, *py])
    # bwrap brings a loopback up in a network namespace it makes: the namespace is made outside it
    outer = ["nsenter", f"--net={netns}"] if netns is not None else ["unshare", "--net"]
    bwrap = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup"]
    bwrap += ["--die-with-parent", *[a for c in caps for a in ("--cap-add", c)], *args]
    return [*outer, *bwrap, "sh", "-c", inside]


def _q(arg) -> str:
    return shlex.quote(str(arg))
