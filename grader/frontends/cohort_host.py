"""The machine side of a cohort: Unix accounts, who may read what, the exchange, the learners' config.

Learners are separate Unix users because that is what keeps them apart: nbgrader's exchange and
JupyterHub's local spawner both rest on file ownership. The course repository stays its owner's:
learners may run its interpreter and import effkit and grader (open source), never read solutions/,
course/ (gradebook, submissions, feedback), the quizzes' keys or the git history. Every mode the
repository's folders and files change is recorded so ``cohort down`` puts it back.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
from pathlib import Path

from grader.frontends import cohort_acl

# Closed to learners: the reference solutions, the private course folder, tests (they carry
# reference submissions), benchmarks and the history of all of them.
PRIVATE = ("solutions", "course", "tests", "benchmarks", "runs", ".git")
# ... and, inside grader/ (open: their Validate runs it), the quizzes' keys: the learner's own check
# then says only which questions have no answer (grader.scoring.quiz); root's grading service,
# which runs autograde, reads them.
SEALED = ("grader/assignments/*/quiz_key.json",)


class HostError(RuntimeError):
    """The machine cannot host a cohort as asked; the message says what to do."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise HostError(
            "a cohort makes one Unix account per learner (useradd) and runs JupyterHub's local "
            "spawner, which switches to those accounts: run it as root (on a course VM or container)"
        )


