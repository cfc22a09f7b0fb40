"""One grading's result as a typed, versioned object that crosses between machines as JSON.

``GradingReport`` wraps what ``grader.frontends.pipeline.Report`` and ``perf.decide`` produce today
(cell scores, the graded cells' outputs, the performance dict) plus where and when it ran. It is
validated on load, so a node that sends something else is refused, and ``schema_version`` keeps an
archived report readable after the code changes: bump it when a field changes meaning.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class CellScore(BaseModel):
    grade_id: str
    points: float | None
    max_points: float
    error: str | None = None


class PerformanceReport(BaseModel):
    """The dict ``grader.scoring.perf.decide`` builds, typed where its readers depend on it; the
    rest (runs, phases, work checks) rides along unchecked (``extra="allow"``) until they move."""

    model_config = ConfigDict(extra="allow")

    assignment: str
    timestamp: str
    device: str
    device_class: str
    spec: dict
    target: dict
    runs: list[dict]
    speedup: float | None
    accuracy_diffs_pp: list[float]
    gate: dict | None
    credit: float
    points: float
    max_points: float
    problems: list[str]
    flags: list[str]
    error: dict | None


class GradingReport(BaseModel):
    """What a farm node returns for one submission: graded (scores and outputs) or failed (why)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    # the ledger's key: a report for another submission or grader never lands in this one's place
    assignment: str
    student: str
    notebook: str
    submission_sha256: str
    grader_version: str
    status: Literal["graded", "failed"]
    reason: str | None = None  # why it failed, one line for the instructor and the learner
    total: float | None = None
    max_total: float | None = None
    cells: list[CellScore] = Field(default_factory=list)
    # grade_id -> the nbformat outputs the grader wrote into that graded cell (what nbgrader scores)
    outputs: dict[str, list[dict]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    performance: PerformanceReport | None = None
    out_of_kernel: dict | None = None
    # where and when: the driver checks slots never overlapped from these
    timed: bool = False
    host: str = ""
    node_id: str = ""
    pid: int | None = None
    slot: int | None = None
    cores: list[int] = Field(default_factory=list)
    gpus: str | None = None
    started_at: float | None = None  # unix seconds, the node's clock
    finished_at: float | None = None
    wall_s: float | None = None
    attempt: int = 1
