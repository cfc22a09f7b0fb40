"""The grading half of ``make demo``: autograde every reference solution and untouched exercise.

**What it does.** ``grade_all(out)`` copies each assignment's reference solution
(``solutions/<id>/``) and its untouched student version (``exercises/<id>/``) into ``out`` and runs
``python -m grader check`` on each in a fresh process - every check that ``nbgrader autograde``
runs, the performance cell included - then returns one row per notebook: points, maximum and a
short note (the first failing check, or the measured speedup). Logs and JSON reports stay in
``out``.

**When to use it.** From :mod:`effkit.demo`; by hand, ``python -m grader.demo``.

**Expected gain.** One look shows that the reference solutions earn full marks and the untouched
student versions earn only what needs no code.

**Pitfalls.** Each check executes a notebook and may time a recipe: about a minute per reference
notebook on 2 CPU cores.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from grader import assignments, course


def _note(report: dict) -> str:
    perf = report.get("performance") or {}
    if perf.get("speedup") is not None:
        gate = (perf.get("gate") or {}).get("mean_diff_pp")
        acc = f", Δacc {gate:+.2f} pp" if gate is not None else ""
        return f"speedup {perf['speedup']:.2f}x on {perf.get('device', '?')}{acc}"
    failed = [c for c in report.get("cells", []) if c.get("error")]
    if failed:
        return f"{failed[0]['grade_id']}: {failed[0]['error'][:110]}"
    problems = perf.get("problems") or []
    return problems[0][:70] if problems else ""


def grade_one(assignment_id: str, kind: str, notebook: Path, out: Path) -> dict:
    folder = out / assignment_id / kind
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / notebook.name
    shutil.copy(notebook, copy)
    report_path, log = folder / "report.json", folder / "check.log"
    cmd = [sys.executable, "-m", "grader", "check", str(copy), "--json", str(report_path)]
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
    name = f"{assignment_id} {kind}"
    if rc != 0 or not report_path.is_file():
        return {"name": name, "score": 0.0, "max_score": 0.0,
                "note": f"grading could not run (exit {rc}); see {log}"}
    report = json.loads(report_path.read_text())
    return {"name": name, "score": report["total"], "max_score": report["max_total"],
            "note": _note(report), "report": str(report_path)}


def grade_all(out: Path) -> list[dict]:
    """Check the reference solution and the untouched student version of every assignment."""
    from tqdm.auto import tqdm

    jobs = []
    for aid in assignments.known():
        a = assignments.get(aid)
        for kind, path in (("reference", course.source_notebook(aid, a.notebook)),
                           ("untouched", course.release_notebook(aid, a.notebook))):
            if path.is_file():
                jobs.append((aid, kind, path))
    rows = []
    for aid, kind, path in tqdm(jobs, desc="autograding", unit="notebook"):
        rows.append(grade_one(aid, kind, path, Path(out)))
    return rows


if __name__ == "__main__":
    for row in grade_all(Path("runs/demo/grading")):
        print(f"{row['name']:<24} {row['score']:5.1f} / {row['max_score']:<4g} {row['note']}")
