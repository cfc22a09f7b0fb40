"""The headline demo (``make demo`` = ``python -m grader.cli.demo``): benchmark both workloads, then
autograde, in one table.

Shows that reference solutions earn full marks and untouched student versions only what needs no
code. Grading is most of its time (about 30 minutes on 2 CPU cores): it prints each notebook as it
starts, with an estimate of the time left. Lives in ``grader`` because it grades; effkit never
imports grader.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from effkit import bench  # imported before torch: it sets OMP_WAIT_POLICY (see effkit.bench)
from grader import assignments
from grader.common import course
from grader.scoring.report import GradingReport, load_grading

NOTE_WIDTH = 120  # characters of a grading row's note in the table


def clip(text: str, width: int = NOTE_WIDTH) -> str:
    """``text`` on one line, cut at a word boundary with an ellipsis when it is longer than ``width``."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    if " " in cut and text[width - 1] != " ":
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"


def _note(report: GradingReport) -> str:
    perf = report.performance
    if perf is not None and perf.speedup is not None:
        acc = f", Δacc {perf.gate.mean_diff_pp:+.2f} pp" if perf.gate else ""
        return f"speedup {perf.speedup:.2f}x on {perf.device}{acc}"
    failed = [c for c in report.cells if c.error]
    if failed:
        return clip(f"{failed[0].grade_id}: {failed[0].error}")
    problems = perf.problems if perf else []
    return clip(problems[0]) if problems else ""


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
        return {
            "name": name,
            "score": 0.0,
            "max_score": 0.0,
            "note": f"grading could not run (exit {rc}); see {log}",
        }
    report = load_grading(json.loads(report_path.read_text()))
    return {
        "name": name,
        "score": report.total,
        "max_score": report.max_total,
        "note": _note(report),
        "report": str(report_path),
    }


lesson_order = assignments.lesson_order  # lesson2 before lesson10


def expected_grading_s(assignment_id: str, kind: str) -> float:
    """How long grading this notebook took where its manifest's figure was measured."""
    m = assignments.manifest(assignment_id)
    return m.reference_grading_s if kind == "reference" else m.stub_grading_s


def grading_jobs() -> list[tuple[str, str, Path]]:
    """(assignment, kind, notebook) for every reference solution and untouched student version, in lesson order."""
    jobs = []
    for aid in sorted(assignments.known(), key=lesson_order):
        a = assignments.get(aid)
        for kind, path in (
            ("reference", course.source_notebook(aid, a.notebook)),
            ("untouched", course.release_notebook(aid, a.notebook)),
        ):
            if path.is_file():
                jobs.append((aid, kind, path))
    return jobs


def progress_line(done: int, expected_s: list[float], elapsed_s: float, name: str) -> str:
    """What the demo prints before grading notebook ``done + 1`` of ``len(expected_s)``, with an
    estimate of the time left: the manifests' expected times of the notebooks left, scaled by this
    machine's pace on those done (a quick stub first says nothing of lesson 11's reference)."""
    line = f"grading {done + 1}/{len(expected_s)}: {name}"
    if done:
        pace = elapsed_s / sum(expected_s[:done])
        left_min = pace * sum(expected_s[done:]) / 60
        line += f" (~{left_min:.0f} min left)" if left_min >= 1 else " (under a minute left)"
    return line


def grade_all(out: Path) -> list[dict]:
    """Check the reference solution and the untouched student version of every assignment."""
    jobs = grading_jobs()
    print(
        f"\nautograding {len(jobs)} notebooks, each in a fresh process (most of the demo's time)",
        flush=True,
    )
    expected = [expected_grading_s(aid, kind) for aid, kind, _ in jobs]
    rows, start = [], time.monotonic()
    for k, (aid, kind, path) in enumerate(jobs):
        print(progress_line(k, expected, time.monotonic() - start, f"{aid} {kind}"), flush=True)
        rows.append(grade_one(aid, kind, path, Path(out)))
    print(f"graded {len(jobs)} notebooks in {(time.monotonic() - start) / 60:.1f} min", flush=True)
    return rows


def choose_profiles(data: str | None, cifar_data: str | None) -> dict[str, tuple[str, str | None]]:
    import torch

    if torch.cuda.is_available():
        return {"bert": ("gpu", data), "cifar": ("gpu", cifar_data)}
    return {
        "bert": ("cpu" if data else "smoke", data),
        "cifar": ("cpu" if cifar_data else "smoke", cifar_data),
    }


