"""`make gpu-check` never rots: its CPU dry run (tiny sizes) runs the whole plan in CI."""

import json
from pathlib import Path

import pytest
from script_module import load

ROOT = Path(__file__).resolve().parents[1]


def _gpu_check():
    return load("benchmarks/gpu_check.py")


def test_the_plan_covers_every_lesson_solution_stub_and_the_no_faster_submission(tmp_path):
    mod = _gpu_check()
    gpu = mod.plan(tmp_path, tmp_path / "sst2", tmp_path / "c", dry=False)
    names = [s["name"] for s in gpu]
    assert {"bench-cifar", "bench-bert", "peer-hf-trainer"} <= set(names)
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert f"lesson-{nb.stem}" in names
    for nb in (ROOT / "solutions").glob("lesson*/lesson*.ipynb"):
        aid = nb.parent.name
        assert f"grade-{aid}-{nb.stem}" in names and f"grade-stub-{aid}" in names
    expect = {s["name"]: s.get("expect") for s in gpu}
    assert expect["grade-submissions-no_faster"] == "no-speed"
    assert expect["grade-stub-lesson2"] == "zero" and expect["grade-lesson2-lesson2"] == "full"
    assert {"calibrate-lesson2", "calibrate-lesson3"} <= set(names)
    assert all("--profile" not in s["argv"] or "gpu" in s["argv"] for s in gpu)
    assert all(s.get("env", {}).get("EFFKIT_PROFILE", "gpu") == "gpu" for s in gpu)
    # lessons and gradings read the effkit cache: it must hold the check's own data (offline)
    (tmp_path / "sst2").mkdir(), (tmp_path / "c").mkdir()
    for s in gpu:
        if s["suite"] == "lessons" or s["name"].startswith(("grade-", "calibrate-")):
            cache = Path(s["env"]["EFFKIT_DATA"])
            assert (cache / "cifar" / "real").resolve() == (tmp_path / "c").resolve()
            assert (cache / "bert" / "sst2").resolve() == (tmp_path / "sst2").resolve()


def test_each_part_fits_a_ten_minute_call_and_calibrates_before_it_grades(tmp_path):
    """Every step in exactly one part of its suite; each part planned at <= 9 min; an assignment's
    GPU calibration runs before its gradings (they read the gate it saves)."""
    mod = _gpu_check()
    plan_mod = mod.gpu_check_plan
    gpu = mod.plan(tmp_path, tmp_path / "sst2", tmp_path / "c", dry=False)
    for suite in ("check", "lessons"):
        cut = plan_mod.parts(gpu, suite)
        assert sorted(s["name"] for part in cut for s in part) == sorted(
            s["name"] for s in gpu if s["suite"] == suite
        )
        assert all(sum(s["planned_s"] for s in part) <= plan_mod.PART_S for part in cut)
    order = [s["name"] for s in gpu]
    for s in gpu:
        if s["name"].startswith("grade-") and s["assignment"] in plan_mod.TIMED:
            cal = next(c for c in gpu if c["name"] == f"calibrate-{s['assignment']}")
            assert (cal["part"], order.index(cal["name"])) < (s["part"], order.index(s["name"]))
    assert max(s["part"] for s in gpu if s["suite"] == "check") >= 3  # > 25 min: it must split
    # a made-up heavy step gets a part of its own rather than breaking a call
    heavy = [
        {"name": "x", "suite": "check", "planned_s": 900},
        {"name": "y", "suite": "check", "planned_s": 10},
    ]
    assert [[s["name"] for s in p] for p in plan_mod.parts(heavy, "check")] == [["x"], ["y"]]


def test_parts_run_separately_and_one_summary_keeps_them_all(tmp_path):
    """A lease with a per-call limit runs the check part by part (here: step by step, the dry
    run's lessons fit one part); summary.json and the README table keep every run's steps, and
    hand-written README text around the table survives."""
    mod = _gpu_check()
    (tmp_path / "README.md").write_text("# notes by hand\n")
    for only in ("validate-lessons", "lesson-01"):  # one call per part, as a lease runs them
        argv = ["--dry-run", "--out", str(tmp_path), "--suite", "lessons", "--part", "1"]
        assert mod.main([*argv, "--only", only]) == 0, only
    rows = json.loads((tmp_path / "summary.json").read_text())["steps"]
    names = [r["name"] for r in rows]
    assert names == ["validate-lessons", "lesson-01_measure_first"]
    assert all(r["suite"] == "lessons" and r["rc"] == 0 for r in rows)
    printed = (tmp_path / "lessons" / "01_measure_first.outputs.txt").read_text()
    assert printed.count("--- cell") == 1 and "gpu" in printed  # the stand-in ran in a kernel
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# notes by hand") and all(
        readme.count(f"| `{n}`") == 1 for n in names
    )
    assert mod.main(["--dry-run", "--out", str(tmp_path), "--only", "no-such-step"]) == 2


