"""The cohort's root grading service and the unprivileged grader account, with real Unix accounts.

A grader account (formgrader's), two learners and the service as ``cohort up`` sets them up (the
course folder handed over by ``cohort_grader``, the service started as root on its socket). The
grader gets a signed grading of a learner's own submission; nothing else: unknown assignments,
students without a collected submission, a collected copy that is not the learner's own, a
submission filed under another learner's name. A learner cannot reach the socket, nor talk to the
service where the socket is opened to all (SO_PEERCRED). The grader cannot read the signing key,
write or move the signed gradings, and a score it edits in the gradebook is found by the audit.
Before: no service; formgrader ran as root. Cost: ~20 s (one lesson 1 grading of a text file).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from grader.frontends import cohort_grader, grading_audit, grading_signature
from grader.frontends.cohort_plan import Plan

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd (real accounts, as `cohort up` makes them)",
)

ASK = r"""
import json, sys
from grader.frontends import grading_client
try:
    print(json.dumps(grading_client.request(sys.argv[1], sys.argv[2], sys.argv[3], timeout_s=300)))
except OSError as err:
    print(json.dumps({"oserror": err.__class__.__name__}))
"""


def as_user(user: str, code: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", f"PYTHONPATH={ROOT}", sys.executable, "-c", code]
        + list(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )


def ask(world, user: str, aid: str, student: str) -> dict:
    done = as_user(user, ASK, str(world["socket"]), aid, student)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _submit(exchange: Path, learner: str, filed_as: str, text: str) -> None:
    """As nbgrader submit does: a record folder in inbound, owned by the account that submits."""
    code = (
        "import os, sys\n"
        "d = os.path.join(sys.argv[1], sys.argv[2])\n"
        "os.mkdir(d)\n"
        "open(os.path.join(d, 'lesson1.ipynb'), 'w').write(sys.argv[3])\n"
    )
    record = f"{filed_as}+lesson1+2026-01-01 00:00:0{secrets.randbelow(10)}.{secrets.token_hex(3)}"
    done = as_user(learner, code, str(exchange / "effkit" / "inbound"), record, text)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tag = secrets.token_hex(2)
    grader_name, l1, l2 = f"eks{tag}-grader", f"eks{tag}-l1", f"eks{tag}-l2"
    base = Path(f"/srv/effkit-gs-{tag}")
    course, exchange = base / "course", base / "exchange"
    service = None
    try:
        for name in (l1, l2):
            subprocess.run(["useradd", "--create-home", name], check=True, capture_output=True)
        grader = cohort_grader.make_account(grader_name)
        (course / "hub").mkdir(parents=True, mode=0o700)
        (exchange / "effkit" / "inbound").mkdir(parents=True)
        os.chmod(base, 0o755)
        os.chmod(exchange, 0o1777)
        os.chmod(exchange / "effkit" / "inbound", 0o2733)  # nbgrader's inbound: write, no list
        plan = Plan(
            instructor="x", learners=[l1, l2], url="http://127.0.0.1:1", hub_port=1,
            proxy_api_port=2, service_port=3, state_dir=str(course / "hub"),
            exchange=str(exchange), learner_config="/nonexistent",
            venv_bin=str(Path(sys.executable).parent), proxy_command="chp",
            course_dir=str(course), grader=grader_name,
            grading_socket=str(course / "grading" / "grading.sock"),
        )  # fmt: skip
        (course / "hub" / "cohort.json").write_text(json.dumps(asdict(plan)))
        cohort_grader.hand_over(course, course / "hub", exchange / "effkit", grader)
        env = dict(os.environ, EFFKIT_COURSE_DIR=str(course), PYTHONPATH=str(ROOT))
        service = subprocess.Popen(
            [sys.executable, "-m", "grader.frontends.grading_service"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        sock = Path(plan.grading_socket)
        for _ in range(300):
            if sock.exists() or service.poll() is not None:
                break
            time.sleep(0.1)
        assert sock.exists(), service.communicate(timeout=10)[0]
        yield {"course": course, "exchange": exchange, "socket": sock, "grader": grader_name,
               "l1": l1, "l2": l2}  # fmt: skip
    finally:
        if service is not None:
            service.kill()
            service.wait()
        for name in (l1, l2, grader_name):
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _collect(world, learner: str, text: str) -> None:
    """As formgrader's collect does, as the grader account: the copy in submitted/."""
    code = (
        "import os, sys\n"
        "d = os.path.join(sys.argv[1], 'submitted', sys.argv[2], 'lesson1')\n"
        "os.makedirs(d, exist_ok=True)\n"
        "open(os.path.join(d, 'lesson1.ipynb'), 'w').write(sys.argv[3])\n"
    )
    done = as_user(world["grader"], code, str(world["course"]), learner, text)
    assert done.returncode == 0, done.stderr


