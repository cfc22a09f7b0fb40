"""The cohort's machine-side pieces, without starting a hub (the browser test does: make test-cohort).

What learners may read, the modes ``cohort down`` puts back, the learners' Jupyter config (formgrader
off, the course's exchange on) and the hub config that ``jupyterhub_config.py`` builds from a plan.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path

import pytest
from browser_util import running_jupyterlab

from grader.frontends import cohort, cohort_acl, cohort_host

ROOT = Path(__file__).resolve().parents[1]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_repository_is_closed_to_learners_and_down_puts_every_mode_back(tmp_path):
    repo = tmp_path / "repo"
    for name in ("solutions", "course", ".git", "effkit", "grader"):
        (repo / name).mkdir(parents=True)
    repo.chmod(0o755)
    before = {p: _mode(p) for p in [repo, *repo.iterdir()]}
    changed: dict[str, int] = {}
    cohort_host.restrict_repository(repo, changed)
    assert _mode(repo) == 0o711  # learners pass through to effkit/ and grader/, cannot list
    for private in ("solutions", "course", ".git"):
        assert _mode(repo / private) & 0o077 == 0, private
    for public in ("effkit", "grader"):
        assert _mode(repo / public) == 0o755, public
    cohort_host.restrict_repository(repo, changed)  # a second `up` keeps the first originals
    cohort_host.restore_modes(changed)
    assert {p: _mode(p) for p in before} == before


def _course_with_quiz_keys(repo: Path) -> list[Path]:
    """A repository's grader/ with two lessons' quiz keys beside their (open) checks modules."""
    keys = []
    for lesson in ("lesson1", "lesson2"):
        folder = repo / "grader" / "assignments" / lesson
        folder.mkdir(parents=True)
        (folder / "checks.py").write_text("CELL_CHECKS = {}\n")
        (folder / "quiz_key.json").write_text('{"key": {"q1": "a"}}\n')
        keys.append(folder / "quiz_key.json")
    for path in [repo, *repo.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return keys


def test_the_quiz_keys_are_closed_to_learners_and_down_puts_their_modes_back(tmp_path):
    """Learners read grader/ (their Validate runs it), so its quiz keys are closed one by one:
    the learner's own check then says only which questions are unanswered (grader.scoring.quiz)."""
    repo = tmp_path / "repo"
    keys = _course_with_quiz_keys(repo)
    before = {p: _mode(p) for p in [repo, *repo.rglob("*")]}
    changed: dict[str, int] = {}
    cohort_host.restrict_repository(repo, changed)
    for key in keys:
        assert _mode(key) == 0o600 and changed[str(key)] == 0o644, key
    for path in [*repo.rglob("checks.py"), repo / "grader", keys[0].parent]:
        assert _mode(path) == before[path], path  # the rest of grader/ stays open
    cohort_host.restrict_repository(repo, changed)
    cohort_host.restore_modes(changed)
    assert {p: _mode(p) for p in before} == before
    # every key file of this repository is one the patterns close
    ours = {p for p in (ROOT / "grader" / "assignments").glob("*/quiz_key.json")}
    assert len(ours) >= 14
    assert {p for pattern in cohort_host.SEALED for p in ROOT.glob(pattern)} == ours


ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root (other accounts)"
)


def _can_stat(user: str, path: Path) -> bool:
    probe = "import os, sys; os.stat(sys.argv[1])"
    done = subprocess.run(["runuser", "-u", user, "--", sys.executable, "-I", "-c", probe, path])
    return done.returncode == 0


def _can_read(user: str, path: Path) -> bool:
    probe = "import sys; open(sys.argv[1], 'rb').read(1)"
    done = subprocess.run(["runuser", "-u", user, "--", sys.executable, "-I", "-c", probe, path])
    return done.returncode == 0