@pytest.mark.system
@pytest.mark.slow
def test_dry_run_passes_on_a_cpu(tmp_path):
    """The real code path of every kind of step at tiny sizes: three gradings (a stub under the
    step's own file name and --assignment) that write their reports where the steps say, every
    other grading step's notebook matched to its assignment, a calibration, a lesson execution.
    It fails on the plan the first H100 run crashed on."""
    from grader import assignments

    mod = _gpu_check()
    gpu_check_plan = mod.gpu_check_plan
    assert mod.main(["--dry-run", "--out", str(tmp_path), "--suite", "all"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["dry_run"] and not summary["failed"], summary
    peer = json.loads((tmp_path / "peer" / "result.json").read_text())
    assert peer["speedup"] > 0 and "covering the median" in peer["verdict"]
    for wl in ("cifar", "bert"):
        res = json.loads((tmp_path / wl / "result.json").read_text())
        assert res["headline"]["value"] is None or res["headline"]["value"] > 0
    gradings = [
        r for r in summary["steps"] if r["name"].startswith("grade-") and "as_expected" in r
    ]
    assert {r["name"] for r in gradings} == set(gpu_check_plan.DRY_GRADED)
    validated = (tmp_path / "logs" / "validate-gradings.log").read_text()
    for aid in assignments.known():
        assert (
            f"grade-{aid}-{aid}" in gpu_check_plan.DRY_GRADED
            or f"each checked by {aid}\n" in validated
        )
    for r in gradings:
        report = json.loads((tmp_path / "grading" / f"{r['name']}.json").read_text())
        assert r["as_expected"] and report["total"] == 0 < report["max_total"], r
    assert json.loads((tmp_path / "calibrate" / "lesson2.json").read_text())["speed_ratios"]
    read = (tmp_path / "logs" / "validate-lessons.log").read_text()
    assert all(
        f"{nb.name} read and valid" in read
        for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))[1:]
    )


def test_a_grading_writes_its_report_into_a_folder_nothing_created(tmp_path):
    """Every `grade-*` step of the first H100 run crashed here (FileNotFoundError after grading)."""
    from grader.__main__ import main

    out = tmp_path / "grading" / "deeper" / "lesson1.json"
    stub = ROOT / "exercises" / "lesson1" / "lesson1.ipynb"
    assert main(["check", str(stub), "--assignment", "lesson1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["assignment"] == "lesson1" and report["total"] == 0 < report["max_total"]


def test_every_grading_step_names_an_assignment_that_owns_its_notebook(tmp_path):
    """`grade-submissions-no_faster` exited 2 on the H100: no assignment has a notebook called
    'no_faster'. Each grading step resolves its assignment exactly as `grader check` does."""
    from grader import assignments
    from grader.common import course
    from grader.frontends.notebook import read_notebook, solution_ids

    mod = _gpu_check()
    gradings = [
        s
        for s in mod.plan(tmp_path, tmp_path / "sst2", tmp_path / "c", dry=False)
        if s["name"].startswith("grade-")
    ]
    assert gradings
    for s in gradings:
        argv = s["argv"]
        notebook = Path(argv[argv.index("check") + 1])
        given = argv[argv.index("--assignment") + 1] if "--assignment" in argv else None
        a = assignments.get(given) if given else assignments.for_notebook(notebook.stem)
        source = read_notebook(course.source_notebook(a.id, a.notebook))
        assert solution_ids(read_notebook(notebook)) == solution_ids(source), s["name"]


def test_a_grading_that_writes_nothing_is_not_judged_on_an_earlier_report(tmp_path):
    mod = _gpu_check()
    report = tmp_path / "grading" / "grade-x.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"total": 12, "max_total": 12, "cells": []}))  # a previous run's
    step = {
        "name": "grade-x",
        "suite": "check",
        "part": 1,
        "planned_s": 5,
        "expect": "full",
        "assignment": "lesson1",
        "argv": [mod.sys.executable, "-c", "raise SystemExit(1)", "--json", str(report)],
    }
    (row,) = mod.run_steps([step], tmp_path)
    assert row["rc"] == 1 and row["as_expected"] is False and row["verdict"] == "no report written"


def test_a_deadline_stops_the_running_step_and_skips_the_rest(tmp_path):
    mod = _gpu_check()
    sleep = [mod.sys.executable, "-c", "import time; time.sleep(60)"]
    steps = [
        {"name": f"s{i}", "suite": "check", "part": 1, "planned_s": 60, "argv": sleep}
        for i in range(3)
    ]
    t0 = mod.time.perf_counter()
    rows = mod.run_steps(steps, tmp_path, deadline=t0 + mod.MIN_STEP_S + 3)
    assert [r["name"] for r in rows] == ["s0"] and rows[0]["rc"] == 124
    assert mod.time.perf_counter() - t0 < mod.MIN_STEP_S + 15


def test_the_summary_names_packages_outside_the_declared_versions(tmp_path):
    """The H100 image's onnxruntime 1.30 (declared: >= 1.32) failed lesson 13's export: the summary
    must say when a run is outside what the course declares."""
    mod = _gpu_check()
    report = mod.gpu_check_report
    assert (
        report.outside_declared(ROOT / "pyproject.toml") == []
    )  # this venv: what `make setup` installs
    fake = tmp_path / "pyproject.toml"
    fake.write_text(
        '[project]\ndependencies = ["torch>=99", "no-such-package-x>=1"]\n'
        '[project.optional-dependencies]\ncourse = ["numpy<1"]\n'
    )
    got = report.outside_declared(fake)
    assert [g.split()[0] for g in got] == [
        "torch",
        "no-such-package-x",
        "numpy",
    ] and "missing" in got[1]
    summary = {
        "device": "d",
        "torch": "t",
        "dry_run": False,
        "steps": [],
        "failed": [],
        "outside_declared": got,
    }
    assert "outside the declared versions:** torch" in report.table(summary)
