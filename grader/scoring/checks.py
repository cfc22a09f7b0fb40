"""Cell checks, run in the grader's process on plain data from a sandboxed probe worker.

An assignment declares ``cell_checks`` (grade_id -> check(ctx)); ``grade_cells`` runs them against a
:class:`grader.sandbox.probe.ProbeSession` holding the learner's solution cells and nothing else.
A check judges data against the parent's own reference: a verdict computed in the worker could be
forged. ``gate_problem`` is the same checks as the gate in front of the timed grading.
"""

from __future__ import annotations

import io
import os
import random
import tokenize
from dataclasses import dataclass, field

from grader.common.cellcode import to_python
from grader.sandbox.channel import ChannelError, tensor_from
from grader.sandbox.probe import ProbeSession


class CheckFailed(AssertionError):
    """A check's verdict: the learner-facing reason."""


@dataclass
class CellVerdict:
    grade_id: str
    passed: bool
    lines: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass
class Context:
    session: ProbeSession
    rng: random.Random
    lines: list[str] = field(default_factory=list)

    def ok(self, text: str) -> None:
        self.lines.append(f"  ok  {text}")


def expect(ok: bool, message: str) -> None:
    if not ok:  # a failure the learner cannot read is a grader bug: say so rather than nothing
        raise CheckFailed(
            message or "failed, and the grader gave no reason: a grader bug, report it"
        )


def received_tensor(meta, raw: bytes, what: str = "tensor"):
    """A tensor a probe worker sent, rebuilt from bytes of a validated dtype and size; anything
    malformed fails the check rather than the grader."""
    try:
        return tensor_from(meta if isinstance(meta, dict) else {}, raw)
    except ChannelError as err:
        raise CheckFailed(f"the worker sent a malformed {what} ({err})") from err


def stub_reason(failure: str) -> str:
    if "NotImplementedError" in failure:
        return (
            "your solution still raises NotImplementedError: replace the "
            "`raise NotImplementedError()` stub with your code"
        )
    return ""


# Fixes the draws of the out-of-kernel checks (their tasks and data) for a whole nbgrader run, so
# the instructor-cycle test grades every reference on the same tasks each time (lesson 4 part (b)
# misses about one task in twelve by < 0.1 pp: random draws would fail ~2% of CI runs). Never set
# it in a course: learners could then know the grader's draws. Timed gradings keep their own secrets.
TEST_SEED_ENV = "EFFKIT_GRADER_TEST_SEED"


def grade_cells(
    assignment, cells: list[tuple[str, str]], only: list[str] | None = None, seed: int | None = None
) -> tuple[dict[str, CellVerdict], dict]:
    """Run the assignment's cell checks on the learner's ``cells`` (grade_id, source)."""
    plain = [(gid, to_python(src)[0]) for gid, src in cells]
    session = ProbeSession(
        assignment.probes,
        assignment.trusted_cells(),
        plain,
        list(assignment.names),
        loopback=assignment.loopback,
        cpu_only=assignment.cpu_only,
    )
    fixed = seed is None and bool(
        os.environ.get(TEST_SEED_ENV)
    )  # the repository's tests only (TEST_SEED_ENV)
    if fixed:
        seed = int(os.environ[TEST_SEED_ENV])
    rng = random.Random(seed if seed is not None else random.SystemRandom().getrandbits(64))
    verdicts: dict[str, CellVerdict] = {}
    try:
        for gid, check in assignment.cell_checks.items():
            if only and gid not in only:
                continue
            ctx = Context(session, rng)
            try:
                check(ctx)
                verdicts[gid] = CellVerdict(gid, True, ctx.lines)
            except AssertionError as err:  # CheckFailed, and the shared judges' expect()
                verdicts[gid] = CellVerdict(gid, False, ctx.lines, str(err))
    finally:
        session.close()
    errors = [f"{e['cell']}: {e['message']}" for e in session.load_errors]
    unavailable = list(session.unavailable)
    if fixed:  # said in every graded cell's output, so a course that sets it by mistake sees it
        unavailable.append(
            f"secret draws: {TEST_SEED_ENV} fixes the checks' tasks and data (for the "
            "repository's tests only; a learner could know them)"
        )
    report = {
        "flags": list(session.evidence),
        "unavailable": unavailable,
        "worker_uid": session.worker_uid,
        "cell_errors": errors,
    }
    return verdicts, report


def without_comments(source: str) -> str:
    """A cell's tokens but its comments (strings and docstrings stay: code can be run from them): a comment
    naming effkit's answer ("# unlike DevicePipeline, ...") is no use of it. A cell that does not tokenize is
    read whole."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    return " ".join(t.string for t in tokens if t.type != tokenize.COMMENT)


def gate_problem(assignment, cells: list[tuple[str, str]], known: dict | None = None) -> str:
    """Why speed cannot count ('' when it can): the assignment's ``speed_gate`` cell checks,
    judged here in the parent on plain data from a fresh probe worker. ``known``: verdicts this
    process already computed for the same cells (``fill_graded_cells``' report), not re-run."""
    source = "\n".join(without_comments(src) for _, src in cells)
    used = [n for n in assignment.reference_names if n in source]
    if used:
        return (
            f"your solution uses effkit's {used[0]}, the reference answer: write your own "
            "to earn the performance points"
        )
    if not assignment.speed_gate:
        return ""
    known = {g: v for g, v in (known or {}).items() if g in assignment.speed_gate}
    todo = [g for g in assignment.speed_gate if g not in known]
    if todo:
        verdicts, _ = grade_cells(assignment, cells, only=todo)
        known.update({g: {"passed": v.passed, "reason": v.reason} for g, v in verdicts.items()})
    return "; ".join(f"{g}: {v['reason']}" for g, v in known.items() if not v["passed"])
