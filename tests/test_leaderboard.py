"""The leaderboard believes only signed grading reports, filed under their own learner, and moves a
record only when a new grading beats it beyond its interval. No grading runs here: reports are
signed with ``grader.common.evidence``, as ``GradePerformance`` signs them."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.cli.main import main
from grader.common import evidence
from grader.frontends import leaderboard as lb
from grader.frontends import nbgrader_plugin
from grader.frontends.leaderboard_page import html_page, sparkline
from grader.scoring.report import PerformanceReport

FAST = [1.9, 2.0, 2.0, 2.1, 2.0, 1.95, 2.05, 2.0]
SLOW = [1.4, 1.5, 1.5, 1.6, 1.5, 1.45, 1.55, 1.5]
# 12 pairs: the 95% interval is the 3rd to the 10th value, 1.45-1.55 (real coverage 98.1%).
TWELVE = [1.40, 1.42, 1.45, 1.48, 1.50, 1.50, 1.50, 1.50, 1.52, 1.55, 1.58, 1.60]


@pytest.fixture
def course_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFKIT_COURSE_ROOT", str(tmp_path))
    monkeypatch.delenv("EFFKIT_COURSE_DIR", raising=False)
    (tmp_path / "course").mkdir()
    return tmp_path / "course"


def report(student, ratios=SLOW, minute=0, assignment="lesson2", **changes) -> dict:
    """A grading report of ``grader.scoring.perf.decide``'s shape plus GradePerformance's
    (validated as ``PerformanceReport``); ``gate`` and ``target`` changes update their fields."""
    device = changes.pop("device", "CPU Xeon (2 threads)")
    target = {"assignment": assignment, "device": device, "device_class": "cpu", "target": 1.5}
    target |= {"floor": 1.0, "source": "default", "table": "cpu"} | changes.pop("target", {})
    gate = {"passed": True, "mean_diff_pp": -0.12, "threshold_pp": -0.5, "se_pp": 0.3}
    gate |= {"suspiciously_high": False, "message": "within the gate"} | changes.pop("gate", {})
    spec = {"name": "smoke", "profile": "smoke", "n_train": 10, "epochs": 1, "repeats": 2}
    r = {
        "assignment": assignment,
        "timestamp": f"2026-11-20T10:{minute:02d}:00+00:00",
        "device": device,
        "device_class": "cpu",
        "spec": spec,
        "target": target,
        "runs": [],
        "speed_ratios": list(ratios),
        "speedup": statistics.median(ratios),
        "accuracy_diffs_pp": [-0.12, -0.12],
        "gate": gate,
        "credit": 1.0,
        "points": 5.0,
        "max_points": 5.0,
        "problems": [],
        "flags": [],
        "error": None,
        "work_problems": [],
        "student": student,
        "notebook": assignment,
    }
    return PerformanceReport.model_validate(r | changes).model_dump(mode="json")


def board(course_dir, assignment="lesson2"):
    key = evidence.load_key(course_dir, create=False)
    gradings, rejected = lb.load(course_dir, key, [assignment])
    boards = lb.boards(gradings, lb.pseudonyms(key, {g.student for g in gradings}))
    return (boards[0]["classes"] if boards else {}), rejected


def ranked(course_dir):
    classes, _ = board(course_dir)
    return [(r["student"], r["speedup"]) for r in classes.get("cpu", {}).get("ranked", [])]


def test_two_learners_are_ranked_by_their_best_verified_speedup(course_dir, capsys):
    evidence.archive(course_dir, report("alice", SLOW, 1))
    evidence.archive(course_dir, report("bob", FAST, 2))
    evidence.archive(course_dir, report("alice", [x + 0.2 for x in FAST], 3))  # beats bob's
    assert ranked(course_dir) == [("alice", 2.2), ("bob", 2.0)]
    assert main(["leaderboard", "lesson2"]) == 0
    out = capsys.readouterr().out
    assert "index.html" in out and "HTML Viewer" in out
    saved = json.loads((course_dir / "leaderboard" / "lesson2.json").read_text())
    top = saved["classes"]["cpu"]["ranked"][0]
    assert (top["rank"], top["student"], top["moves"], top["gradings"]) == (1, "alice", 1, 2)
    lo, hi = top["interval"]
    assert lo <= top["speedup"] <= hi and 0.9 < top["coverage"] < 1


def test_pseudonyms_are_stable_readable_and_hide_the_student_id(course_dir, capsys):
    key = evidence.load_key(course_dir)
    name = lb.pseudonym(key, "alice")
    assert name == lb.pseudonym(key, "alice") != lb.pseudonym(key, "bob")
    assert "alice" not in name and len(name.split("-")) == 3
    assert lb.pseudonym(b"\0" * 32, "alice") != name  # the course key, not the id, decides
    evidence.archive(course_dir, report("alice"))
    assert main(["leaderboard"]) == 0
    page = (course_dir / "leaderboard" / "index.html").read_text()
    assert name in page and "alice" not in page and "alice" not in capsys.readouterr().out
    assert main(["leaderboard", "--real-names"]) == 0
    assert "alice" in (course_dir / "leaderboard" / "index.html").read_text()


def test_colliding_pseudonyms_are_told_apart(monkeypatch):
    monkeypatch.setattr(lb, "pseudonym", lambda key, s: "amber-otter-1")
    names = lb.pseudonyms(b"k" * 32, {"a", "b"})
    assert len(set(names.values())) == 2


def test_a_report_with_an_edited_speedup_is_rejected(course_dir):
    path = evidence.archive(course_dir, report("alice", SLOW))
    signed = json.loads(path.read_text())
    signed["report"]["speedup"] = 9.0
    path.write_text(json.dumps(signed))
    classes, rejected = board(course_dir)
    assert classes == {} and len(rejected) == 1 and "tampered" in rejected[0]


def test_a_report_copied_into_another_learners_folder_is_rejected(course_dir):
    evidence.archive(course_dir, report("bob", SLOW))
    theirs = evidence.archive(course_dir, report("alice", FAST))
    (course_dir / "gradings" / "lesson2" / "bob" / theirs.name).write_bytes(theirs.read_bytes())
    classes, rejected = board(course_dir)
    assert [r["student"] for r in classes["cpu"]["ranked"]] == ["alice", "bob"]
    assert [r["speedup"] for r in classes["cpu"]["ranked"]] == [2.0, 1.5]
    assert len(rejected) == 1 and "bob" in rejected[0] and "'alice'" in rejected[0]


def test_a_report_for_another_lesson_filed_under_this_one_is_rejected(course_dir):
    path = evidence.archive(course_dir, report("alice", assignment="lesson3"))
    target = course_dir / "gradings" / "lesson2" / "alice" / path.name
    target.parent.mkdir(parents=True)
    target.write_bytes(path.read_bytes())
    classes, rejected = board(course_dir)
    assert classes == {} and "'lesson3'" in rejected[0]


@pytest.mark.parametrize(
    "forge",
    [
        lambda r: r,  # a bare grader.json dropped into the archive
        lambda r: {"report": r},
        lambda r: {"report": r, "algorithm": "HMAC-SHA256", "signature": "00" * 32},
    ],
    ids=["bare report", "no signature", "made-up signature"],
)
def test_an_unsigned_report_is_rejected(course_dir, forge):
    evidence.load_key(course_dir)
    folder = course_dir / "gradings" / "lesson2" / "alice"
    folder.mkdir(parents=True)
    (folder / "forged.json").write_text(json.dumps(forge(report("alice", FAST))))
    classes, rejected = board(course_dir)
    assert classes == {} and len(rejected) == 1


def test_a_report_signed_under_another_key_is_rejected(course_dir):
    evidence.archive(course_dir, report("alice"), key=os.urandom(32))
    evidence.load_key(course_dir)  # the course's own key, created after
    assert board(course_dir)[1]


@pytest.mark.parametrize(
    "changes, why",
    [
        ({"gate": {"passed": False, "mean_diff_pp": -2.0}}, "accuracy gate failed"),
        ({"work_problems": ["replayed chunk moved the other way"]}, "work check failed"),
        ({"error": {"kind": "timeout", "message": "x", "detail": ""}}, "error"),
        ({"problems": ["audit failed"], "points": 0.0}, "no performance points"),
        # lesson 14: a speed-up of settings alone keeps the point for beating naive, not a record
        ({"problems": ["your pipeline alone: 0.98x"], "points": 1.0}, "points withheld"),
        ({"speedup": None, "speed_ratios": []}, "no speedup"),
    ],
)
def test_an_ineligible_grading_is_never_a_record(course_dir, changes, why):
    evidence.archive(course_dir, report("alice", FAST, **changes))
    evidence.archive(course_dir, report("bob", SLOW))
    classes, rejected = board(course_dir)
    assert not rejected
    assert [r["student"] for r in classes["cpu"]["ranked"]] == ["bob"]
    (alice,) = classes["cpu"]["unranked"]
    assert alice["student"] == "alice" and why in alice["history"][0]["why_not"]


def test_a_record_moves_only_when_beaten_beyond_its_interval(course_dir):
    assert lb.grading_of(report("alice", TWELVE), "").interval == (1.45, 1.55)  # 98% coverage
    evidence.archive(course_dir, report("alice", TWELVE, 1))  # 1.50x
    inside = [x + 0.04 for x in TWELVE]  # 1.54x: better, but inside 1.45-1.55
    evidence.archive(course_dir, report("alice", inside, 2))
    assert ranked(course_dir) == [("alice", 1.5)]
    beyond = [x + 0.06 for x in TWELVE]  # 1.56x: beyond 1.55
    evidence.archive(course_dir, report("alice", beyond, 3))
    assert ranked(course_dir) == [("alice", statistics.median(beyond))]
    evidence.archive(course_dir, report("alice", TWELVE, 4))  # worse: the record stays
    classes, _ = board(course_dir)
    (row,) = classes["cpu"]["ranked"]
    events = [h["event"] for h in row["history"]]
    assert events == ["first record", "within the record's interval", "record moved", "not better"]
    assert (row["moves"], row["gradings"], row["date"]) == (1, 4, "2026-11-20")
    assert sparkline(row["history"]).count("<circle") == 4 and sparkline(row["history"][:1]) == ""


def test_records_are_kept_per_device_class(course_dir):
    evidence.archive(course_dir, report("alice", SLOW))
    gpu = {"table": "h100", "device_class": "h100"}
    evidence.archive(course_dir, report("alice", [3.0] * 5, 1, device="NVIDIA H200", target=gpu))
    classes, _ = board(course_dir)
    assert classes["cpu"]["ranked"][0]["speedup"] == 1.5
    assert classes["h100"]["ranked"][0]["speedup"] == 3.0


def test_the_page_escapes_a_hostile_student_id_and_device(course_dir):
    hostile = "<script>alert(1)</script>"
    evidence.archive(course_dir, report(hostile, FAST, device="<img src=x onerror=alert(2)>"))
    key = evidence.load_key(course_dir)
    gradings, rejected = lb.load(course_dir, key, ["lesson2"])
    assert not rejected and gradings[0].student == hostile
    page = html_page(lb.boards(gradings, lb.pseudonyms(key, {hostile})), real_names=True)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_leaderboard_is_idempotent_and_lists_lessons_in_numeric_order(course_dir):
    for i, who in enumerate(["carol", "alice", "bob"]):
        evidence.archive(course_dir, report(who, [x + i / 10 for x in SLOW], i))
        evidence.archive(course_dir, report(who, FAST, i + 10, assignment="lesson3"))
    assert main(["leaderboard"]) == 0
    out = course_dir / "leaderboard"
    first = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert main(["leaderboard"]) == 0
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir())} == first
    assert set(first) == {"index.html", "lesson2.json", "lesson3.json"}
    page = first["index.html"].decode()
    assert page.index('id="lesson2"') < page.index('id="lesson3"')
    assert sorted(["lesson10", "lesson2", "lesson3"], key=lb.lesson_order)[-1] == "lesson10"


def test_no_gradings_is_said_plainly_and_publish_copies_the_page(course_dir, tmp_path, capsys):
    assert main(["leaderboard"]) == 0
    assert "no signed gradings" in capsys.readouterr().out
    assert not (course_dir / "leaderboard").exists()
    evidence.archive(course_dir, report("alice"))
    assert main(["leaderboard", "--publish", str(tmp_path / "site")]) == 0
    published = (tmp_path / "site" / "index.html").read_text()
    assert published == (course_dir / "leaderboard" / "index.html").read_text()
    assert main(["leaderboard", "lesson1"]) == 2  # no timed grading there


def test_the_course_key_is_private_and_created_once_under_a_race(course_dir):
    keys = []
    threads = [
        threading.Thread(target=lambda: keys.append(evidence.load_key(course_dir)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    path = course_dir / evidence.KEY_FILE
    assert len(keys) == 8 and len(set(keys)) == 1 and len(keys[0]) == 32
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_bytes() == keys[0]
    assert [p.name for p in course_dir.iterdir()] == [evidence.KEY_FILE]  # no stray temp files


def test_grade_performance_archives_a_signed_report(course_dir, tmp_path, monkeypatch):
    """GradePerformance, run as nbgrader runs it, with the grading itself stubbed out."""

    class FakeGradebook:
        def __init__(self, url):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def find_notebook(self, notebook, assignment):
            return SimpleNamespace(solution_cells=[SimpleNamespace(name="pipeline")])

    graded = {k: v for k, v in report("ignored", FAST).items() if k not in ("student", "notebook")}
    result = SimpleNamespace(
        report=PerformanceReport.model_validate(graded), points=5.0, max_points=5.0
    )
    monkeypatch.setattr(nbgrader_plugin, "Gradebook", FakeGradebook)
    monkeypatch.setattr(nbgrader_plugin, "fill_performance_cell", lambda *a, **k: result)
    autograded = tmp_path / "course" / "autograded" / "alice" / "lesson2"
    autograded.mkdir(parents=True)
    resources = {
        "nbgrader": {"assignment": "lesson2", "notebook": "lesson2", "student": "alice"}
        | {"db_url": "sqlite://"},
        "metadata": {"path": str(autograded)},
    }
    nbgrader_plugin.GradePerformance().preprocess(SimpleNamespace(cells=[]), resources)
    (archived,) = (course_dir / "gradings" / "lesson2" / "alice").glob("*.json")
    key = evidence.load_key(course_dir, create=False)
    signed = json.loads(archived.read_text())
    assert evidence.verify(key, signed) == json.loads(
        (autograded / "lesson2.grader.json").read_text()
    )
    assert signed["report"]["student"] == "alice"
    assert ranked(course_dir) == [("alice", 2.0)]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: reads and writes as a learner's account")
def test_a_cohort_publishes_the_page_where_learners_read_it_and_none_can_write_it(
    course_dir, tmp_path
):
    """The page lived in root-only course/leaderboard/: nobody in the cohort could open it."""
    from grader.frontends import cohort, cohort_host

    srv = Path(tempfile.mkdtemp(prefix="effkit-test-srv-"))  # pytest's folders are root's alone
    srv.chmod(0o755)
    shared = srv / "effkit-leaderboard"
    plan = dict.fromkeys(["instructor", "url", "state_dir", "exchange", "learner_config"], "")
    plan |= dict(venv_bin="", proxy_command="", learners=[], hub_port=1, proxy_api_port=2)
    (course_dir / "hub").mkdir()
    (course_dir / "hub" / "cohort.json").write_text(
        json.dumps(plan | {"service_port": 3, "leaderboard": str(shared)})
    )
    assert cohort.load_plan().leaderboard == str(shared)
    cohort_host.share_folder(shared)
    evidence.archive(course_dir, report("alice"))
    assert main(["leaderboard"]) == 0  # no --publish: the cohort's folder by default
    probe = (
        "import sys, os\n"
        "page = sys.argv[1]\n"
        "print('read' if 'lesson2' in open(page).read() else 'empty')\n"
        "for how in (lambda: open(page, 'a'), lambda: open(os.path.dirname(page) + '/x', 'w')):\n"
        "    try:\n"
        "        how()\n"
        "        print('WROTE')\n"
        "    except PermissionError:\n"
        "        print('refused')\n"
    )
    page = shared / "index.html"
    try:
        done = subprocess.run(
            ["runuser", "-u", "nobody", "--", sys.executable, "-I", "-c", probe, str(page)],
            capture_output=True,
            text=True,
        )
    finally:
        shutil.rmtree(srv)
    assert done.stdout.split() == ["read", "refused", "refused"], done.stdout + done.stderr
    assert main(["leaderboard", "--real-names"]) == 0  # real names are never published unasked
    assert "alice" in (course_dir / "leaderboard" / "index.html").read_text()
    assert not shared.exists()  # removed above: not published again


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: makes a learner account")
def test_each_learner_gets_a_read_only_copy_at_home_and_cannot_redirect_the_write(tmp_path):
    """JupyterLab's file server refuses a symlink out of the home (403 in make test-cohort), so the
    page is copied into ~/leaderboard/; the home is the learner's, so a link or a folder of their
    own put there beforehand must not send root's write anywhere else."""
    import pwd

    from grader.frontends import cohort_host

    name = "ek-lbtest"
    subprocess.run(["userdel", "--remove", name], capture_output=True)
    subprocess.run(["useradd", "--create-home", name], check=True, capture_output=True)
    home = Path(pwd.getpwnam(name).pw_dir)
    page = tmp_path / "index.html"
    page.write_text("<p>board</p>")
    target = tmp_path / "elsewhere"
    target.mkdir()
    try:
        assert cohort_host.copy_into_homes(page, [name, "ek-no-such-account"]) == [name]
        copy = home / "leaderboard" / "index.html"
        assert copy.read_text() == "<p>board</p>" and copy.stat().st_uid == 0
        assert (copy.stat().st_mode & 0o777, (home / "leaderboard").stat().st_mode & 0o777) == (
            0o644,
            0o755,
        )
        probe = "import sys\ntry:\n    open(sys.argv[1], 'a')\n    print('WROTE')\nexcept OSError:\n    print('refused')"
        done = subprocess.run(
            ["runuser", "-u", name, "--", sys.executable, "-I", "-c", probe, str(copy)],
            capture_output=True,
            text=True,
        )
        assert done.stdout.split() == ["refused"], done.stdout + done.stderr
        shutil.rmtree(home / "leaderboard")
        (home / "leaderboard").symlink_to(target)  # the learner points it elsewhere
        assert cohort_host.copy_into_homes(page, [name]) == []
        (home / "leaderboard").unlink()
        (home / "leaderboard").mkdir()
        os.chown(home / "leaderboard", pwd.getpwnam(name).pw_uid, -1)  # their own folder
        assert cohort_host.copy_into_homes(page, [name]) == []
        assert list(target.iterdir()) == [] and list((home / "leaderboard").iterdir()) == []
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)
