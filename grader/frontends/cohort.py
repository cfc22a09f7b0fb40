"""``python -m grader cohort up|down|status``: a whole cohort on this machine with one command.

JupyterHub (``jupyterhub_config.py`` at the repository root) serves JupyterLab to an instructor and
N learners, each a Unix account (``cohort_host``); nbgrader's exchange is shared between them and
formgrader runs as the instructor's hub service on this repository. ``up`` also releases every
assignment, so learners can fetch at once. State lives in ``course/hub/`` (private to its owner).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path

from grader.common import course
from grader.frontends import (
    cohort_acl,
    cohort_disk,
    cohort_grader,
    cohort_host,
    cohort_limits,
    leaderboard_page,
)
from grader.frontends.autograde import REPO_ROOT, nbgrader_env
from grader.frontends.cohort_plan import COURSE_ID, Plan, load_plan, plan_file, state_dir


def _uids(names: list[str]) -> list[int]:
    found = []
    for name in names:
        try:
            found.append(pwd.getpwnam(name).pw_uid)
        except KeyError:
            pass
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid() -> int | None:
    try:
        pid = int((state_dir() / "jupyterhub.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def _wait_healthy(url: str, hub: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and hub.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/hub/health", timeout=3) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    raise cohort_host.HostError(
        f"JupyterHub did not answer {url}/hub/health; its log ends:\n{tail}"
    )


def release_all(exchange: Path, release_dir: Path) -> list[str]:
    """Every assignment into the gradebook (``nbgrader generate_assignment``, rendered into the
    cohort's own ``release_dir``: exercises/ stays as committed) and into the shared exchange."""
    env = nbgrader_env() | {"EFFKIT_EXCHANGE": str(exchange)}
    where = f"--CourseDirectory.release_directory={release_dir}"
    ids = sorted(
        (
            p.name
            for p in (REPO_ROOT / course.SOURCE_DIR).iterdir()
            if (p / f"{p.name}.ipynb").is_file()
        ),
        key=lambda a: int("".join(ch for ch in a if ch.isdigit()) or 0),
    )
    steps = [["generate_assignment", "*", "--force", where]]
    steps += [["release_assignment", aid, "--force", where] for aid in ids]
    for args in steps:
        done = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise cohort_host.HostError(
                f"nbgrader {' '.join(args[:2])} failed:\n{done.stderr[-2000:]}"
            )
    return ids


def name_students(db_url: str, learners: list[str]) -> None:
    """Every learner into the gradebook with a name (formgrader shows "None, None" for students
    nbgrader adds on collect). DEPLOY: real names from your roster (`nbgrader db student import`)."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, COURSE_ID) as gb:
        for i, name in enumerate(learners, 1):
            gb.update_or_create_student(name, last_name=f"Learner {i}", first_name=name)


def up(
    learners: int = 2,
    port: int = 8000,
    prefix: str = "effkit-",
    exchange: str = "",
    memory_gb: float = 3.0,
    cpus: float = 1.0,
    tmp_mb: int = 512,
    home_gb: float = 4.0,
    exchange_gb: float = 4.0,
) -> int:
    """Start (or report) the cohort; prints the address and where the accounts' passwords are."""
    if _pid() is not None:
        print(
            f"a cohort is already running: {load_plan().url} (`python -m grader cohort down` stops it)"
        )
        return 0
    if (
        importlib.util.find_spec("jupyterhub") is None
    ):  # say what is missing before changing anything
        print("grader cohort: JupyterHub is not installed: pip install -e '.[cohort]'")
        return 2
    try:
        cohort_host.require_root()
        folder = state_dir()
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        names = [f"{prefix}instructor"] + [f"{prefix}learner{i + 1}" for i in range(learners)]
        accounts = folder / "accounts.json"
        cohort_host.make_accounts(names, accounts)
        grader = cohort_grader.make_account(f"{prefix}grader")  # formgrader's, never root
        exchange_dir = Path(
            exchange or os.environ.get("EFFKIT_EXCHANGE") or "/srv/nbgrader/exchange"
        )
        old = load_plan()
        plan = Plan(
            instructor=names[0],
            learners=names[1:],
            url=f"http://127.0.0.1:{port}",
            hub_port=_free_port(),
            proxy_api_port=_free_port(),
            service_port=_free_port(),
            state_dir=str(folder),
            course_dir=str(course.course_dir()),
            exchange=str(exchange_dir),
            learner_config=str(exchange_dir.parent / f"{COURSE_ID}-learner-config"),
            venv_bin=str(Path(sys.executable).parent),
            proxy_command=cohort_host.proxy_command(folder),
            changed_modes=old.changed_modes if old else {},
            disks=old.disks if old else {},  # mounted by an earlier up, whatever this one asks
            memory_mb=int(memory_gb * 1024),
            cpus=cpus,
            tmp_mb=tmp_mb,
            home_mb=int(home_gb * 1024),
            exchange_mb=int(exchange_gb * 1024),
            leaderboard=str(exchange_dir.parent / f"{COURSE_ID}-leaderboard"),
            grader=grader.pw_name,
            grading_socket=str(course.course_dir() / "grading" / "grading.sock"),
        )
        disk_missing = cohort_disk.missing() if plan.home_mb > 0 else "--home-gb 0"
        if disk_missing is None:  # before anything is written into the homes or the exchange
            try:
                plan.disks |= cohort_disk.bound_cohort(
                    names, exchange_dir, folder / "disks", plan.home_mb, plan.exchange_mb
                )
            except cohort_disk.DiskError as err:
                raise cohort_host.HostError(
                    f"a home or the exchange could not get a disk of its own: {err} "
                    "(`--home-gb 0` runs without, on the shared file system)"
                ) from None
        # a `down` locked them; unlocked once their homes are what they will write to
        cohort_host.lock_accounts(names, locked=False)
        cohort_host.make_exchange(exchange_dir)
        cohort_host.write_learner_config(Path(plan.learner_config), COURSE_ID, exchange_dir)
        uids = _uids([*names, grader.pw_name])
        by_acl, opened = cohort_host.open_interpreter_path(Path(sys.executable), uids)
        plan.traverse = {**by_acl, **(old.traverse if old else {})}  # the first up's modes
        cohort_host.restrict_repository(REPO_ROOT, plan.changed_modes)
        plan_file().write_text(json.dumps(asdict(plan), indent=1))
        cohort_grader.reclaim_exchange(exchange_dir / COURSE_ID)  # a restart: the grader's now
        released = release_all(exchange_dir, folder / "release")
        name_students(f"sqlite:///{course.course_dir() / 'gradebook.db'}", plan.learners)
        handed = cohort_grader.hand_over(
            course.course_dir(), folder, exchange_dir / COURSE_ID, grader
        )
        plan.handed = {**handed, **(old.handed if old else {})}  # the first up's owners
        # the grader account passes to the course folder (e.g. under root's 0700 /tmp/pytest-of-root)
        by_acl, _ = cohort_host.open_interpreter_path(course.course_dir(), [grader.pw_uid])
        # ... and lists the repository (closed to learners: 0711), or its Python would not import
        # this checkout's grader from it (an import lists the folder) but whatever else is installed
        by_acl[str(REPO_ROOT)] = plan.traverse.get(
            str(REPO_ROOT), stat.S_IMODE(REPO_ROOT.stat().st_mode)
        )
        cohort_acl.open_to(str(REPO_ROOT), [grader.pw_uid], cohort_acl.LIST | cohort_acl.TRAVERSE)
        by_acl |= cohort_grader.open_sources(REPO_ROOT / course.SOURCE_DIR, grader.pw_uid)
        plan.traverse = {**by_acl, **plan.traverse}
        plan_file().write_text(json.dumps(asdict(plan), indent=1))
        cohort_host.share_folder(Path(plan.leaderboard))
        page = course.course_dir() / "leaderboard" / "index.html"
        if page.is_file():  # the page as last written, until the next `grader leaderboard`
            leaderboard_page.publish_to_cohort(page)
        log = folder / "jupyterhub.log"
        with open(log, "ab") as out:
            hub = subprocess.Popen(
                [
                    str(Path(plan.venv_bin) / "jupyterhub"),
                    "-f",
                    str(REPO_ROOT / "jupyterhub_config.py"),
                ],
                cwd=folder,
                env=dict(
                    os.environ,
                    EFFKIT_COHORT_STATE=str(plan_file()),
                    PATH=f"{plan.venv_bin}:{os.environ.get('PATH', '')}",
                ),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _wait_healthy(plan.url, hub, log)
    except cohort_host.HostError as err:
        print(f"grader cohort up: {err}")
        return 2
    print(f"cohort up at {plan.url}  (log: {log})")
    print(
        f"  instructor: {plan.instructor}  -> formgrader at {plan.url}/services/{COURSE_ID}/formgrader"
    )
    print(f"  learners:   {', '.join(plan.learners)}")
    print(
        f"  formgrader runs as {plan.grader} (no root); gradings go to the root grading service "
        f"on {plan.grading_socket}, signed (`python -m grader cohort verify` checks the gradebook)"
    )
    print(f"  passwords:  {accounts} (readable by you only)")
    print(f"  released:   {', '.join(released)} into {exchange_dir}")
    print(
        f"  leaderboard: `python -m grader leaderboard` publishes it to {plan.leaderboard} "
        "and ~/leaderboard/ in every learner's home (read-only)"
    )
    groups = cohort_limits.kind()
    print(
        f"  per learner: {plan.memory_mb / 1024:g} GiB memory (their /tmp included), "
        f"{plan.cpus:g} CPU, {plan.max_tasks} tasks, private /tmp of {plan.tmp_mb} MiB"
        + ("" if groups else "; memory, CPU and tasks NOT limited: no writable cgroup file system")
        + (
            f", a home of {plan.home_mb / 1024:g} GiB (an image of its own; the exchange "
            f"{plan.exchange_mb / 1024:g} GiB)"
            if disk_missing is None
            else f"; disk NOT bounded ({disk_missing}): homes and the exchange share the host's"
        )
    )
    if plan.traverse:
        print(
            f"  opened to the cohort's accounts (ACL, traverse only; down removes it): "
            f"{', '.join(plan.traverse)}"
        )
    if opened:
        print(
            f"  opened to all accounts (no ACLs on this file system; traverse only, kept after "
            f"down): {', '.join(opened)}"
        )
    print("  stop with:  make cohort down   (or python -m grader cohort down)")
    return 0


def down(remove_accounts: bool = False) -> int:
    """Stop the hub (it stops the proxy, the formgrader service and every learner's server),
    end what the accounts still run, and put back every file mode ``up`` changed."""
    plan, pid = load_plan(), _pid()
    if pid is not None:
        os.killpg(os.getpgid(pid), signal.SIGTERM)
        for _ in range(60):
            if _pid() is None:
                break
            time.sleep(0.5)
        else:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    if plan is None:
        print("no cohort here (nothing in course/hub/cohort.json)")
        return 0
    accounts = [plan.instructor, *plan.learners, *([plan.grader] if plan.grader else [])]
    cohort_host.stop_user_processes(accounts)
    left = cohort_host.stop_processes_of_plan(plan_file())
    cohort_limits.remove(accounts)  # their cgroups, empty now
    uids = _uids(accounts)
    cohort_host.close_interpreter_path(plan.traverse, uids)  # nothing of theirs runs any more
    plan.traverse = {}
    plan_file().write_text(json.dumps(asdict(plan), indent=1))
    (state_dir() / "jupyterhub.pid").unlink(missing_ok=True)
    if remove_accounts:  # no account left that could read the course: its modes go back
        # before userdel: useradd reuses uids, and a new account would own what these left
        places = [*cohort_host.SHARED_TMP, *([Path(plan.exchange)] if plan.exchange else [])]
        cohort_grader.take_back(plan.handed)  # before userdel: root's again, as before up
        plan.handed = {}
        left = cohort_host.remove_files_of(uids, places)
        # homes' images go with their accounts (unmounted first: userdel removes the home); the
        # exchange's image stays in course/hub/disks for the next up
        cohort_disk.release_cohort(plan.disks, drop_homes=True)
        cohort_disk.drop_images(state_dir() / "disks", accounts)  # whatever the plan lost track of
        plan.disks = {}
        cohort_host.remove_accounts(accounts)
        restored = cohort_host.restore_modes(plan.changed_modes)
        plan.changed_modes = {}
        plan_file().write_text(json.dumps(asdict(plan), indent=1))
        print(
            f"removed the accounts {', '.join(accounts)} and their homes; "
            f"{len(restored)} file modes restored; {left} of their files removed from "
            "/tmp and the exchange"
        )
        return 0
    # The accounts stay, so the course stays closed to them (grades, gradebook, other learners'
    # work, solutions) and they are locked: no login until `cohort up` unlocks them
    locked = cohort_host.lock_accounts(accounts)
    print(
        f"cohort down ({'hub stopped' if pid else 'hub was not running'}; {len(locked)} accounts "
        "locked, the course still closed to them"
        + (f"; {left} processes the hub left behind ended" if left else "")
        + ")"
    )
    print(
        "accounts and the exchange are kept: `cohort up` again unlocks them and finds every "
        "submission; `cohort down --remove-accounts` removes them and reopens the folders"
    )
    return 0


def status() -> int:
    plan, pid = load_plan(), _pid()
    if plan is None or pid is None:
        print("no cohort running")
        return 1
    print(f"cohort running at {plan.url} (pid {pid}); learners: {', '.join(plan.learners)}")
    return 0
