"""The farm's output: the live progress bar, nbgrader's gradebook, the final table and ``--json``.

The gradebook (SQLite, one writer) is written by ``nbgrader autograde`` run from the driver with
``EFFKIT_FARM_VERDICTS=1``: ``nbgrader_config.py`` then swaps the grading preprocessors for
``FarmVerdicts``, which copies each signed ledger entry's outputs into the notebook, so nbgrader
keeps its own bookkeeping (submission times, late penalties, ``autograded/``, formgrader) and
shows farm results exactly as it shows autograde's. Only current, signed, graded entries go in.
"""

from __future__ import annotations

import statistics
import time

from grader.common import course
from grader.frontends.autograde import nbgrader
from grader.frontends.farm_ledger import Ledger
from grader.scoring.report import GradingReport


class Progress:
    """tqdm bar: done / running / failed / queued; under it a line per running grading (where,
    whose, for how long); above it a line per finished grading."""

    def __init__(self, total: int, enabled: bool = True):
        from tqdm import tqdm  # not tqdm.auto: that pulls ipywidgets

        self.tqdm = tqdm
        self.bar = tqdm(total=total, desc="farm", unit="grading", disable=not enabled)
        self.enabled = enabled
        self.counts = {"done": 0, "running": 0, "failed": 0, "queued": total}
        self.slots: list = []  # one bar per running grading, reused as they come and go

    def done(self, report: GradingReport) -> None:
        self.counts["failed" if report.status == "failed" else "done"] += 1
        self.bar.update(1)
        if self.enabled:
            self.bar.write(line(report))
        self._show()

    def update(self, running: dict[str, tuple], queued: int) -> None:
        """``running``: student -> (started at, where, pid), the tracker's snapshot."""
        self.counts |= {"running": len(running), "queued": queued}
        self._show()
        if not self.enabled:
            return
        lines = slot_lines(running, time.time())
        while len(self.slots) < len(lines):
            self.slots.append(
                self.tqdm(total=0, position=len(self.slots) + 1, bar_format="{desc}", leave=False)
            )
        for i, bar in enumerate(self.slots):
            bar.set_description_str(lines[i] if i < len(lines) else "", refresh=True)

    def _show(self) -> None:
        self.bar.set_postfix_str(" ".join(f"{k} {v}" for k, v in self.counts.items()))

    def close(self) -> None:
        for bar in self.slots:
            bar.close()
        self.bar.close()


def slot_lines(running: dict[str, tuple], now: float) -> list[str]:
    """One line per running grading, by where it runs: "node slot 1: alice, 42 s"."""
    rows = sorted((where, student, since) for student, (since, where, *_) in running.items())
    return [f"  {where}: {student}, {now - since:.0f} s" for where, student, since in rows]


def line(r: GradingReport) -> str:
    where = f"{r.host}" + (f" slot {r.slot}" if r.slot is not None else "")
    where += f" gpu {r.gpus}" if r.timed and r.gpus else ""
    took = f"{r.wall_s:.1f} s" if r.wall_s is not None else "-"
    where += f" ({r.device.label})" if r.device else ""
    if r.status == "refused":
        return f"[{r.student}] REFUSED on {where or 'the driver'}: {r.reason}"
    if r.status == "failed":
        return f"[{r.student}] FAILED after {took} on {where or '?'}: {r.reason}"
    return f"[{r.student}] graded {r.total:g} / {r.max_total:g} in {took} on {where}"


def record(assignment_id: str, ledger: Ledger, reports: dict[str, GradingReport]) -> list[str]:
    """Put every graded, not yet recorded entry into nbgrader's gradebook; the students done."""
    todo = [s for s, r in reports.items() if r.status == "graded" and not ledger.read(s)[1]]
    if not todo:
        return []
    submitted = course.course_dir() / "submitted"
    others = sorted(
        p.parent.name for p in submitted.glob(f"*/{assignment_id}") if p.parent.name not in todo
    )
    args = ["autograde", assignment_id, "--force"]
    if others:
        args.append(f"--CourseDirectory.student_id_exclude={','.join(others)}")
    done = nbgrader(*args, env_extra={"EFFKIT_FARM_VERDICTS": "1"})
    if done.returncode != 0:
        print(f"nbgrader autograde (recording the farm's results) failed:\n{done.stderr[-3000:]}")
        return []
    for student in todo:  # a driver killed before this line records them again: same verdicts
        ledger.mark_recorded(student)
    exported = nbgrader("export", f"--to={course.course_dir() / 'grades.csv'}")
    if exported.returncode != 0:
        print(f"nbgrader export failed:\n{exported.stderr[-2000:]}")
    return todo