def make_accounts(names: list[str], accounts_file: Path) -> dict[str, str]:
    """Create the Unix users that do not exist yet; each keeps the password ``accounts_file`` has
    for it, or gets a random one.

    Passwords go to ``accounts_file`` (mode 0600, readable by the instructor's account only)."""
    if shutil.which("useradd") is None or shutil.which("chpasswd") is None:
        raise HostError("useradd and chpasswd are needed (Debian: the passwd package)")
    try:  # a restart keeps everyone's password; only new accounts get one
        kept = json.loads(accounts_file.read_text())
    except (FileNotFoundError, ValueError):
        kept = {}
    passwords = {}
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(
                ["useradd", "--create-home", "--shell", "/bin/bash", name],
                check=True,
                capture_output=True,
            )
        # Debian's useradd leaves homes world-readable (HOME_MODE unset): B could read A's notebooks
        os.chmod(pwd.getpwnam(name).pw_dir, 0o700)
        passwords[name] = kept.get(name) or secrets.token_urlsafe(12)
    lines = "".join(f"{n}:{p}\n" for n, p in passwords.items())
    subprocess.run(["chpasswd"], input=lines, text=True, check=True, capture_output=True)
    fd = os.open(accounts_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(passwords, fh, indent=1)
    return passwords


def _set_mode(path: Path, mode: int, changed: dict[str, int]) -> None:
    old = stat.S_IMODE(path.stat().st_mode)
    if old != mode:
        changed.setdefault(str(path), old)
        path.chmod(mode)


def restrict_repository(repo: Path, changed: dict[str, int]) -> None:
    """Learners may traverse the repository (to import effkit and grader) but not list it, and
    the private folders and the sealed files are closed to them."""
    _set_mode(repo, stat.S_IMODE(repo.stat().st_mode) & ~0o044 | 0o011, changed)
    paths = [repo / name for name in PRIVATE]
    paths += sorted(p for pattern in SEALED for p in repo.glob(pattern) if not p.is_symlink())
    for path in paths:
        if path.exists():
            _set_mode(path, stat.S_IMODE(path.stat().st_mode) & ~0o077, changed)


def open_interpreter_path(python: Path, uids: list[int]) -> tuple[dict[str, int], list[str]]:
    """Learners' kernels run the course's interpreter: every folder above it must let them pass
    (e.g. pyenv under a 0700 /root). Each such folder gets an ACL entry per cohort account
    (traverse only, ``cohort_acl``), which ``close_interpreter_path`` removes; where the file system
    has no ACLs, the traverse bit for all (o+x), kept after ``down`` as before: taking it away under
    a running grading broke that grading's workers. Returns ({folder: mode before}, folders o+x)."""
    by_acl, for_all = {}, []
    for folder in reversed(Path(os.path.realpath(python)).parents):
        mode = stat.S_IMODE(folder.stat().st_mode)
        if mode & 0o001:
            continue
        try:
            cohort_acl.open_to(str(folder), uids)
            by_acl[str(folder)] = mode
        except OSError:
            folder.chmod(mode | 0o001)
            for_all.append(str(folder))
    return by_acl, for_all


def close_interpreter_path(opened: dict[str, int], uids: list[int]) -> None:
    for folder, mode in opened.items():
        try:
            cohort_acl.close_to(folder, uids, mode)
        except FileNotFoundError:
            pass


def restore_modes(changed: dict[str, int]) -> list[str]:
    restored = []
    for path, mode in changed.items():
        try:
            os.chmod(path, mode)
            restored.append(path)
        except FileNotFoundError:
            pass
    return restored


def make_exchange(exchange: Path) -> None:
    """nbgrader's shared exchange: world-writable with the sticky bit (its documented setup), so
    every learner can submit and nobody can delete another's files."""
    exchange.mkdir(parents=True, exist_ok=True)
    exchange.chmod(0o1777)
    for parent in exchange.parents:
        if parent == Path("/"):
            break
        parent.chmod(stat.S_IMODE(parent.stat().st_mode) | 0o005)


VALIDATE_TIMEOUT_S = 600


def write_learner_config(folder: Path, course_id: str, exchange: Path) -> None:
    """What every learner's JupyterLab reads (JUPYTER_CONFIG_PATH): the course and exchange, and
    formgrader switched off (it would find nothing: the course folder is closed to learners)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {course_id!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        # Validate runs the grader's real checks (one `grader check`, minutes on a learner's CPU
        # share): nbgrader's default 30 s per cell interrupted it on 1 core (make test-cohort)
        f"c.Execute.timeout = {VALIDATE_TIMEOUT_S}\n"
    )
    server = {
        "ServerApp": {
            "jpserver_extensions": {
                "nbgrader.server_extensions.formgrader": False,
                "nbgrader.server_extensions.course_list": False,
            }
        }
    }
    (folder / "jupyter_server_config.json").write_text(json.dumps(server, indent=1))
    labconfig = folder / "labconfig"
    labconfig.mkdir(exist_ok=True)
    disabled = {
        f"@jupyter/nbgrader:{name}": True
        for name in ("formgrader", "create-assignment", "course-list")
    }
    (labconfig / "page_config.json").write_text(
        json.dumps({"disabledExtensions": disabled}, indent=1)
    )
    for path in [folder, labconfig, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def share_folder(folder: Path) -> None:
    """A folder every account reads and none but root writes (the published leaderboard)."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, 0, 0)
    folder.chmod(0o755)


def copy_into_homes(page: Path, learners: list[str], folder: str = "leaderboard") -> list[str]:
    """``page`` as ``~/<folder>/<name>`` for each learner: a root-owned 0755 folder with a 0644 copy,
    which JupyterLab opens (its file server refuses a symlink out of the home). The home is the
    learner's, so every step is relative to descriptors opened without following links, and a
    folder by that name that is not root's is left alone. Returns the learners served."""
    data, served = page.read_bytes(), []
    for name in learners:
        try:
            home = os.open(pwd.getpwnam(name).pw_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except (KeyError, OSError):
            continue
        try:
            try:
                os.mkdir(folder, 0o755, dir_fd=home)
            except FileExistsError:
                pass
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=home)
        except OSError:
            os.close(home)
            continue
        try:
            if os.fstat(fd).st_uid != 0:
                continue  # the learner's own folder by that name: theirs, not ours to write in
            os.fchmod(fd, 0o755)
            tmp = f".{page.name}.{os.getpid()}"
            out = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd
            )
            try:
                with os.fdopen(out, "wb") as fh:
                    fh.write(data)
            except OSError:  # their home is full (its own file system): the others still get it
                os.unlink(tmp, dir_fd=fd)
                continue
            os.rename(tmp, page.name, src_dir_fd=fd, dst_dir_fd=fd)
            served.append(name)
        finally:
            os.close(fd)
            os.close(home)
    return served


