"""`make gpu-check` never rots: its CPU dry run (tiny sizes) runs the whole plan in CI."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_plan_covers_every_lesson_solution_and_the_no_faster_submission(tmp_path):
    mod = _gpu_check()
    names = [s["name"] for s in mod.plan(tmp_path, tmp_path / "sst2", tmp_path / "c", dry=False)]
    assert names[:3] == ["bench-cifar", "bench-bert", "peer-hf-trainer"]
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert f"lesson-{nb.stem}" in names
    for nb in (ROOT / "solutions").glob("lesson*/lesson*.ipynb"):
        assert f"grade-{nb.parent.name}-{nb.stem}" in names
    assert "grade-submissions-no_faster" in names
    assert {"grader-stress", "grader-calibrate"} <= set(names)
    gpu = mod.plan(tmp_path, tmp_path / "sst2", tmp_path / "c", dry=False)
    assert all("--profile" not in s["argv"] or "gpu" in s["argv"] for s in gpu)
    assert all(s.get("env", {}).get("EFFKIT_PROFILE", "gpu") == "gpu" for s in gpu)
    # lessons and gradings read the effkit cache: it must hold the check's own data (offline)
    (tmp_path / "sst2").mkdir(), (tmp_path / "c").mkdir()
    for s in gpu[3:]:
        cache = Path(s["env"]["EFFKIT_DATA"])
        assert (cache / "cifar" / "real").resolve() == (tmp_path / "c").resolve()
        assert (cache / "bert" / "sst2").resolve() == (tmp_path / "sst2").resolve()


def test_only_runs_the_named_steps_and_keeps_earlier_rows(tmp_path):
    """A lease with a per-call limit runs the check in parts; summary.json keeps every part."""
    mod = _gpu_check()
    assert mod.main(["--dry-run", "--out", str(tmp_path), "--only", "lesson-01"]) == 0
    assert mod.main(["--dry-run", "--out", str(tmp_path), "--only", "lesson-02"]) == 0
    rows = json.loads((tmp_path / "summary.json").read_text())["steps"]
    assert [r["name"] for r in rows] == ["lesson-01_measure_first", "lesson-02_feed_the_accelerator"]
    assert mod.main(["--dry-run", "--out", str(tmp_path), "--only", "no-such-step"]) == 2


@pytest.mark.slow
def test_dry_run_passes_on_a_cpu(tmp_path):
    mod = _gpu_check()
    assert mod.main(["--dry-run", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["dry_run"] and not summary["failed"], summary
    peer = json.loads((tmp_path / "peer" / "result.json").read_text())
    assert peer["speedup"] > 0 and "covering the median" in peer["verdict"]
    for wl in ("cifar", "bert"):
        res = json.loads((tmp_path / wl / "result.json").read_text())
        assert res["headline"]["value"] is None or res["headline"]["value"] > 0


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
    from grader import assignments, course
    from grader.notebook import read_notebook, solution_ids

    mod = _gpu_check()
    gradings = [s for s in mod.plan(tmp_path, tmp_path / "sst2", tmp_path / "c", dry=False)
                if s["name"].startswith("grade-")]
    assert gradings
    for s in gradings:
        argv = s["argv"]
        notebook = Path(argv[argv.index("check") + 1])
        given = argv[argv.index("--assignment") + 1] if "--assignment" in argv else None
        a = assignments.get(given) if given else assignments.for_notebook(notebook.stem)
        source = read_notebook(course.source_notebook(a.id, a.notebook))
        assert solution_ids(read_notebook(notebook)) == solution_ids(source), s["name"]
