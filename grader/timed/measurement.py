"""What a timed grading is told (``GradingSpec``) and what it measured (``Measurement``): plain data.

Assignments declare their specs with these, so this module imports nothing of the protocol.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.timed.spec import GradingSpec  # noqa: F401  (re-exported: measurement.GradingSpec)

if TYPE_CHECKING:  # annotations only: assignments import this module, never the supervisor
    from grader.sandbox.supervisor import WorkerFailed


@dataclass
class Timing:
    role: str
    repeat: int
    seconds: float
    samples: int
    accuracy: float | None = None


@dataclass
class Measurement:
    """Raw outcome of the protocol; :mod:`grader.scoring.perf` turns it into points and feedback."""

    device: str
    spec: GradingSpec
    runs: list[Timing] = field(default_factory=list)
    chunks: list[tuple[str, int, int, float]] = field(default_factory=list)  # role, run, chunk, s
    warmup_s: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # any one of these means no points
    flags: list[str] = field(default_factory=list)  # reported, no effect on points
    error: WorkerFailed | None = None
    phases_s: dict = field(default_factory=dict)
    work_checks: list[dict] = field(
        default_factory=list
    )  # grader.timed.replay's figures, per chunk checked
    # What the parent found wrong with the timed chunks' work (replay, batch judge). Said beside an
    # accuracy-gate failure too: a step on part of each batch also loses accuracy, and only the
    # replay names the cause (CI, f71f2d5: a partial step failed the gate first and hid it).
    work_problems: list[str] = field(default_factory=list)
    # After a second look, its runs alone are scored (speed and accuracy): code that behaves one way
    # in the first look and another in the second gains nothing from the first.
    scored_from: int = 0
    # The second look was taken for speed, not accuracy: then accuracy too is scored on it alone
    # (two looks at the gate would give a change that loses accuracy two chances to pass).
    speed_look: bool = False
    # A time-to-target grading's (spec.target) evaluations by the parent of each committed chunk:
    # role, run, chunk, held-out accuracy, seconds the evaluation took
    evaluations: list[tuple[str, int, int, float, float]] = field(default_factory=list)

    def pairs(self) -> list[tuple[Timing, Timing]]:
        a = {t.repeat: t for t in self.runs if t.role == "baseline"}
        b = {t.repeat: t for t in self.runs if t.role == "learner"}
        return [(a[r], b[r]) for r in sorted(a) if r in b]

    def speed_ratios(self) -> list[float]:
        """time_A / time_B for each pair of chunks (same run, same epoch, back to back)."""
        a = {
            (r, k): s
            for role, r, k, s in self.chunks
            if role == "baseline" and r >= self.scored_from
        }
        b = {
            (r, k): s
            for role, r, k, s in self.chunks
            if role == "learner" and r >= self.scored_from
        }
        return [a[key] / b[key] for key in sorted(a) if key in b]

    def speedup(self) -> float:
        ratios = self.speed_ratios()
        return statistics.median(ratios) if ratios else float("nan")

    def accuracy_diffs_pp(self) -> list[float]:
        first = self.scored_from if self.speed_look else 0
        return [
            100 * (tb.accuracy - ta.accuracy)
            for ta, tb in self.pairs()
            if ta.accuracy is not None and tb.accuracy is not None and ta.repeat >= first
        ]

    def times_to_target(self, role: str) -> dict[int, float | None]:
        """run -> seconds until the parent's first evaluation at or above ``spec.target`` (the
        chunks' training time plus every evaluation so far), None where it never got there.

        Each evaluation is charged the median of the grading's evaluations: it is the parent's
        own, the same model and held-out set for both sides, so its cost is the same by
        construction, and a load spike during one (0.23 s vs 1.28 s here) is noise, not speed."""
        chunk_s = {(r, c): s for who, r, c, s in self.chunks if who == role}
        each = statistics.median([e[4] for e in self.evaluations]) if self.evaluations else 0.0
        spent: dict[int, float] = {}
        reached: dict[int, float | None] = {}
        for who, r, c, acc, _ in sorted(self.evaluations, key=lambda e: (e[1], e[2])):
            if who != role or r < self.scored_from or reached.get(r) is not None:
                continue
            spent[r] = spent.get(r, 0.0) + chunk_s[r, c] + each
            reached[r] = spent[r] if acc >= self.spec.target else None
        return reached