def summary(assignment_id: str, out) -> dict:
    """The run as JSON-able data: per grading its wall time, node and slot; the totals."""
    rows = []
    for student, r in sorted(out.reports.items()):
        rows.append(
            {
                "student": student,
                "status": r.status,
                "graded_this_run": student in out.graded_now,
                "total": r.total,
                "max_total": r.max_total,
                "reason": r.reason,
                "wall_s": r.wall_s,
                "host": r.host,
                "slot": r.slot,
                "cores": r.cores,
                "gpus": r.gpus,
                "device": r.device.label if r.device else None,
                "started_at": r.started_at,
                "finished_at": r.finished_at,
                "attempt": r.attempt,
                **device_time(r.wall_s, r.gpus, r.cores),
            }
        )
    rows += [{"student": s, "status": "refused", "reason": why} for s, why in out.refused.items()]
    walls = [r["wall_s"] for r in rows if r.get("graded_this_run") and r.get("wall_s")]
    now = [r for r in rows if r.get("graded_this_run")]
    return {
        "assignment": assignment_id,
        "gradings": rows,
        "graded_this_run": len(out.graded_now),
        "up_to_date": len(out.up_to_date),
        "refused": sum(r["status"] == "refused" for r in rows),  # screening and device class
        "failed": sum(r["status"] == "failed" for r in rows),
        "grading_s_total": sum(walls),
        "grading_s_median": statistics.median(walls) if walls else None,
        "wall_s": out.wall_s,
        # what the cohort's gradings held: GPU-seconds on GPU slots, core-seconds on CPU slots
        "gpu_s_total": sum(r.get("gpu_s") or 0.0 for r in now),
        "core_s_total": sum(r.get("core_s") or 0.0 for r in now),
    }


def device_time(wall_s, gpus, cores) -> dict:
    """A grading's device time: its wall time on the slot times the GPUs it held, or else the cores
    (a timed CPU grading holds its slot's cores whole; an untimed one counts one core)."""
    if wall_s is None:
        return {"gpu_s": None, "core_s": None}
    held = [g for g in (gpus or "").split(",") if g.strip()]  # CUDA_VISIBLE_DEVICES, e.g. "0"
    if held:
        return {"gpu_s": wall_s * len(held), "core_s": None}
    return {"gpu_s": None, "core_s": wall_s * max(1, len(cores or []))}


def print_table(s: dict) -> None:
    print(
        f"\n{s['assignment']}: {s['graded_this_run']} graded now, {s['up_to_date']} up to date, "
        f"{s['failed']} failed, {s['refused']} not gradable; wall {s['wall_s']:.1f} s, "
        f"grading time {s['grading_s_total']:.1f} s; device time "
        f"{s['gpu_s_total']:.1f} GPU-s, {s['core_s_total']:.1f} core-s"
    )
    print(f"{'student':16s} {'status':8s} {'points':>13s} {'wall s':>7s}  where / why")
    for r in s["gradings"]:
        pts = f"{r['total']:5.2f} / {r['max_total']:<5g}" if r.get("total") is not None else "-"
        wall = f"{r['wall_s']:7.1f}" if r.get("wall_s") is not None else "      -"
        slot = f" slot {r['slot']}" if r.get("slot") is not None else ""
        device = f" ({r['device']})" if r.get("device") else ""
        where = r.get("reason") or f"{r['host']}{slot}{device}" + (
            "" if r["graded_this_run"] else " (ledger)"
        )
        print(f"{r['student']:16s} {r['status']:8s} {pts:>13s} {wall}  {where}")