def _x(v) -> str:
    return f"{v:.2f}x" if v else "—"


def _eval_rows(result: dict) -> int | None:
    config = (result.get("recipes") or {}).get("naive", {}).get("config") or {}
    return config.get("eval_rows") or config.get("n_test")


def smoke_caveat(results: dict[str, dict]) -> list[str]:
    """The line that keeps a smoke row's Δacc from being read as a grading's accuracy verdict."""
    smoke = [wl for wl, r in results.items() if r.get("profile") == "smoke"]
    if not smoke:
        return []
    rows = [f"{wl} {_eval_rows(results[wl])}" for wl in smoke if _eval_rows(results[wl])]
    held_out = f" ({', '.join(rows)} held-out rows)" if rows else ""
    return [
        f"smoke profile ({', '.join(smoke)}): a tiny benchmark on synthetic data{held_out}, not a grading: "
        "its Δacc moves by a few pp from run to run; the ±0.5 pp accuracy gate applies to gradings "
        "(grader/README.md)"
    ]


def summary(results: dict[str, dict], grades: list[dict]) -> str:
    """One table: each workload's headline first, the other figures beside it, then the grades."""
    devices = sorted({r["device"] for r in results.values()})
    lines = [
        "",
        "=" * 96,
        "effkit demo — every figure measured on this machine in this run",
        f"device: {', '.join(devices)}",
        "=" * 96,
        f"{'workload':<14}{'HEADLINE':>10}  {'(what)':<34}{'samples/s':>10}{'interval':>13}"
        f"{'cover':>7}{'t→target':>9}{'Δacc pp':>9}",
    ]
    for wl, r in results.items():
        head = r.get("headline") or bench.headline(r)
        lo, hi = r["speedup_ci"]
        cov = r.get("speedup_ci_coverage")
        what = (
            "time-to-target, evals counted"
            if head["metric"] != "speedup"
            else "samples/s, same model"
        )
        lines.append(
            f"{wl + '/' + r['profile']:<14}{_x(head['value']):>10}  {what:<34}"
            f"{_x(r['speedup']):>10}{f'{lo:.2f}-{hi:.2f}':>13}"
            f"{(f'{100 * cov:.0f}%' if cov else '—'):>7}{_x(r.get('time_to_target_speedup')):>9}"
            f"{r['accuracy_delta_pp']:>+9.2f}"
        )
    lines.append(
        "interval: order-statistic interval of the median per-pair ratio; cover: its real coverage"
    )
    lines += smoke_caveat(results)
    for wl, r in results.items():  # what each column counts, and where the whole runs disagree
        lines += [f"{wl}: {line}" for line in bench.counted(r)[1:]]
    lines.append(
        "samples/s: interleaved A/B bursts after warm-up; t→target: the two whole runs from scratch, "
        "one after the other, every evaluation counted (a change in load between them lands there alone)"
    )
    if grades:
        lines += ["", f"{'exercise':<22}{'points':>12}  notes"]
        for g in grades:
            lines.append(
                f"{g['name']:<22}{g['score']:>6.1f} / {g['max_score']:<4.0f}  {g.get('note', '')}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m grader.cli.demo", description=__doc__.split("\n")[0]
    )
    p.add_argument("--data", default=None, help="GLUE SST-2 folder: BERT runs the cpu profile")
    p.add_argument("--cifar-data", default=None, help="folder holding cifar-10-batches-py/")
    p.add_argument("--out", default="runs/demo", type=Path)
    p.add_argument("--pairs", type=int, default=bench.DEFAULT_PAIRS)
    p.add_argument("--skip-grading", action="store_true")
    args = p.parse_args(argv)
    results = {}
    try:
        for wl, (profile, data) in choose_profiles(args.data, args.cifar_data).items():
            results[wl] = bench.run(wl, profile, data, args.out / wl, pairs=args.pairs)
    except (ValueError, FileNotFoundError) as e:
        print(f"grader.cli.demo: error: {e}", file=sys.stderr)
        return 2
    grades = [] if args.skip_grading else grade_all(args.out / "grading")
    text = summary(results, grades)
    print(text)
    (args.out / "summary.txt").write_text(text + "\n")
    (args.out / "summary.json").write_text(
        json.dumps({"bench": results, "grades": grades}, indent=2)
    )
    print(f"\nplots and JSON: {args.out}/ (throughput.png, accuracy_vs_time.png per workload)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
