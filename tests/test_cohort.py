"""A cohort through JupyterHub in a real browser: two learners, an instructor, nbgrader's exchange.

``python -m grader cohort up`` starts the hub (Unix accounts, PAM, formgrader as a service); then, in
headless Chromium, learner A fetches lessons 1 and 2, fills in solutions, validates lesson 1 and
runs lesson 2's performance cell to see the grader's speedup before submitting; learner B submits
lesson 2 and a text file as lesson 1; the hub restarts mid-session; the instructor collects,
autogrades (the out-of-kernel grader; B's lesson 1 refused with its one-line reason) and releases
feedback in formgrader; A reads the feedback, B the reason; B can read none of A's work; the
leaderboard shows both learners' graded speedups, and B opens it from ~/leaderboard. Each step writes a screenshot and its time to
``runs/cohort/`` (``steps.json``). Needs root (accounts), Chromium and JupyterHub: ``make
test-cohort`` (about 10 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import cohort_flow as flow
import pytest
from browser_util import chromium_page, find_chromium, free_port

from grader.frontends import cohort_disk

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "runs" / "cohort"

# `cohort up` changes the repository's file modes and loads the machine: never beside other
# gradings (a timed grading's escape check and speed-up moved when it ran in the other lane), so
# `make test-system` runs this file after its system tests (EFFKIT_TEST_COHORT=smoke; it ran after
# CI's lanes until a landing run took 2495 s, over CI's 40 minutes), `make test-cohort` whole.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("EFFKIT_TEST_COHORT") not in ("smoke", "1"),
        reason="runs in make test-system or make test-cohort, never beside gradings",
    ),
]
WHOLE_PATH = pytest.mark.skipif(
    os.environ.get("EFFKIT_TEST_COHORT") != "1",
    reason="the whole cohort path runs with `make test-cohort` (~6 min: it grades lesson 2 three times)",
)


def _grader(env: dict, *args: str, timeout: int = 600) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "grader", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"grader {args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if os.geteuid() != 0 or find_chromium() is None or shutil.which("useradd") is None:
        pytest.fail("the cohort test needs root, useradd and chromium (apt-get install chromium)")
    pytest.importorskip("jupyterhub", reason="pip install -e '.[cohort]' (make test does)")
    tag = secrets.token_hex(2)
    course = tmp_path_factory.mktemp("cohort") / "course"
    exchange = Path(f"/srv/effkit-test-{tag}/exchange")
    port = free_port()
    env = dict(os.environ, EFFKIT_COURSE_DIR=str(course))
    up = ["cohort", "up", "--learners", "2", "--port", str(port), "--prefix", f"ek{tag}-"]
    up += ["--exchange", str(exchange), "--home-gb", "1", "--exchange-gb", "1"]
    try:
        print(_grader(env, *up))
    except BaseException:
        _reap(course, tag)
        cohort_disk.release_under([exchange.parent])
        shutil.rmtree(exchange.parent, ignore_errors=True)
        raise
    try:
        accounts = json.loads((course / "hub" / "accounts.json").read_text())
        yield {
            "url": f"http://127.0.0.1:{port}",
            "env": env,
            "up": up,
            "accounts": accounts,
            "instructor": f"ek{tag}-instructor",
            "grader": f"ek{tag}-grader",
            "a": f"ek{tag}-learner1",
            "b": f"ek{tag}-learner2",
            "exchange": exchange,
            "course": course,
        }
    finally:
        try:
            _grader(env, "cohort", "down", "--remove-accounts")
            # down released every image it mounted: nothing left for the clean-up below to find
            assert not cohort_disk.release_under([exchange.parent]), (
                "down left the exchange mounted"
            )
        finally:  # whatever down left (it failed, or the hub died midway): nothing stays running
            _reap(course, tag)
            cohort_disk.release_under([exchange.parent])
            shutil.rmtree(exchange.parent, ignore_errors=True)


def _reap(course: Path, tag: str) -> None:
    """Kill every process of this test's cohort: the hub and its proxy (their pid files), the
    services (their environment names this course) and whatever the test's accounts run
    (learners' jupyterhub-singleuser servers, formgrader); then remove the accounts left."""
    accounts = {p.pw_uid: p.pw_name for p in pwd.getpwall() if p.pw_name.startswith(f"ek{tag}-")}
    doomed = set()
    for name in ("jupyterhub.pid", "proxy.pid"):
        try:
            doomed.add(int((course / "hub" / name).read_text()))
        except (OSError, ValueError):
            pass
    marks = (f"EFFKIT_COURSE_DIR={course}".encode(), f"EFFKIT_COHORT_STATE={course}".encode())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            uid = proc.stat().st_uid
        except OSError:
            continue
        if uid in accounts or any(e.startswith(marks) for e in environ):
            doomed.add(int(proc.name))
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # their homes' images, where down did not get to release them (userdel removes the home)
    cohort_disk.release_under([Path(pwd.getpwnam(n).pw_dir) for n in accounts.values()])
    for name in accounts.values():
        subprocess.run(["userdel", "--remove", name], capture_output=True)


def _step(steps: flow.Steps, page, name: str, started: float) -> None:
    steps.record(page, name, started)
    print(f"[cohort] {name}: {steps.done[-1]['seconds']} s", flush=True)


def test_learners_log_in_see_the_course_and_cannot_reach_each_other(hub):
    """The hub's part CI runs: accounts, logins, the released course, and learners kept apart."""
    url, acc, a, b = hub["url"], hub["accounts"], hub["a"], hub["b"]
    steps = flow.Steps(ROOT / "runs" / "cohort-smoke")
    with chromium_page(find_chromium()) as page:
        t = time.monotonic()
        flow.open_lab(page, url, a, acc[a])
        flow.assignment_list(page)
        flow.fetch(page, "lesson1")
        _step(steps, page, "a-fetches-lesson1", t)
        released = page.inner_text("#released_assignments_list")
        assert "lesson13" in released and "lesson2" in released, released
        assert page.get_by_text("Formgrader", exact=True).count() == 0  # not in a learner's menu
        flow.logout(page, url)
        t = time.monotonic()
        flow.open_lab(page, url, b, acc[b])
        page.goto(f"{url}/user/{a}/lab")
        page.wait_for_selector("text=403", timeout=30_000)
        _step(steps, page, "b-tries-a-s-server", t)
        assert "403 : You do not have permission" in page.inner_text("body"), page.url
    _b_cannot_read_a(hub)
    # formgrader runs as the unprivileged grader account (an instructor's terminal there is not
    # root), the grading service as root
    services = _service_uids(hub["course"])
    course_id = "effkit"
    assert services.get(course_id) == pwd.getpwnam(hub["grader"]).pw_uid != 0, services
    assert services.get(f"{course_id}-grading") == 0, services
    # ... and imports this checkout's grader (an import lists the repository, closed to learners)
    which = subprocess.run(
        ["runuser", "-u", hub["grader"], "--", "env", f"PYTHONPATH={ROOT}", sys.executable, "-c"]
        + ["import grader; print(grader.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert which.stdout.strip() == str(ROOT / "grader" / "__init__.py"), which
    # B's server runs under the cohort's task cap: a fork bomb stops at it, not at the machine
    pids = subprocess.run(["pgrep", "-u", b, "-f", "jupyterhub-singleuser"], capture_output=True)
    pid = pids.stdout.split()[0].decode()
    limits = Path(f"/proc/{pid}/limits").read_text()
    line = next(ln for ln in limits.splitlines() if ln.startswith("Max processes"))
    assert line.split()[2:4] == ["2048", "2048"], line
    # ... in its own cgroup (memory, CPU) and with a private /tmp (tests/test_cohort_limits.py)
    groups = Path(f"/proc/{pid}/cgroup").read_text()
    assert f"effkit-cohort/{b}" in groups, groups
    mounts = [ln.split() for ln in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
    assert any(m[4] == "/tmp" and "tmpfs" in m for m in mounts), "B's /tmp is the host's"
    # ... and a home of its own (1 GiB here): a disk-filling write stops there, not at the host's disk
    if cohort_disk.missing() is None:
        home = Path(pwd.getpwnam(b).pw_dir)
        assert os.path.ismount(home), "B's home is on the host's file system"
        fill = ["runuser", "-u", b, "--", "fallocate", "-l", "2G", str(home / "fill")]
        done = subprocess.run(fill, capture_output=True, text=True)
        # a refused fallocate can keep what it got, leaving B's home full for the rest of the module
        (home / "fill").unlink(missing_ok=True)
        assert done.returncode != 0 and "No space left" in done.stderr, done


@WHOLE_PATH
def test_two_learners_and_an_instructor_through_the_hub(hub):
    url, acc = hub["url"], hub["accounts"]
    a, b, teacher = hub["a"], hub["b"], hub["instructor"]
    shutil.rmtree(SHOTS, ignore_errors=True)
    steps = flow.Steps(SHOTS)
    with chromium_page(find_chromium()) as page:
        t = time.monotonic()
        flow.open_lab(page, url, a, acc[a])
        flow.assignment_list(page)
        _step(steps, page, "a-logs-in", t)
        t = time.monotonic()
        flow.fetch(page, "lesson1")
        flow.fetch(page, "lesson2")
        _step(steps, page, "a-fetches-lessons-1-and-2", t)
        t = time.monotonic()
        assert flow.fill_in(page, "lesson1/lesson1.ipynb", ROOT / "solutions/lesson1/lesson1.ipynb")
        assert flow.fill_in(page, "lesson2/lesson2.ipynb", ROOT / "solutions/lesson2/lesson2.ipynb")
        flow.open_notebook(page, "lesson1/lesson1.ipynb")
        verdict = flow.validate(page)
        _step(steps, page, "a-validates-lesson1", t)
        assert "Success! Your notebook passes all the tests." in verdict, verdict
        flow.close_dialog(page)
        t = time.monotonic()
        out = flow.run_cell(page, 'check_my_work("test_data_wait"', "compute-bound")
        _step(steps, page, "a-sees-a-check-before-submitting", t)
        assert "test_data_wait: 2 / 2 points (passed)" in out, out
        t = time.monotonic()
        flow.open_notebook(page, "lesson2/lesson2.ipynb")
        out = flow.run_cell(page, "grade_performance()", "points", timeout_s=600)
        _step(steps, page, "a-sees-lesson2-speedup-before-submitting", t)
        assert "speedup" in out and "points" in out, out
        t = time.monotonic()
        page.goto(page.url.split("/lab")[0] + "/lab")
        flow.assignment_list(page)
        flow.submit(page, "lesson1")
        flow.submit(page, "lesson2")
        _step(steps, page, "a-submits", t)
        flow.logout(page, url)

        t = time.monotonic()
        flow.open_lab(page, url, b, acc[b])
        flow.assignment_list(page)
        flow.fetch(page, "lesson2")
        assert flow.fill_in(page, "lesson2/lesson2.ipynb", ROOT / "solutions/lesson2/lesson2.ipynb")
        flow.submit(page, "lesson2")
        _step(steps, page, "b-fetches-and-submits-lesson2", t)
        t = time.monotonic()
        flow.fetch(page, "lesson1")
        flow.put_text(page, "lesson1/lesson1.ipynb", "my answers: 42\n")  # not a notebook
        flow.submit(page, "lesson1")
        _step(steps, page, "b-submits-a-text-file-as-lesson1", t)
        flow.logout(page, url)

    # The hub restarts mid-session: every server stops; nothing submitted may be lost.
    t = time.monotonic()
    _grader(hub["env"], "cohort", "down")
    _grader(hub["env"], *hub["up"])
    steps.done.append({"step": "hub-restarts", "seconds": round(time.monotonic() - t, 1)})

    with chromium_page(find_chromium()) as page:
        t = time.monotonic()
        flow.formgrader(page, url, teacher, acc[teacher])
        _step(steps, page, "instructor-opens-formgrader", t)
        for aid, learners in (("lesson1", [a]), ("lesson2", [a, b])):
            t = time.monotonic()
            log = flow.collect(page, aid)
            _step(steps, page, f"instructor-collects-{aid}", t)
            assert all(f"Collecting submission: {who} {aid}" in log for who in learners), log
            t = time.monotonic()
            scores = flow.autograde(page, url, aid, learners)
            _step(steps, page, f"instructor-autogrades-{aid}", t)
            assert all(score and "Success" in said for score, said in scores.values()), scores
            if aid == "lesson1":  # B's text file: one line saying why, not nbgrader's traceback
                t = time.monotonic()
                said = flow.autograde_refused(page, url, aid, b)
                _step(steps, page, "instructor-sees-why-b-s-lesson1-is-not-graded", t)
                assert f"[effkit] {b}/lesson1 not graded" in said, said[-3000:]
                assert "not a valid notebook file" in said and "json/decoder.py" not in said
            t = time.monotonic()
            flow.feedback(page, url, aid)
            _step(steps, page, f"instructor-releases-feedback-{aid}", t)

    with chromium_page(find_chromium()) as page:
        t = time.monotonic()
        flow.open_lab(page, url, a, acc[a])
        flow.assignment_list(page)
        text = flow.read_feedback(page, "lesson1")
        _step(steps, page, "a-reads-feedback", t)
        assert "Score: 12.0 / 12.0" in text or "12 / 12" in text, text[:2000]
        flow.logout(page, url)
        t = time.monotonic()
        flow.open_lab(page, url, b, acc[b])
        flow.assignment_list(page)
        text = flow.read_feedback(page, "lesson1")
        _step(steps, page, "b-reads-why-lesson1-was-not-graded", t)
        assert "lesson1: not graded" in text and "not a valid notebook file" in text, text[:2000]

    _b_cannot_read_a(hub)
    # every score formgrader wrote is one the root grading service signed; the grader account
    # (the gradebook's owner) edits one with sqlite and the audit names it
    print(_grader(hub["env"], "cohort", "verify"))
    db = hub["course"] / "gradebook.db"
    edit = "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('update grade set auto_score=0 where auto_score>0'); c.commit()"
    done = subprocess.run(
        ["runuser", "-u", hub["grader"], "--", sys.executable, "-c", edit, str(db)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    caught = subprocess.run(
        [sys.executable, "-m", "grader", "cohort", "verify"],
        cwd=ROOT,
        env=hub["env"],
        capture_output=True,
        text=True,
    )
    assert caught.returncode == 1 and "NOT SIGNED" in caught.stdout, caught.stdout[-3000:]
    t = time.monotonic()
    out = _grader(hub["env"], "leaderboard", "lesson2")
    page_path = hub["course"] / "leaderboard" / "index.html"
    with chromium_page(find_chromium()) as page:
        page.goto(page_path.as_uri())
        board = page.inner_text("body")
        _step(steps, page, "leaderboard", t)
        t = time.monotonic()  # B opens the published page from ~/leaderboard, in JupyterLab
        flow.open_lab(page, url, b, acc[b])
        page.goto(f"{url}/user/{b}/files/leaderboard/index.html")
        page.wait_for_load_state("load", timeout=60_000)
        seen = page.inner_text("body")
        _step(steps, page, "b-opens-the-leaderboard", t)
        assert seen == board, seen[:2000]
    print(out)
    records = json.loads((hub["course"] / "leaderboard" / "lesson2.json").read_text())
    assert len(records["records"]) == 2 if "records" in records else records, records
    assert a not in board and b not in board, "the page shows pseudonyms, never account names"


def _service_uids(course: Path) -> dict[str, int]:
    """{hub service name: the uid its process runs as}, for this test's cohort (from /proc)."""
    found, ours = {}, f"EFFKIT_COURSE_DIR={course}".encode()
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        names = [e.split(b"=", 1)[1] for e in environ if e.startswith(b"JUPYTERHUB_SERVICE_NAME=")]
        if names and ours in environ:
            found[names[0].decode()] = proc.stat().st_uid
    return found


def _b_cannot_read_a(hub) -> None:
    """As learner B's Unix account: A's home, A's submission and feedback in the exchange."""
    a, b, exchange = hub["a"], hub["b"], hub["exchange"]
    probe = (
        "import os, sys\n"
        "leaks = []\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        os.listdir(path) if os.path.isdir(path) else open(path).read()\n"
        "        leaks.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(leaks)\n"
    )
    targets = [
        f"/home/{a}/lesson1/lesson1.ipynb",
        f"/home/{a}/lesson1",
        f"/home/{a}",
        str(exchange / "effkit" / "inbound"),
        str(exchange / "effkit" / "feedback"),
        str(ROOT / "solutions" / "lesson1" / "lesson1.ipynb"),
        str(hub["course"] / "gradebook.db"),
    ]
    done = subprocess.run(
        ["runuser", "-u", b, "--", sys.executable, "-c", probe, *targets],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"learner B could read: {done.stdout}"
