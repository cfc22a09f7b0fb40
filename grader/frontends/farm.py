"""``python -m grader farm ASSIGNMENT``: every collected submission graded through Ray.

The driver (this process) screens the submissions as ``grader autograde`` does, skips those whose
ledger entry is current (``farm_ledger``), sends the rest to Ray as tasks, and is the only writer
of the ledger, the signed archive and, through ``farm_record``, nbgrader's gradebook. Without
``--address`` it starts a private Ray with token authentication; with it, it joins a cluster (the
instructor's, started with the same grader checkout on every node). Ray 2.60 listens on every
interface even then (it turns 127.0.0.1 into the host's address itself): the token is the guard.

Slots: a timed grading holds one whole slot, a custom resource ``effkit_timed_slot`` (one unit per
slot on each node) and the node's cores split evenly between its slots, or one GPU (``num_gpus=1``,
Ray sets ``CUDA_VISIBLE_DEVICES``). A correctness-only grading takes one CPU and may pack.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from grader import assignments
from grader.common import course, evidence
from grader.frontends import farm_record
from grader.frontends.autograde import screen_submissions
from grader.frontends.farm_ledger import Ledger, grader_version, sha256_file, submitted_notebook
from grader.frontends.farm_ray import SLOT, ray_session
from grader.frontends.farm_task import device_refusal, failed, run_job
from grader.scoring.report import GradingReport

DEFAULT_LIMIT_S = 1800
RETRIES = 1  # a worker or node lost mid-grading: graded once more elsewhere, then marked failed
BACKSTOP_S = 120  # past the task's own limit: the node stopped answering, cancel it from here


@dataclass
class Outcome:
    """What one farm run did: reports by student (this run's and current ones), screening refusals."""

    reports: dict[str, GradingReport] = field(default_factory=dict)
    graded_now: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


class Tracker:
    """A Ray actor on the driver's node: which gradings run where, since when, which attempt."""

    def __init__(self):
        self.running: dict[str, tuple[float, str, int]] = {}
        self.attempts: dict[str, int] = {}

    def started(self, student: str, where: str, pid: int) -> int:
        """``where``: the node and its slot or GPU, as the progress lines name it."""
        self.attempts[student] = self.attempts.get(student, 0) + 1
        self.running[student] = (time.time(), where, pid)
        return self.attempts[student]

    def snapshot(self) -> dict[str, tuple[float, str, int]]:
        return dict(self.running)


def _slot_lock(node_id: str, slots: int):
    """Hold one of this node's slot locks (flock: released when the process dies) and return
    (slot, its cores, the open lock file). Ray admits at most ``slots`` timed gradings per node,
    so a lock is always free; the lock says *which* slot, so two never pin to the same cores."""
    folder = Path(f"/tmp/effkit-farm-slots-{node_id[:16]}")
    folder.mkdir(mode=0o700, exist_ok=True)
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // slots)
    while True:
        for i in range(slots):
            fh = (folder / f"slot-{i}.lock").open("w")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            return i, cores[i * per : (i + 1) * per] or cores[-per:], fh
        time.sleep(0.2)  # a killed grading's lock is released by the kernel a moment later


def ray_task(job: dict, limit_s: float, tracker, pin_slot: bool) -> str:
    """The Ray task: take a slot if timed on a CPU, tell the tracker, grade (``farm_task``)."""
    import ray  # optional heavy dependency: only the farm needs it

    node_id = ray.get_runtime_context().get_node_id()
    slot, cores, lock = None, None, None
    if pin_slot:
        node = next(n for n in ray.nodes() if n["NodeID"] == node_id)
        slot, cores, lock = _slot_lock(node_id, int(node["Resources"].get(SLOT, 1)))
    try:
        where = os.uname().nodename + (f" slot {slot}" if slot is not None else "")
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
        where += f" gpu {gpus}" if gpus and job.get("device", "").startswith("cuda") else ""
        attempt = ray.get(tracker.started.remote(job["student"], where, os.getpid()))
        return run_job(
            job, limit_s=limit_s, cores=cores, slot=slot, node_id=node_id, attempt=attempt
        )
    finally:
        if lock is not None:
            lock.close()


def _driver_lock():
    """One gradebook writer at a time: two farm runs (or ``grade`` calls of a grading service)
    may grade at once, but nbgrader's SQLite gradebook takes one ``autograde`` at a time."""
    folder = course.course_dir() / "farm"
    folder.mkdir(parents=True, exist_ok=True)
    fh = (folder / ".gradebook.lock").open("w")
    fcntl.flock(fh, fcntl.LOCK_EX)  # released when fh closes, or when this process dies
    return fh


def plan(assignment_id: str, students: list[str] | None, version: str):
    """(jobs to grade, current reports, refusals): the ledger decides what is already done."""
    a = assignments.get(assignment_id)
    good, bad = screen_submissions(assignment_id, students or None)
    ledger = Ledger(assignment_id)
    jobs, current = [], {}
    for student in good:
        path = submitted_notebook(assignment_id, student, a.notebook)
        sha = sha256_file(path)
        report = ledger.current(student, sha, version)
        if report is not None:
            current[student] = report
            continue
        jobs.append(
            {
                "assignment": assignment_id,
                "student": student,
                "notebook": a.notebook,
                "sha256": sha,
                "grader_version": version,
                "notebook_text": path.read_text(errors="replace"),
                "timed": a.performance_cell is not None,
                "needs": assignments.manifest(assignment_id).device,  # any, cpu or gpu
                "course_root": str(course.course_root()),
            }
        )
    return jobs, current, bad


def _accept(job: dict, text: str) -> GradingReport:
    """The node's JSON as a report for exactly this job, or a failed report saying why not."""
    try:
        report = GradingReport.model_validate_json(text)
    except ValidationError as err:
        return failed(job, f"the node sent a report that does not validate: {err.errors()[0]}")
    key = (report.assignment, report.student, report.submission_sha256, report.grader_version)
    if key != (job["assignment"], job["student"], job["sha256"], job["grader_version"]):
        return failed(job, "the node sent a report for another submission; refused")
    return report


def run(
    assignment_id: str,
    *,
    address: str | None = None,
    slots: int = 1,
    limit_s: float = DEFAULT_LIMIT_S,
    device: str | None = None,
    spec: str | None = None,
    students: list[str] | None = None,
    progress: bool = True,
    record: bool = True,
    uncalibrated: bool = False,
) -> Outcome:
    """Grade ``assignment_id``'s collected submissions (all, or only ``students``) that the
    ledger holds no current grading of; with ``record``, put them into nbgrader's gradebook."""
    t0 = time.time()
    version = grader_version()
    jobs, current, bad = plan(assignment_id, students, version)
    out = Outcome(reports=dict(current), up_to_date=sorted(current), refused=bad)
    ledger = Ledger(assignment_id)
    if jobs:
        for job in jobs:  # the instructor's word: time even where no gate is calibrated
            job["uncalibrated_ok"] = uncalibrated
        with ray_session(address, slots) as ray:  # RayStartError: it could not start
            _grade(ray, jobs, ledger, out, limit_s, device, spec, progress)
    if record:
        with _driver_lock():
            farm_record.record(assignment_id, ledger, out.reports)
    out.wall_s = time.time() - t0
    return out


def _grade(ray, jobs, ledger, out, limit_s, device, spec, progress) -> None:
    gpus = ray.cluster_resources().get("GPU", 0)
    device = device or ("cuda" if gpus else "cpu")
    here = ray.get_runtime_context().get_node_id()
    tracker = (
        ray.remote(Tracker)
        .options(
            num_cpus=0,
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                here, soft=False
            ),
        )
        .remote()
    )
    task = ray.remote(ray_task)
    bar = farm_record.Progress(len(jobs), enabled=progress)

    def finish(job: dict, report: GradingReport) -> None:
        ledger.write(report)  # the one write: a killed driver re-grades only what is missing
        if report.status == "graded" and report.performance is not None:
            _archive(report)
        out.reports[job["student"]] = report
        out.graded_now.append(job["student"])
        bar.done(report)

    pending = {}
    for job in jobs:
        # a CPU-only lesson never holds a GPU it cannot use; the rest grade on the farm's device
        job |= {"device": "cpu" if job["needs"] == "cpu" else device, "spec": spec}
        why = device_refusal(job)
        if why:  # never queued: no slot of this farm can grade it
            finish(job, failed(job, why, status="refused"))
            continue
        opts = {"num_cpus": 1, "max_retries": RETRIES}
        pin = job["timed"] and job["device"] == "cpu"
        if pin:
            opts |= {"resources": {SLOT: 1}}
        elif job["timed"] or job["needs"] == "gpu":
            opts |= {"num_gpus": 1}
        pending[task.options(**opts).remote(job, limit_s, tracker, pin)] = job
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        for ref in ready:
            job = pending.pop(ref)
            try:
                report = _accept(job, ray.get(ref))
            except ray.exceptions.RayError as err:
                report = failed(job, _ray_reason(err))
            finish(job, report)
        running = ray.get(tracker.snapshot.remote())
        waiting = {j["student"] for j in pending.values()}
        bar.update(
            running={s: running[s] for s in waiting & set(running)},
            queued=len(waiting - set(running)),
        )
        for ref, job in list(pending.items()):
            since = running.get(job["student"], (None,))[0]
            if since is not None and time.time() - since > limit_s + BACKSTOP_S:
                ray.cancel(ref, force=True)  # its own limit should have fired: the node is gone
    bar.close()


def _ray_reason(err) -> str:
    import ray  # optional heavy dependency: only the farm needs it

    first = (str(err).strip().splitlines() or [""])[0][:300]
    if isinstance(err, ray.exceptions.TaskCancelledError):
        why = f"its node stopped answering {BACKSTOP_S} s past the limit and it was cancelled"
    elif isinstance(err, ray.exceptions.RayTaskError):
        why = f"the grading task raised on its node ({first})"
    else:
        why = f"it was lost {RETRIES + 1} times: a Ray worker or node died ({type(err).__name__})"
    return f"not graded: {why}; not the learner's fault, run the farm again"


def _archive(report: GradingReport) -> None:
    """The leaderboard's signed copy of a timed report, as ``GradePerformance`` keeps one; the
    file name comes from the report, so archiving the same grading twice writes one file."""
    whose = {"student": report.student, "notebook": report.notebook}
    perf = report.performance.model_copy(update=whose).model_dump(mode="json")
    try:
        evidence.archive(course.course_dir(), perf)
    except (OSError, evidence.EvidenceError) as err:
        print(f"[{report.student}] grading report not archived (no leaderboard record): {err}")
