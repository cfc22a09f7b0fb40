"""``python -m grader check NOTEBOOK``: the learner's own run of exactly what autograding does.

**What it does.** Reads the submission (clear error if it is not a valid notebook), merges it
with the instructor's source notebook the way nbgrader's ``OverwriteCells`` does (locked and test
cells come from the source, hidden tests included; solution cells from the learner; cells with
unknown ``grade_id``s lose their grading metadata), executes it in a fresh kernel with
``NBGRADER_EXECUTION=autograde``, fills in the performance cell from clean processes
(:mod:`grader.nbgrader_plugin`), then scores every graded cell with nbgrader's own
``determine_grade`` and prints a table plus the feedback. ``--json OUT`` writes the report.

**When to use it.** Before submitting; in CI for the reference solution.

**Expected gain.** No surprises: the same checks, the same points, on the learner's machine.

**Pitfalls.** Without ``solutions/`` (a course that keeps it private) the released notebook is
used: hidden tests are then skipped and the report says so.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from pathlib import Path

from grader import assignments, course
from grader.notebook import NotebookError, nbgrader_meta, read_notebook, solution_ids
from grader.perf import GradingError

ERROR_LINES = 6


def merge(source, learner) -> tuple[object, list[str]]:
    """The notebook nbgrader would execute: learner's notebook, source's graded/locked cells."""
    by_id = {
        nbgrader_meta(c)["grade_id"]: c for c in source.cells if "grade_id" in nbgrader_meta(c)
    }
    merged = copy.deepcopy(learner)
    seen, notes = set(), []
    for i, cell in enumerate(merged.cells):
        gid = nbgrader_meta(cell).get("grade_id")
        if gid is None:
            continue
        if gid not in by_id or gid in seen:
            del cell.metadata["nbgrader"]  # added or duplicated by the learner: not graded
            continue
        seen.add(gid)
        src = by_id[gid]
        if nbgrader_meta(src).get("solution"):
            cell.metadata["nbgrader"] = copy.deepcopy(src.metadata["nbgrader"])
        else:
            merged.cells[i] = copy.deepcopy(src)  # locked/test cells: restored, hidden tests too
    for gid, src in by_id.items():
        if gid not in seen and nbgrader_meta(src).get("grade"):
            notes.append(f"graded cell {gid!r} is missing from your notebook: it scores 0")
    for cell in merged.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return merged, notes


@contextlib.contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def execute(nb, workdir: Path, timeout_s: int) -> None:
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                            interrupt_on_timeout=True,
                            resources={"metadata": {"path": str(workdir)}})  # fmt: skip
    with _env(NBGRADER_EXECUTION="autograde"):
        client.execute()


def scores(nb) -> list[dict]:
    from nbgrader.utils import determine_grade, is_grade

    rows = []
    for cell in nb.cells:
        if not is_grade(cell):
            continue
        got, out_of = determine_grade(cell)
        error = next((o for o in cell.get("outputs", []) if o.output_type == "error"), None)
        rows.append({
            "grade_id": nbgrader_meta(cell)["grade_id"], "points": got, "max_points": out_of,
            "error": f"{error.ename}: {error.evalue}" if error else None,
        })  # fmt: skip
    return rows


def check(path: str | Path, *, assignment_id: str | None = None, json_out: str | None = None,
          spec_name: str | None = None, device: str | None = None) -> int:  # fmt: skip
    from grader.cells import fill_performance_cell

    path = Path(path)
    try:
        learner = read_notebook(path)
        assignment = (
            assignments.get(assignment_id) if assignment_id else assignments.for_notebook(path.stem)
        )
    except (NotebookError, ValueError) as err:
        print(f"grader check: {err}")
        return 2
    notes = []
    src_path = course.source_notebook(assignment.id, assignment.notebook)
    if not src_path.is_file():
        src_path = course.release_notebook(assignment.id, assignment.notebook)
        notes.append("instructor source notebook not found: hidden tests skipped")
    source = read_notebook(src_path)
    graded, missing = merge(source, learner)
    notes += missing
    cell_report = None
    if assignment.kernel_free:  # the same code as nbgrader's GradeCells: the notebook never runs
        print(
            f"grader check: {path} (assignment {assignment.id}); grading out of the kernel ...",
            flush=True,
        )
        from grader.cells import fill_graded_cells

        cell_report = fill_graded_cells(graded, assignment, solution_ids(source))
    else:
        print(
            f"grader check: {path} (assignment {assignment.id}); running the notebook ...",
            flush=True,
        )
        execute(graded, path.resolve().parent, assignment.timeout_s)
    try:
        perf = fill_performance_cell(graded, assignment, solution_ids(source), spec_name, device,
                                     cell_report)  # the speed gate's verdicts: computed just above
    except GradingError as err:
        print(f"grader check: the grader could not run: {err}")
        return 2
    rows = scores(graded)
    total = sum(r["points"] or 0 for r in rows)
    out_of = sum(r["max_points"] for r in rows)
    print(f"\n{'cell':24s} {'points':>12s}")
    for r in rows:
        print(f"{r['grade_id']:24s} {r['points'] or 0:5.2f} / {r['max_points']:<5g}" +
              (f"  {r['error'][:200]}" if r["error"] else ""))  # fmt: skip
    print(f"{'total':24s} {total:5.2f} / {out_of:<5g}")
    for note in notes:
        print(f"note: {note}")
    if cell_report is not None:
        for gid, c in cell_report["cells"].items():
            print(f"\n[{gid}] " + ("passed" if c["passed"] else "FAILED: " + c["reason"]))
            for line in c["lines"]:
                print(line)
        for flag in cell_report["flags"]:
            print(f"flag: {flag}")
        for item in cell_report["unavailable"]:
            print(f"protection unavailable here: {item}")
    if perf is not None:
        print("\n" + perf.feedback)
    if json_out:
        report = {"notebook": str(path), "assignment": assignment.id, "cells": rows, "total": total,
                  "max_total": out_of, "notes": notes, "performance": perf.report if perf else None,
                  "out_of_kernel": cell_report}  # fmt: skip
        course.write_report(json_out, report)
    return 0


def check_my_work(grade_id: str, notebook: str) -> None:
    """What a notebook's test cell runs: the grader's own check of the *saved* notebook, in a fresh
    process (``python -m grader check``, the same code as autograding). Under nbgrader the
    grader overwrites this cell's output, so it only prints a note there."""
    import subprocess
    import sys
    import tempfile

    if os.environ.get("NBGRADER_EXECUTION"):
        print(
            "Graded by the grader outside this notebook's kernel; its verdict replaces this output."
        )
        return
    if not Path(notebook).is_file():
        raise FileNotFoundError(
            f"cannot find {Path(notebook).resolve()}: run this from your notebook's folder"
        )
    print(f"Checking the solution cells *saved* in {notebook} (save first) ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        proc = subprocess.run([sys.executable, "-m", "grader", "check", notebook, "--json", str(out)],
                              capture_output=True, text=True)  # fmt: skip
        if not out.is_file():
            raise RuntimeError(f"the grader could not run:\n{proc.stdout[-2000:]}")
        report = json.loads(out.read_text())
    cell = (report.get("out_of_kernel") or {}).get("cells", {}).get(grade_id)
    if cell is None:
        raise RuntimeError(f"the grader has no check called {grade_id!r}")
    for line in cell["lines"]:
        print(line)
    for flag in report["out_of_kernel"]["flags"]:
        print(f"flag: {flag}")
    if not cell["passed"]:
        raise AssertionError(cell["reason"])
