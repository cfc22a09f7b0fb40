"""``python -m grader campaign ASSIGNMENT``: every check of the reference, graded N times beside busy cores.

``grader stress`` repeats the performance cell alone; a lesson whose timed checks are other cells
(lesson 4's recipe, lesson 5's speed and memory plans) or whose grading changed anywhere needs the
whole grading repeated, the path ``grader check`` and autograding take. Each grading is a fresh
run of ``pipeline.grade`` on the reference notebook; a lost point prints its reason at once, and
the JSON (rewritten after every grading) keeps what a stopped campaign finished.

The summary states what N gradings can show: with ``f`` failures in ``n``, the one-sided 95% upper
bound on the failure rate (exact binomial: 5.8% for none in 50, 1.0% for none in 300).
"""

from __future__ import annotations

import statistics
import time

from effkit.measure import device_name
from grader import assignments
from grader.cli.tools import busy_cores
from grader.common import course
from grader.frontends import pipeline


def upper_bound_95(failures: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound on a rate seen ``failures`` times in ``n``."""
    if failures >= n:
        return 1.0
    lo, hi = failures / n, 1.0
    for _ in range(60):  # bisect P(X <= failures | p) = 0.05
        p = (lo + hi) / 2
        term, cdf = (1 - p) ** n, 0.0
        for k in range(failures + 1):
            cdf += term
            term *= (n - k) / (k + 1) * p / (1 - p)
        lo, hi = (p, hi) if cdf > 0.05 else (lo, p)
    return hi


def campaign(
    assignment_id: str, times: int = 50, busy: int = 1, spec_name: str | None = None, out=None
) -> dict:
    if times < 1:
        raise ValueError(f"campaign: times must be at least 1, not {times}")
    a = assignments.get(assignment_id)
    path = course.source_notebook(a.id, a.notebook)
    rows: list[dict] = []
    summary: dict = {}
    with busy_cores(busy):  # SIGTERM/SIGINT end it through its finally: no spinning process left
        for i in range(times):
            t0 = time.perf_counter()
            report = pipeline.grade(pipeline.load(path, a.id), spec_name)
            lost = {
                s.grade_id: s.error or f"{s.points} of {s.max_points}"
                for s in report.scores
                if (s.points or 0) < s.max_points
            }
            perf = report.performance.report if report.performance else None
            rows.append(
                {
                    "total": report.total,
                    "max_total": report.max_total,
                    "lost": lost,
                    "speedup": getattr(perf, "speedup", None),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
            x = rows[-1]
            print(
                f"  grading {i + 1}/{times}: {x['total']:g} / {x['max_total']:g}, "
                f"{x['seconds']:.0f} s"
                + (f", speedup {x['speedup']:.2f}x" if x["speedup"] else ""),
                flush=True,
            )
            for gid, why in lost.items():
                print(f"    {gid}: {why}", flush=True)
            summary = _summary(a.id, busy, spec_name, rows)
            if out:
                course.write_report(out, summary)
    print(summary["verdict"])
    return summary


def _summary(aid: str, busy: int, spec_name, rows: list[dict]) -> dict:
    n, failed = len(rows), sum(1 for r in rows if r["total"] < r["max_total"])
    bound = upper_bound_95(failed, n)
    return {
        "assignment": aid,
        "spec": spec_name,
        "busy_cores": busy,
        "device": device_name(),
        "gradings": n,
        "full_marks": n - failed,
        "failure_rate_upper_95": bound,
        "seconds_median": statistics.median(r["seconds"] for r in rows),
        "rows": rows,
        "verdict": (
            f"{aid}: {n - failed} of {n} gradings of the reference got full marks beside {busy} busy "
            f"core(s) on {device_name()}; failure rate below {100 * bound:.1f}% (95% one-sided)"
        ),
    }