@ROOT_ONLY
def test_a_learner_account_cannot_read_a_quiz_key_while_root_grades_with_it(tmp_path):
    """As a learner's account after `up`: the lesson's checks module reads, its quiz key does not;
    root (the grading service, autograde) still reads it; `down` gives the account the key back."""
    repo = tmp_path / "repo"
    keys = _course_with_quiz_keys(repo)
    checks = keys[0].parent / "checks.py"
    above = {p: _mode(p) for p in repo.parents}
    try:
        for p in repo.parents:  # pytest's own 0700 folders: passable, as a course's home would be
            p.chmod(_mode(p) | 0o001)
        assert _can_read("nobody", keys[0]) and _can_read("nobody", checks)
        changed: dict[str, int] = {}
        cohort_host.restrict_repository(repo, changed)
        assert _can_read("nobody", checks)  # grader/ stays open: Validate runs it as the learner
        assert not any(_can_read("nobody", key) for key in keys)
        assert all(json.loads(key.read_text())["key"] for key in keys)  # root's grading reads it
        cohort_host.restore_modes(changed)
        assert all(_can_read("nobody", key) for key in keys)
    finally:
        for path, mode in above.items():
            path.chmod(mode)


@ROOT_ONLY
def test_the_way_to_the_interpreter_opens_to_the_cohort_alone_and_down_closes_it(tmp_path):
    """`up` made a 0700 /root o+x for every account and `down` left it so: any account could read
    world-readable files under it by path. Now only the cohort's accounts pass (an ACL entry each),
    and closing puts the folder back as it was."""
    private = tmp_path / "root"
    python = private / "pyenv" / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text("")
    private.chmod(0o700)
    above = {p: _mode(p) for p in private.parents}
    learner, other = pwd.getpwnam("nobody").pw_uid, "daemon"
    try:
        for p in private.parents:  # pytest's own 0700 folders: open to both, as a host would be
            p.chmod(_mode(p) | 0o001)
        by_acl, for_all = cohort_host.open_interpreter_path(python, [learner])
        assert list(by_acl) == [str(private)] and by_acl[str(private)] == 0o700 and not for_all
        assert _mode(private) & 0o007 == 0  # nothing for other accounts
        assert _can_stat("nobody", python) and not _can_stat(other, python)
        cohort_host.close_interpreter_path(by_acl, [learner])
        assert _mode(private) == 0o700 and not _can_stat("nobody", python)
        assert not cohort_acl.traverses(str(private), learner)
    finally:
        for path, mode in above.items():
            path.chmod(mode)


@ROOT_ONLY
def test_a_removed_accounts_files_leave_the_shared_places_before_its_uid_is_reused(tmp_path):
    gone, kept = pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("daemon").pw_uid
    tmp = tmp_path / "tmp"
    (tmp / "theirs" / "deep").mkdir(parents=True)
    (tmp / "theirs" / "deep" / "notes").write_text("x")
    (tmp / "torchinductor_victim").mkdir()  # planted for another learner
    (tmp / "mixed").mkdir()
    (tmp / "mixed" / "other").write_text("y")
    (tmp / "report.json").write_text("{}")
    (tmp / "link").symlink_to("/etc/passwd")
    for path in [tmp / "theirs", tmp / "theirs" / "deep", tmp / "theirs" / "deep" / "notes",
                 tmp / "torchinductor_victim", tmp / "mixed", tmp / "report.json"]:  # fmt: skip
        os.chown(path, gone, gone)
    os.lchown(tmp / "link", gone, gone)
    os.chown(tmp / "mixed" / "other", kept, kept)
    assert cohort_host.remove_files_of([gone], [tmp]) == 6
    assert sorted(p.name for p in tmp.iterdir()) == ["mixed"]
    assert (tmp / "mixed").stat().st_uid == 0 and _mode(tmp / "mixed") == 0o700
    assert (tmp / "mixed" / "other").read_text() == "y" and Path("/etc/passwd").exists()


def test_learners_servers_run_without_formgrader_and_with_the_course_exchange(
    tmp_path, monkeypatch
):
    config = tmp_path / "learner-config"
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    cohort_host.write_learner_config(config, "effkit", exchange)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(config))  # what the hub's spawner sets
    home = tmp_path / "home"
    home.mkdir()
    with running_jupyterlab(home) as server:

        def get(path: str) -> int:
            try:
                with urllib.request.urlopen(
                    f"{server.url}/{path}{'&' if '?' in path else '?'}token={server.token}"
                ) as r:
                    return r.status
            except urllib.error.HTTPError as err:
                return err.code

        formgrader, assignments = (
            get("formgrader/api/assignments"),
            get("assignments?course_id=effkit"),
        )
        log = server.log_tail(20_000)
    assert formgrader == 404, log  # a learner's server has no formgrader
    assert assignments == 200, log  # ... but nbgrader's Assignment List
    nbgrader = (config / "nbgrader_config.py").read_text()
    assert "course_id = 'effkit'" in nbgrader and str(exchange) in nbgrader
    assert "c.Execute.timeout = 600" in nbgrader  # Validate's real checks outlast nbgrader's 30 s
    page = json.loads((config / "labconfig" / "page_config.json").read_text())
    assert page["disabledExtensions"]["@jupyter/nbgrader:formgrader"] is True


