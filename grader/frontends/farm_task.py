"""One farm grading on a node: the real pipeline in a fresh process, its tree killed at the limit.

``run_job`` is the body of the Ray task (``grader.frontends.farm``); it starts ``python -m
grader.frontends.farm_task FOLDER`` in a private folder, pinned to the slot's cores, and waits at
most the farm's limit. A fresh process per grading: no state (overrides snapshot, cgroups, imported
learner modules) carries from one grading to the next, and a hang is ended by killing a process
tree this task owns (it is the subreaper of every process the grading leaves behind) instead of
the Ray worker. The report crosses back as JSON from a file in that folder (root 0700): learner
code runs in the grading's sandboxes, which cannot see it.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from effkit.measure import device_name
from grader import assignments
from grader.common import course
from grader.common.device import default_device
from grader.frontends import pipeline
from grader.frontends.farm_ledger import grader_version
from grader.frontends.notebook import NotebookError
from grader.sandbox.box import become_subreaper
from grader.sandbox.proctree import descendants
from grader.scoring.device_class import device_info
from grader.scoring.perf import GradingError, load_gate
from grader.scoring.report import GradingReport
from grader.scoring.targets import target_for

REPORT = "report.json"
LOG = "grading.log"


def device_refusal(job: dict) -> str | None:
    """Why this slot must not grade ``job`` (its lesson needs a GPU, the slot grades on the CPU),
    or None. The driver asks before queuing, the node again on the device it really has."""
    if job.get("needs") == "gpu" and not str(job.get("device", "")).startswith("cuda"):
        return (
            f"not graded: {job['assignment']} is graded on a GPU only (its manifest says "
            "device='gpu') and this slot has none; grade it on a farm with GPU nodes "
            "(python -m grader farm --address ...)"
        )
    return None


def calibration_refusal(job: dict) -> str | None:
    """Why this slot must not time ``job``: its accuracy gate has no calibration for this device
    class, so a correct solution could fail on noise nobody measured (the conservative fallback
    gate is used only when the instructor says so: ``uncalibrated_ok``, ``--uncalibrated``)."""
    if not job.get("timed") or job.get("uncalibrated_ok"):
        return None
    a = assignments.get(job["assignment"])
    device = job.get("device") or default_device()
    name = device_name(device)
    target = target_for(a, name)
    table = target.table or target.device_class
    _, calibration, _ = load_gate(a.id, a.spec(device, job.get("spec")), table, name)
    if calibration != "fallback":
        return None
    return (
        f"not graded: {a.id}'s accuracy gate has no calibration for {name} (targets row {table}); "
        f"calibrate it on a node of this class (python -m grader calibrate --assignment {a.id}), "
        "or farm with --uncalibrated to grade with the conservative fallback gate"
    )


def failed(job: dict, reason: str, status: str = "failed", **meta) -> GradingReport:
    """A report that says why this submission has no grade (one line, the learner's words);
    ``status="refused"``: this slot cannot grade it (another device class)."""
    return GradingReport(
        assignment=job["assignment"],
        student=job["student"],
        notebook=job["notebook"],
        submission_sha256=job["sha256"],
        grader_version=job["grader_version"],
        status=status,
        reason=reason,
        timed=job.get("timed", False),
        **meta,
    )


def _pdeathsig_and_pin(cores: list[int] | None):
    def apply() -> None:
        os.setsid()  # one process group per grading: killed as a whole at the limit
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with this task
        if cores:
            os.sched_setaffinity(0, cores)  # the timed protocol pins within these (supervisor)

    return apply


def _kill_tree(root: int) -> None:
    # The grading's sandboxes leave their process group (unshare, setsid): walk /proc. Orphans
    # re-parent to this process (the subreaper), so a second walk from here finds the rest.
    doomed = [root, *descendants(root), *descendants(os.getpid())]
    for target in doomed:
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # Killed orphans are now this long-lived Ray worker's children: reap them, or each grading
    # would leave zombies behind (a hang test found two, the sandbox's unshare and sh)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in doomed if os.path.exists(f"/proc/{p}")]
        for pid in left:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass  # not (yet) ours: its parent dies first, then it is re-parented here
        if not left:
            return
        time.sleep(0.05)


def run_job(job: dict, *, limit_s: float, cores=None, slot=None, node_id="", attempt=1) -> str:
    """Grade ``job`` (a dict from the driver, notebook text included) and return the
    ``GradingReport`` as JSON; never raises for the submission's faults, only for the node's."""
    become_subreaper()
    started = time.time()
    meta = dict(
        host=socket.gethostname(),
        node_id=node_id,
        pid=os.getpid(),
        slot=slot,
        cores=list(cores or []),
        gpus=os.environ.get("CUDA_VISIBLE_DEVICES"),
        started_at=started,
        attempt=attempt,
    )
    with tempfile.TemporaryDirectory(prefix="effkit-farm-") as tmp:  # mode 0700
        folder = Path(tmp)
        (folder / "job.json").write_text(json.dumps(job | {"meta": meta}))
        env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
        if Path(job.get("course_root", "/nonexistent"), course.SOURCE_DIR).is_dir():
            env["EFFKIT_COURSE_ROOT"] = job["course_root"]  # else the node's own checkout
        with (folder / LOG).open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "grader.frontends.farm_task", str(folder)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_pdeathsig_and_pin(cores),
            )
            try:
                proc.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                _kill_tree(proc.pid)
                proc.wait()
                end = time.time()
                return failed(
                    job,
                    f"the grading did not finish within the farm's limit of {limit_s:g} s and was "
                    "stopped (an endless loop in a cell?); nothing was graded",
                    **meta,
                    finished_at=end,
                    wall_s=end - started,
                ).model_dump_json()
            _kill_tree(proc.pid)  # anything a sandbox left behind dies with its grading
        out = folder / REPORT
        if proc.returncode == 0 and out.is_file():
            return out.read_text()
        tail = (folder / LOG).read_text(errors="replace")[-600:].strip().replace("\n", " | ")
        end = time.time()
        return failed(
            job,
            f"the grading process exited with {proc.returncode} (the grader's fault, not the "
            f"learner's; log tail: {tail})",
            **meta,
            finished_at=end,
            wall_s=end - started,
        ).model_dump_json()


def grade_folder(folder: Path) -> GradingReport:
    """In the fresh process: the real pipeline (``load`` + ``grade``) on the job's notebook."""
    job = json.loads((folder / "job.json").read_text())
    meta = job.pop("meta")
    if job["grader_version"] != grader_version():
        return failed(
            job,
            f"this node runs grader {grader_version()}, the driver {job['grader_version']}: "
            "install the same effkit checkout on every node",
            **meta,
        )
    here = default_device()  # what this slot really has (Ray's CUDA_VISIBLE_DEVICES)
    meta["device"] = device_info(job.get("device") if here == "cuda" else "cpu")
    if str(job.get("device", "")).startswith("cuda") and here != "cuda":
        # graded on the CPU it would meet the CPU's targets and gate: another device class
        why = device_refusal(job | {"device": "cpu"}) or (
            f"not graded: the farm sent a {job['device']} grading to a slot without a GPU "
            f"({meta['device'].label}); grading it on the CPU would judge it by another device "
            "class's targets"
        )
        return failed(job, why, status="refused", **meta)
    why = calibration_refusal(job)
    if why:
        return failed(job, why, status="refused", **meta)
    path = folder / "submission" / f"{job['notebook']}.ipynb"
    path.parent.mkdir()
    path.write_text(job["notebook_text"])
    try:
        sub = pipeline.load(path, job["assignment"])
        report = pipeline.grade(sub, job.get("spec"), job.get("device"))
    except (NotebookError, ValueError) as err:
        return failed(job, f"not graded: {err}", **meta)
    except GradingError as err:
        return failed(job, f"the grader could not run (not the learner's fault): {err}", **meta)
    return pipeline.grading_report(
        report,
        student=job["student"],
        submission_sha256=job["sha256"],
        grader_version=job["grader_version"],
        **meta,
    )


def main(folder: str) -> int:
    folder = Path(folder)
    try:
        report = grade_folder(folder)
    except Exception:  # the grader's own bug: the driver reports it as such, with the trace
        traceback.print_exc()
        return 3
    end = time.time()
    report.finished_at = end
    report.wall_s = end - (report.started_at or end)
    tmp = folder / f".{REPORT}"
    tmp.write_text(report.model_dump_json())
    os.replace(tmp, folder / REPORT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
