"""The cohort's grading service: root grades what the unprivileged formgrader asks for, and signs it.

Formgrader runs as the grader account (no root shell for an instructor or a TA); a grading needs
root for its sandbox. This process, started by the hub as root, listens on a Unix socket that only
the grader account may open (its folder and mode), and checks every caller again by SO_PEERCRED.
A request is one JSON line ``{"assignment": ID, "student": NAME}``: never a path, never code. The
assignment must be in the registry, the student a learner of the cohort, and the collected copy
byte for byte one of that learner's own submissions in the exchange (files their account owns), so
a signed grade always grades what the learner submitted. The answer is the ``GradingReport``
signed with Ed25519 (``grading_signature``), also kept root-owned under ``course/signed/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import socket
import stat
import struct
import sys
from pathlib import Path

from grader import assignments
from grader.common import evidence
from grader.frontends import grading_client, grading_signature
from grader.frontends.cohort_plan import Plan, load_plan, state_dir
from grader.frontends.farm_ledger import grader_version
from grader.frontends.farm_task import run_job
from grader.frontends.screening import MAX_NOTEBOOK_BYTES
from grader.scoring.report import GradingReport

REQUEST_BYTES = 1024
REQUEST_TIMEOUT_S = 10
GRADING_LIMIT_S = grading_client.GRADING_LIMIT_S


class Refused(ValueError):
    """A request the service will not grade; the message is the one line the caller sees."""


def peer_uid(conn: socket.socket) -> int:
    _pid, uid, _gid = struct.unpack(
        "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    )
    return uid


def parse(line: bytes, learners: list[str]) -> tuple[str, str]:
    """(assignment, student) from the request, or Refused: known ids and cohort learners only."""
    try:
        request = json.loads(line)
    except ValueError as err:
        raise Refused("the request is not JSON") from err
    if not isinstance(request, dict) or set(request) != {"assignment", "student"}:
        raise Refused('a request is {"assignment": ID, "student": NAME} and nothing else')
    aid, student = request["assignment"], request["student"]
    if not isinstance(aid, str) or not isinstance(student, str):
        raise Refused("assignment and student are names")
    try:
        assignments.get(aid)
    except ValueError as err:
        raise Refused(f"unknown assignment {aid!r}") from err
    if student not in learners:
        raise Refused(f"{student!r} is not a learner of this cohort")
    return aid, student


def _read_owned(parent_fd: int, names: list[str], uid: int | None) -> bytes:
    """The file at ``names`` below ``parent_fd``, every step opened without following links, a
    regular file of at most MAX_NOTEBOOK_BYTES, each step owned by ``uid`` when given."""
    fd = os.dup(parent_fd)
    try:
        for i, name in enumerate(names):
            last = i == len(names) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | (0 if last else os.O_DIRECTORY)
            nxt = os.open(name, flags | os.O_NONBLOCK, dir_fd=fd)
            os.close(fd)
            fd = nxt
            st = os.fstat(fd)
            if uid is not None and st.st_uid != uid:
                raise Refused(f"{name} is not the learner's own file")
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_NOTEBOOK_BYTES:
            raise Refused("the submission is not a regular file of a notebook's size")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(MAX_NOTEBOOK_BYTES + 1)
    finally:
        os.close(fd)


def submission(plan: Plan, aid: str, student: str) -> bytes:
    """The collected notebook, if it is one of the learner's own submissions in the exchange."""
    notebook = f"{assignments.get(aid).notebook}.ipynb"
    root = os.open(plan.course_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        collected = _read_owned(root, ["submitted", student, aid, notebook], None)
    except FileNotFoundError as err:
        raise Refused(f"{student} has no collected submission of {aid}") from err
    except OSError as err:
        raise Refused(
            f"{student}'s collected {aid} cannot be read safely ({err.strerror})"
        ) from err
    finally:
        os.close(root)
    uid = pwd.getpwnam(student).pw_uid
    inbound = Path(plan.exchange) / plan.course_id / "inbound"
    fd = os.open(inbound, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(fd):
            if not name.startswith(f"{student}+{aid}+"):
                continue
            try:
                own = _read_owned(fd, [name, notebook], uid)
            except (OSError, Refused):
                continue  # filed under their name by another account, or not a notebook file
            if own == collected:
                return collected
    finally:
        os.close(fd)
    raise Refused(f"the collected {aid} of {student} is none of {student}'s own submissions")


def grade_submission(aid: str, student: str, data: bytes) -> GradingReport:
    """The one place a grading happens: the farm's node entry, the code a Ray slot runs (a fresh
    process, its tree killed at the limit). Not the farm's ``grade(assignment_id, path)``: that
    starts a private Ray per call (~20 s, and it failed to start at load 11+ here); a course with a
    cluster points the instructor's `grader farm` at it instead."""
    a = assignments.get(aid)
    job = {
        "assignment": aid,
        "student": student,
        "notebook": a.notebook,
        "sha256": hashlib.sha256(data).hexdigest(),
        "grader_version": grader_version(),
        "notebook_text": data.decode("utf-8", errors="replace"),
        "timed": a.performance_cell is not None,
        "course_root": str(Path(__file__).resolve().parents[2]),
        "device": None,
        "spec": None,
    }
    return GradingReport.model_validate_json(run_job(job, limit_s=GRADING_LIMIT_S))


def keep(plan: Plan, signed: dict, report: GradingReport) -> None:
    """The signed grading under ``course/signed/`` (root's), and the leaderboard's HMAC copy."""
    folder = (
        Path(plan.course_dir) / grading_signature.SIGNED_DIR / evidence.safe_name(report.assignment)
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{evidence.safe_name(report.student)}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(signed, indent=1, sort_keys=True))
    os.replace(tmp, path)
    if report.status == "graded" and report.performance is not None:
        perf = report.performance.model_dump(mode="json")
        perf |= {"student": report.student, "notebook": report.notebook}
        evidence.archive(Path(plan.course_dir), perf)


def answer(plan: Plan, key, grader_uid: int, conn: socket.socket) -> dict:
    """One connection's answer: {"signed": ...} or {"refused": one line}."""
    if peer_uid(conn) != grader_uid:
        return {"refused": "only the course's grader account may ask for gradings"}
    conn.settimeout(REQUEST_TIMEOUT_S)
    line = b""
    while not line.endswith(b"\n") and len(line) <= REQUEST_BYTES:
        chunk = conn.recv(REQUEST_BYTES)
        if not chunk:
            break
        line += chunk
    try:
        aid, student = parse(line[: REQUEST_BYTES + 1], plan.learners)
        data = submission(plan, aid, student)
    except Refused as why:
        return {"refused": str(why)}
    report = grade_submission(aid, student, data)
    signed = grading_signature.sign(key, report.model_dump(mode="json"))
    keep(plan, signed, report)
    return {"signed": signed}


def serve(plan: Plan) -> None:
    key = grading_signature.load_signer(state_dir(), Path(plan.course_dir))
    grader = pwd.getpwnam(plan.grader)
    path = Path(plan.grading_socket)
    path.parent.mkdir(mode=0o750, exist_ok=True)
    st = os.lstat(path.parent)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:  # planted by another account: never chown it
        sys.exit(f"{path.parent} is not a folder of root's: the grading service will not start")
    os.chown(path.parent, 0, grader.pw_gid)
    path.parent.chmod(0o750)  # the grader account's group may pass; no other account
    path.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        os.chown(path, 0, grader.pw_gid)
        path.chmod(0o660)
        server.listen(16)
        print(f"grading service on {path} for {plan.grader} (uid {grader.pw_uid})", flush=True)
        while True:  # one grading at a time: a timed grading needs the machine to itself
            conn, _ = server.accept()
            with conn:
                try:
                    reply = answer(plan, key, grader.pw_uid, conn)
                except (
                    Exception
                ) as err:  # the grader's own bug: this grading fails, not the service
                    reply = {"refused": f"the grading service failed ({type(err).__name__}: {err})"}
                print(f"[grading] {reply.get('refused') or 'signed'}", flush=True)
                try:
                    conn.settimeout(REQUEST_TIMEOUT_S)
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                except OSError as err:  # the caller went away; the next one is served
                    print(f"[grading] connection lost: {err}", flush=True)


if __name__ == "__main__":
    plan = load_plan()
    if plan is None or os.geteuid() != 0:
        sys.exit("the grading service runs as root, for a cohort (course/hub/cohort.json)")
    try:
        serve(plan)
    except KeyboardInterrupt:  # the hub stops its services with SIGINT: a clean stop, no trace
        sys.exit(0)