def test_the_hub_config_reads_the_plan(tmp_path):
    from traitlets.config.loader import PyFileConfigLoader

    plan = cohort.Plan(
        instructor="t-instructor",
        learners=["t-learner1", "t-learner2"],
        url="http://127.0.0.1:8123",
        hub_port=8124,
        proxy_api_port=8125,
        service_port=8126,
        state_dir=str(tmp_path),
        exchange="/srv/x/exchange",
        learner_config="/srv/x/config",
        venv_bin=str(Path(sys.executable).parent),
        proxy_command="/usr/bin/configurable-http-proxy",
        course_dir=str(tmp_path / "course"),
        grader="t-grader",
        grading_socket=str(tmp_path / "course" / "grading" / "grading.sock"),
    )
    state = tmp_path / "cohort.json"
    state.write_text(json.dumps(asdict(plan)))
    os.environ["EFFKIT_COHORT_STATE"] = str(state)
    try:
        c = PyFileConfigLoader("jupyterhub_config.py", path=str(ROOT)).load_config()
    finally:
        del os.environ["EFFKIT_COHORT_STATE"]
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8123"
    assert c.Authenticator.allowed_users == {"t-instructor", "t-learner1", "t-learner2"}
    service, grading = c.JupyterHub.services
    assert service["name"] == "effkit" and service["cwd"] == str(ROOT)  # named after the course
    assert service["environment"]["EFFKIT_COURSE_DIR"] == str(tmp_path / "course")
    # formgrader as the unprivileged grader account, never root; it grades through root's service
    assert service["user"] == "t-grader" and "--ServerApp.allow_root=True" not in service["command"]
    assert service["environment"]["EFFKIT_GRADING_SOCKET"] == plan.grading_socket
    assert grading["name"] == "effkit-grading" and "url" not in grading and "user" not in grading
    assert grading["command"][-1] == "grader.frontends.grading_service"
    assert c.JupyterHub.load_groups == {"formgrade-effkit": {"users": ["t-instructor"]}}
    assert c.Spawner.environment["JUPYTER_CONFIG_PATH"] == "/srv/x/config"
    assert c.JupyterHub.spawner_class.__name__ == "LimitedSpawner"  # limits per learner


def test_a_plan_from_another_version_still_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFKIT_COURSE_DIR", str(tmp_path / "course"))
    cohort.state_dir().mkdir(parents=True)
    old = {
        "instructor": "i",
        "learners": ["l"],
        "url": "u",
        "hub_port": 1,
        "proxy_api_port": 2,
        "service_port": 3,
        "state_dir": "s",
        "exchange": "e",
        "learner_config": "c",
        "venv_bin": "v",
        "proxy_command": "p",
        "changed_modes": {"/x": 0o755},
        "a_field_from_later": True,
    }
    cohort.plan_file().write_text(json.dumps(old))
    plan = cohort.load_plan()
    assert plan.changed_modes == {"/x": 0o755} and plan.course_dir == ""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root")
def test_down_locks_the_accounts_it_keeps_and_up_unlocks_them(tmp_path):
    """After `cohort down` the learner accounts stayed with passwords and shells, and the course was
    reopened to them: as learner 2, the gradebook, grades and learner 1's work were readable. Now
    down locks them (no login: password locked, account expired) and keeps the course closed."""
    name = "effkit-locktest"
    subprocess.run(["userdel", "--remove", name], capture_output=True)
    try:
        cohort_host.make_accounts([name], tmp_path / "accounts.json")

        def shadow() -> list[str]:
            line = next(
                x for x in Path("/etc/shadow").read_text().splitlines() if x.startswith(name + ":")
            )
            return line.split(":")

        assert not shadow()[1].startswith("!")
        assert cohort_host.lock_accounts([name, "effkit-no-such-user"]) == [name]
        locked = shadow()
        assert locked[1].startswith("!") and locked[7] == "1", locked  # expired on 2 Jan 1970
        assert cohort_host.lock_accounts([name], locked=False) == [name]
        unlocked = shadow()
        assert not unlocked[1].startswith("!") and unlocked[7] == "", unlocked
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)