def proxy_command(state_dir: Path) -> str:
    """configurable-http-proxy (JupyterHub's proxy, an npm package): the one on PATH, else
    installed once into the cohort's state folder from the npm registry."""
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    local = state_dir / "node_modules" / ".bin" / "configurable-http-proxy"
    if not local.exists():
        if shutil.which("npm") is None:
            raise HostError(
                "JupyterHub's proxy needs Node.js and npm (Debian: apt-get install npm)"
            )
        print("installing configurable-http-proxy from the npm registry (once) ...", flush=True)
        done = subprocess.run(
            ["npm", "install", "--prefix", str(state_dir), "--no-audit", "--no-fund", "--silent"]
            + ["configurable-http-proxy@5"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not local.exists():
            raise HostError(
                f"npm could not install configurable-http-proxy:\n{done.stderr[-2000:]}"
            )
    return str(local)


def stop_user_processes(names: list[str]) -> None:
    """Whatever a learner account still runs after the hub stopped (a kernel's child, a runaway
    job) ends with the cohort."""
    for name in names:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)


HUB_CHILD_MARKS = (b"JUPYTERHUB_SERVICE_NAME=", b"CONFIGPROXY_AUTH_TOKEN=")


def stop_processes_of_plan(plan_file: Path) -> int:
    """Kill what the hub started as root in sessions of its own, the proxy and the grading service:
    a hub that crashed or was killed leaves them running (leftovers piled up across test runs).
    They are found by the plan in their environment, which ``up`` gives the hub and they inherit.
    Returns how many were killed."""
    mark, killed = f"EFFKIT_COHORT_STATE={plan_file}".encode(), 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            # the hub's own children only, never a shell that happens to carry the variable
            if mark not in environ or not any(e.startswith(HUB_CHILD_MARKS) for e in environ):
                continue
            os.kill(int(proc.name), 9)
            killed += 1
        except (OSError, ProcessLookupError):
            pass
    return killed


def lock_accounts(names: list[str], locked: bool = True) -> list[str]:
    """Lock (or unlock) the accounts: no password login, expired, so no new session starts while the
    course is down; ``up`` unlocks them. Returns the accounts changed."""
    done = []
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        flags = ["--lock", "--expiredate", "1"] if locked else ["--unlock", "--expiredate", ""]
        subprocess.run(["usermod", *flags, name], check=True, capture_output=True)
        done.append(name)
    return done


SHARED_TMP = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


def remove_files_of(uids: list[int], places: list[Path]) -> int:
    """Remove everything the uids own under ``places`` (never following links, never leaving the
    file system), deepest first; a folder of theirs that holds another account's files goes to root
    (0700) instead. Returns how many entries were removed."""
    removed, owned = 0, set(uids)
    for place in places if owned else []:
        if not place.is_dir():
            continue
        device = place.stat().st_dev
        for folder, dirs, files in os.walk(place, topdown=False):
            for name in files + dirs:
                path = os.path.join(folder, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                if st.st_uid not in owned or st.st_dev != device:
                    continue
                try:
                    os.rmdir(path) if stat.S_ISDIR(st.st_mode) else os.unlink(path)
                    removed += 1
                except OSError:  # a folder still holding others' files
                    os.lchown(path, 0, 0)
                    os.chmod(path, 0o700)
    return removed


def remove_accounts(names: list[str]) -> None:
    for name in names:
        subprocess.run(["userdel", "--remove", name], capture_output=True)