def test_the_grader_gets_a_signed_grading_of_a_learners_own_submission(world):
    _submit(world["exchange"], world["l1"], world["l1"], "my answers: 42\n")
    _collect(world, world["l1"], "my answers: 42\n")
    answer = ask(world, world["grader"], "lesson1", world["l1"])
    assert "signed" in answer, answer
    report = grading_signature.verify(
        grading_signature.load_verifier(world["course"]), answer["signed"]
    )
    assert (report["assignment"], report["student"]) == ("lesson1", world["l1"])
    assert report["status"] == "failed" and "not a valid notebook" in report["reason"], report
    kept = world["course"] / "signed" / "lesson1" / f"{world['l1']}.json"
    assert json.loads(kept.read_text()) == answer["signed"] and kept.stat().st_uid == 0
    # one changed point and the signature no longer holds
    forged = json.loads(json.dumps(answer["signed"]))
    forged["report"]["status"], forged["report"]["total"] = "graded", 12.0
    with pytest.raises(ValueError):
        grading_signature.verify(grading_signature.load_verifier(world["course"]), forged)


@pytest.mark.parametrize(
    "aid, who, why",
    [
        ("lesson99", "l1", "unknown assignment"),
        ("../../../etc/shadow", "l1", "unknown assignment"),
        ("lesson1", "l2", "no collected submission"),
        ("lesson1", "root", "not a learner of this cohort"),
    ],
)
def test_the_service_grades_only_known_assignments_of_learners_with_a_submission(
    world, aid, who, why
):
    answer = ask(world, world["grader"], aid, world.get(who, who))
    assert why in answer.get("refused", ""), answer


def test_a_collected_copy_that_is_not_the_learners_own_submission_is_refused(world):
    # learner 2 files a submission under learner 1's name, and the grader collects it (or
    # writes one itself): neither is learner 1's own, so the service grades neither
    _submit(world["exchange"], world["l2"], world["l1"], "learner 2 was here\n")
    _collect(world, world["l1"], "learner 2 was here\n")
    answer = ask(world, world["grader"], "lesson1", world["l1"])
    assert "none of" in answer.get("refused", ""), answer
    _collect(world, world["l1"], "my answers: 42\n")  # learner 1's own again


def test_a_learner_cannot_reach_the_service_even_through_an_open_socket(world):
    assert ask(world, world["l1"], "lesson1", world["l1"]) == {"oserror": "PermissionError"}
    folder, sock = world["socket"].parent, world["socket"]
    try:  # a mistake opens the socket to all: the service still checks who calls
        for path, mode in ((world["course"], 0o1771), (folder, 0o755), (sock, 0o666)):
            path.chmod(mode)
        answer = ask(world, world["l1"], "lesson1", world["l1"])
    finally:
        for path, mode in ((world["course"], 0o1770), (folder, 0o750), (sock, 0o660)):
            path.chmod(mode)
    assert "only the course's grader account" in answer.get("refused", ""), answer


def test_the_grader_can_neither_become_root_nor_touch_what_root_signs(world):
    probe = r"""
import json, os, subprocess, sys
course = sys.argv[1]
out = {"uid": os.getuid(), "euid": os.geteuid()}
for name, act in [
    ("read the signing key", lambda: open(f"{course}/hub/grading-signer.key", "rb").read()),
    ("read the course key", lambda: open(f"{course}/grader.key", "rb").read()),
    ("write a signed grading", lambda: open(f"{course}/signed/lesson1/x.json", "w")),
    ("move the signed gradings", lambda: os.rename(f"{course}/signed", f"{course}/mine")),
    ("replace the public key", lambda: os.rename(f"{course}/gradebook.db", f"{course}/grading-signer.pub")),
    ("move the socket's folder", lambda: os.rename(f"{course}/grading", f"{course}/g2")),
]:
    try:
        act()
        out[name] = "DONE"
    except OSError as err:
        out[name] = type(err).__name__
for cmd in (["sudo", "-n", "true"], ["su", "-c", "true", "root"]):
    try:
        out[cmd[0]] = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=20).returncode
    except FileNotFoundError:
        out[cmd[0]] = "absent"
print(json.dumps(out))
"""
    Path(world["course"], "gradebook.db").touch()
    os.chown(Path(world["course"], "gradebook.db"), pwd.getpwnam(world["grader"]).pw_uid, -1)
    done = as_user(world["grader"], probe, str(world["course"]))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out.pop("uid") == out.pop("euid") == pwd.getpwnam(world["grader"]).pw_uid != 0
    assert out.pop("sudo") != 0 and out.pop("su") != 0, out
    assert set(out.values()) == {"PermissionError"}, out