def test_down_keeps_the_course_closed_while_the_accounts_exist(tmp_path, monkeypatch):
    """down restores the folders' modes only with --remove-accounts; otherwise it locks the accounts."""
    repo = tmp_path / "repo"
    (repo / "course").mkdir(parents=True)
    changed: dict[str, int] = {}
    cohort_host.restrict_repository(repo, changed)
    plan = cohort.Plan(
        instructor="t", learners=["a", "b"], url="http://127.0.0.1:8000", hub_port=1,
        proxy_api_port=2, service_port=3, state_dir=str(tmp_path), exchange="", learner_config="",
        venv_bin="", proxy_command="", changed_modes=changed,
    )  # fmt: skip
    calls = []
    monkeypatch.setattr(cohort, "load_plan", lambda: plan)
    monkeypatch.setattr(cohort, "_pid", lambda: None)
    monkeypatch.setattr(cohort, "plan_file", lambda: tmp_path / "plan.json")
    monkeypatch.setattr(cohort, "state_dir", lambda: tmp_path)
    monkeypatch.setattr(cohort_host, "stop_user_processes", lambda names: None)
    monkeypatch.setattr(cohort_host, "lock_accounts", lambda names: calls.append(names) or names)
    monkeypatch.setattr(cohort_host, "remove_accounts", lambda names: calls.append(("rm", names)))
    assert cohort.down() == 0
    assert calls == [["t", "a", "b"]] and _mode(repo / "course") & 0o077 == 0
    assert cohort.down(remove_accounts=True) == 0
    assert calls[-1] == ("rm", ["t", "a", "b"]) and _mode(repo / "course") & 0o077 != 0


def test_the_cohort_names_its_learners_in_the_gradebook(tmp_path, monkeypatch):
    """Formgrader listed the cohort's learners as "None, None" (nbgrader adds them on collect)."""
    from nbgrader.api import Gradebook

    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")  # alembic
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    cohort.name_students(db, ["ek-learner1", "ek-learner2"])
    cohort.name_students(db, ["ek-learner1", "ek-learner2"])  # every `up` again: no duplicates
    with Gradebook(db) as gb:
        names = {s.id: (s.last_name, s.first_name) for s in gb.students}
    assert names == {
        "ek-learner1": ("Learner 1", "ek-learner1"),
        "ek-learner2": ("Learner 2", "ek-learner2"),
    }


def test_down_ends_what_the_hub_left_in_sessions_of_its_own_and_nothing_else(tmp_path):
    """A hub that died leaves its proxy and root's grading service running (their own sessions:
    killing the hub's group misses them; leftovers piled up across test runs). ``down`` finds them
    by the plan in their environment, and leaves a shell that merely carries the variable alone."""
    plan = tmp_path / "cohort.json"
    base = dict(os.environ, EFFKIT_COHORT_STATE=str(plan))
    proxy = subprocess.Popen(["sleep", "60"], env=base | {"CONFIGPROXY_AUTH_TOKEN": "t"})
    service = subprocess.Popen(["sleep", "60"], env=base | {"JUPYTERHUB_SERVICE_NAME": "x"})
    shell = subprocess.Popen(["sleep", "60"], env=base)
    other = subprocess.Popen(
        ["sleep", "60"],
        env=dict(
            os.environ, EFFKIT_COHORT_STATE=str(tmp_path / "other.json"), CONFIGPROXY_AUTH_TOKEN="t"
        ),
    )
    try:
        assert cohort_host.stop_processes_of_plan(plan) == 2
        assert proxy.wait(timeout=10) == -9 and service.wait(timeout=10) == -9
        assert shell.poll() is None and other.poll() is None
    finally:
        for proc in (proxy, service, shell, other):
            proc.kill()
            proc.wait()
