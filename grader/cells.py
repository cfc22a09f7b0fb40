"""Graded cells out of the kernel: the assignment interface's correctness half, and its outputs.

**What it does.** An assignment declares ``cell_checks``: ``grade_id -> check(ctx) -> CellVerdict``,
each run *in the grader's process* against a :class:`grader.probe.ProbeSession` (the learner's
solution cells, and nothing else, loaded in a fresh sandboxed worker). ``grade_cells`` runs them
all; ``fill_graded_cells`` overwrites the outputs of **every** graded cell of a notebook with the
verdict the grader computed (stdout feedback, then an ``execute_result`` holding the points, or
an ``error`` output when the check failed - what nbgrader's ``determine_grade`` reads). Whatever
the learner's kernel printed, raised or forged is discarded. Used identically by the nbgrader
preprocessor (:mod:`grader.nbgrader_plugin`), ``python -m grader check`` and the in-notebook
``check_my_work`` call.

**When to use it.** Every assignment: ``Assignment.cell_checks``, ``Assignment.probes``.

**Expected gain.** No point depends on anything a learner process said about itself.

**Pitfalls.** A check must judge data against the parent's own reference; returning a verdict
the worker computed would reopen the hole this module closes.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from nbformat.v4 import new_output

from grader.notebook import nbgrader_meta, solution_sources, to_python
from grader.perf import GradingError, PerfResult, grade
from grader.probe import ProbeSession
from grader.quiet import quiet


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
        raise CheckFailed(message or "failed, and the grader gave no reason: a grader bug, report it")


def stub_reason(failure: str) -> str:
    if "NotImplementedError" in failure:
        return ("your solution still raises NotImplementedError: replace the "
                "`raise NotImplementedError()` stub with your code")  # fmt: skip
    return ""


# Fixes the draws of the out-of-kernel checks (their tasks and data) for a whole nbgrader run, so
# the instructor-cycle test grades every reference on the same tasks each time (lesson 4 part (b)
# misses about one task in twelve by < 0.1 pp: random draws would fail ~2% of CI runs). Never set
# it in a course: learners could then know the grader's draws. Timed gradings keep their own secrets.
TEST_SEED_ENV = "EFFKIT_GRADER_TEST_SEED"


def grade_cells(assignment, cells: list[tuple[str, str]], only: list[str] | None = None,
                seed: int | None = None) -> tuple[dict[str, CellVerdict], dict]:  # fmt: skip
    """Run the assignment's cell checks on the learner's ``cells`` (grade_id, source)."""
    plain = [(gid, to_python(src)[0]) for gid, src in cells]
    session = ProbeSession(
        assignment.probes, assignment.trusted_cells(), plain, list(assignment.names),
        loopback=assignment.loopback, cpu_only=assignment.cpu_only,
    )
    fixed = seed is None and bool(os.environ.get(TEST_SEED_ENV))  # the repository's tests only (TEST_SEED_ENV)
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
        unavailable.append(f"secret draws: {TEST_SEED_ENV} fixes the checks' tasks and data (for the "
                           "repository's tests only; a learner could know them)")  # fmt: skip
    report = {"flags": list(session.evidence), "unavailable": unavailable,
              "worker_uid": session.worker_uid, "cell_errors": errors}  # fmt: skip
    return verdicts, report


def gate_problem(assignment, cells: list[tuple[str, str]], known: dict | None = None) -> str:
    """Why speed cannot count ('' when it can): the assignment's ``speed_gate`` cell checks,
    judged here in the parent on plain data from a fresh probe worker. ``known``: verdicts this
    process already computed for the same cells (``fill_graded_cells``' report), not re-run."""
    source = "\n".join(src for _, src in cells)
    used = [n for n in assignment.reference_names if n in source]
    if used:
        return (f"your solution uses effkit's {used[0]}, the reference answer: write your own "
                "to earn the performance points")  # fmt: skip
    if not assignment.speed_gate:
        return ""
    known = {g: v for g, v in (known or {}).items() if g in assignment.speed_gate}
    todo = [g for g in assignment.speed_gate if g not in known]
    if todo:
        verdicts, _ = grade_cells(assignment, cells, only=todo)
        known.update({g: {"passed": v.passed, "reason": v.reason} for g, v in verdicts.items()})
    return "; ".join(f"{g}: {v['reason']}" for g, v in known.items() if not v["passed"])


def cell_outputs(v: CellVerdict, max_points: float, report: dict) -> list:
    text = "\n".join(v.lines)
    tail = [f"flag       {f}" for f in report.get("flags", [])]
    tail += [f"note       protection unavailable here: {u}" for u in report.get("unavailable", [])]
    if v.passed:
        body = (text + "\n" if text else "") + "\n".join(tail)
        outs = [new_output("stream", name="stdout", text=(body + "\n") if body else "passed\n")]
        return outs + [
            new_output(
                "execute_result", data={"text/plain": repr(float(max_points))}, execution_count=None
            )
        ]
    body = "\n".join([*v.lines, *tail])
    outs = [new_output("stream", name="stdout", text=body + "\n")] if body else []
    return outs + [
        new_output(
            "error", ename="CheckFailed", evalue=v.reason, traceback=[f"CheckFailed: {v.reason}"]
        )
    ]


def fill_graded_cells(nb, assignment, allowed_ids) -> dict | None:
    """Overwrite every graded cell's outputs with the grader's verdict (see module doc)."""
    if not assignment.cell_checks:
        return None
    cells = [(c.grade_id, c.source) for c in solution_sources(nb, allowed_ids)]
    verdicts, report = grade_cells(assignment, cells)
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        gid = meta.get("grade_id")
        if cell.get("cell_type") != "code":
            continue
        if not meta.get("grade"):
            cell.outputs = []  # the kernel's outputs are never kept next to the grader's verdicts
            continue
        if gid == assignment.performance_cell:
            continue  # filled by the timed protocol
        v = verdicts.get(gid) or CellVerdict(
            gid, False, reason="the grader has no check for this cell"
        )
        cell.outputs = cell_outputs(v, float(meta.get("points", 0)), report)
        cell.execution_count = None
    report["cells"] = {
        gid: {"passed": v.passed, "reason": v.reason, "lines": v.lines}
        for gid, v in verdicts.items()
    }
    return report


# The performance cell: filled here (not in the nbgrader plugin) so that `python -m grader check`
# runs where nbgrader is not installed (the GPU machine of `make gpu-check`).
def perf_outputs(result: PerfResult, execution_count: int | None) -> list:
    """Outputs nbgrader scores as ``result.points``: stdout feedback, then the points value."""
    return [
        new_output("stream", name="stdout", text=result.feedback + "\n"),
        new_output(
            "execute_result",
            data={"text/plain": repr(float(result.points))},
            execution_count=execution_count,
        ),  # fmt: skip
    ]


def error_output(message: str) -> list:
    return [
        new_output(
            "error", ename="GradingError", evalue=message, traceback=[f"GradingError: {message}"]
        )
    ]


def fill_performance_cell(nb, assignment, allowed_ids, spec_name: str | None = None,
                          device: str | None = None, cell_report: dict | None = None) -> PerfResult | None:  # fmt: skip
    """Grade ``nb``'s solution cells and write the result into its performance cell."""
    if assignment.performance_cell is None:
        return None  # graded by the notebook's own test cells only
    cell = next(
        (c for c in nb.cells if nbgrader_meta(c).get("grade_id") == assignment.performance_cell),
        None,
    )
    if cell is None:
        return None
    cells = [(c.grade_id, c.source) for c in solution_sources(nb, allowed_ids)]
    max_points = float(nbgrader_meta(cell).get("points", 0))
    try:
        with quiet():
            result = grade(assignment, cells, max_points, device=device, spec_name=spec_name,
                           gate_verdicts=(cell_report or {}).get("cells"))
    except GradingError as err:
        cell.outputs = error_output(str(err))
        return None
    cell.outputs = perf_outputs(result, cell.get("execution_count"))
    return result