def test_a_score_the_grader_edits_in_the_gradebook_is_found(world, monkeypatch):
    """The gradebook holds what the service signed; the grader changes a score with sqlite."""
    from nbgrader.api import Gradebook

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # alembic

    course, l1 = world["course"], world["l1"]
    db = course / "gradebook.db"
    db.unlink(missing_ok=True)
    signed = json.loads((course / "signed" / "lesson1" / f"{l1}.json").read_text())
    signed["report"]["cells"] = [{"grade_id": "cell_a", "points": 2.0, "max_points": 2.0}]
    key = grading_signature.load_signer(course / "hub", course)  # as the service signs
    path = course / "signed" / "lesson1" / f"{l1}.json"
    path.write_text(json.dumps(grading_signature.sign(key, signed["report"])))
    with Gradebook(f"sqlite:///{db}", "effkit") as gb:
        gb.add_assignment("lesson1")
        gb.add_notebook("lesson1", "lesson1")
        gb.add_grade_cell("cell_a", "lesson1", "lesson1", max_score=2, cell_type="code")
        gb.add_student(l1)
        gb.add_submission("lesson1", l1)
        grade = gb.find_grade("cell_a", "lesson1", "lesson1", l1)
        grade.auto_score = 2.0
        gb.db.commit()
    os.chown(db, pwd.getpwnam(world["grader"]).pw_uid, -1)  # formgrader's, as after up
    found = grading_audit.audit(course, f"sqlite:///{db}", "effkit")
    assert found.problems == [] and found.checked == 1, found
    edit = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('update grade set auto_score = 0'); c.commit()"
    done = as_user(world["grader"], edit, str(db))
    assert done.returncode == 0, done.stderr
    found = grading_audit.audit(course, f"sqlite:///{db}", "effkit")
    assert found.problems == [f"lesson1/{l1} cell_a: gradebook 0, signed 2.0"], found
    with sqlite3.connect(db) as conn:  # a score with no signed grading at all
        conn.execute("update grade set auto_score = 2")
    path.unlink()
    found = grading_audit.audit(course, f"sqlite:///{db}", "effkit")
    assert "no signed grading" in found.problems[0], found


def test_handing_over_refuses_a_folder_root_must_own_and_take_back_restores_owners(world, tmp_path):
    grader = pwd.getpwnam(world["grader"])
    course, exchange = tmp_path / "course", tmp_path / "exchange" / "effkit"
    (course / "hub").mkdir(parents=True, mode=0o700)
    (course / "submitted" / "x").mkdir(parents=True)
    (exchange / "inbound").mkdir(parents=True)
    (course / "signed").mkdir()
    os.chown(course / "signed", grader.pw_uid, grader.pw_gid)  # made by the grader beforehand
    with pytest.raises(PermissionError, match="signed"):
        cohort_grader.hand_over(course, course / "hub", exchange, grader)
    os.chown(course / "signed", 0, 0)
    handed = cohort_grader.hand_over(course, course / "hub", exchange, grader)
    assert (course / "submitted" / "x").stat().st_uid == grader.pw_uid
    assert (course.stat().st_uid, course.stat().st_mode & 0o7777) == (0, 0o1770)
    for root_owned in ("hub", "signed", "grading", "grader.key", "grading-signer.pub"):
        assert (course / root_owned).stat().st_uid == 0, root_owned
    assert (exchange / "inbound").stat().st_uid == grader.pw_uid
    # a restart releases as root (nbgrader refuses a course folder another account owns), then
    # hands the exchange over again
    cohort_grader.reclaim_exchange(exchange)
    assert exchange.stat().st_uid == (exchange / "inbound").stat().st_uid == 0
    assert cohort_grader.hand_over(course, course / "hub", exchange, grader).keys() == handed.keys()
    assert exchange.stat().st_uid == grader.pw_uid
    cohort_grader.take_back(handed)
    assert all(p.stat().st_uid == 0 for p in [course, *course.rglob("*"), *exchange.rglob("*")])


def test_the_grader_reads_the_source_assignments_until_down(world):
    """formgrader lists only assignments whose source folder it can see (nbgrader's ``isdir``):
    with solutions/ closed (0700) as for learners, Manage Assignments showed none
    (make test-cohort: no lesson1 row after the hub restart)."""
    from grader.frontends import cohort_acl

    grader = pwd.getpwnam(world["grader"])
    solutions = world["course"].parent / "solutions"  # under /srv: every account passes there
    (solutions / "lesson1").mkdir(parents=True)
    (solutions / "lesson1" / "lesson1.ipynb").write_text("{}")
    solutions.chmod(0o700)
    probe = "import glob, os, sys; print(os.path.isdir(sys.argv[1] + '/lesson1'), glob.glob(sys.argv[1] + '/lesson1/*.ipynb') != [], open(sys.argv[1] + '/lesson1/lesson1.ipynb').read())"
    before = as_user(world["grader"], probe, str(solutions))
    assert before.returncode != 0 and "PermissionError" in before.stderr, before
    opened = cohort_grader.open_sources(solutions, grader.pw_uid)
    assert as_user(world["grader"], probe, str(solutions)).stdout.split() == ["True", "True", "{}"]
    for path, mode in opened.items():  # what `down` does
        cohort_acl.close_to(path, [grader.pw_uid], mode)
    assert as_user(world["grader"], probe, str(solutions)).returncode != 0
    assert (solutions.stat().st_mode & 0o777) == 0o700
