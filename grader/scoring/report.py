"""One grading's result as a typed, versioned object that crosses between machines as JSON.

``PerformanceReport`` is what ``perf.decide`` (its only writer) decides for a timed cell;
``GradingReport`` wraps a whole grading (cell scores, the graded cells' outputs, the performance
report) plus where and when it ran. Both validate on load and refuse unknown fields, so a node or
a file that says something else is refused instead of misread. ``schema_version`` keeps archived
evidence readable after the code changes: ``load_performance`` and ``load_grading`` upgrade the
older shapes kept in the repository and in course archives; bump the version when a field
changes meaning and teach those two the old shape.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 2


class _Strict(BaseModel):
    # NaN stays NaN on the wire (a speedup of no pairs, a diverged run), as json.dumps wrote it;
    # pydantic's default would turn it into null, which a list[float] then refuses on load
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class Spec(BaseModel):
    """The timed protocol's settings (``GradingSpec``); its tuning knobs grow with the protocol,
    so only what reports are read for is typed and the rest rides along."""

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")
    name: str
    profile: str
    n_train: int
    epochs: int
    repeats: int
    chunks_per_epoch: int = 2


class Run(_Strict):
    role: Literal["baseline", "learner"]
    repeat: int
    seconds: float
    samples: int
    accuracy: float | None = None
    samples_per_s: float


class TargetRow(_Strict):
    """The speedup targets used (``grader.scoring.targets.Target``)."""

    assignment: str
    device: str
    device_class: str
    target: float
    floor: float
    source: str
    table: str = ""


class GateVerdict(_Strict):
    passed: bool
    mean_diff_pp: float
    threshold_pp: float
    se_pp: float
    suspiciously_high: bool
    message: str
    look_means_pp: list[float] = Field(default_factory=list)


class GradingFault(_Strict):
    kind: str
    message: str
    detail: str | None = None


class WorkCheck(_Strict):
    """One timed chunk's update set beside the baseline's chunk or the grader's replay of it
    (``grader.timed.replay``): cosine and size ratio of the two updates."""

    run: int
    chunk: int
    against: Literal["baseline", "replay", "replay of your batches"]
    cosine: float  # NaN where an update is zero
    ratio: float  # inf where the reference update is zero
    untouched: int | None = None  # against the baseline: tensors it trained that this left as is
    tensor: tuple[str, float, float] | None = None  # a replay's most-apart tensor: name, cos, ratio
    losses: str | None = None  # a replay that kept losses: "match", or where they part


class CellCheck(_Strict):
    """One graded cell's out-of-kernel verdict (``grader.scoring.checks.CellVerdict``)."""

    passed: bool
    reason: str = ""
    lines: list[str] = Field(default_factory=list)


class OutOfKernel(_Strict):
    """The out-of-kernel checks of one notebook (``grader.frontends.outputs.CellsReport``): each
    graded cell's verdict, and what the probe worker showed about itself."""

    cells: dict[str, CellCheck] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    unavailable: list[str] = Field(default_factory=list)  # checks that could not run
    worker_uid: int | None = None
    cell_errors: list[str] = Field(default_factory=list)


class DeviceInfo(_Strict):
    """The device class a grading ran on: a GPU's name, or a CPU's model and the ISA that decides
    its training speed ("AMX", "AVX512-BF16", "AVX512", "AVX2": ``effkit.amp.cpu_isa``)."""

    kind: Literal["cpu", "gpu"]
    model: str
    isa: str = ""

    @property
    def label(self) -> str:
        return f"{self.model} [{self.isa}]" if self.isa else self.model


class PerformanceReport(_Strict):
    """A timed cell's decision: the runs, the speedup, the accuracy gate, the points and why."""

    schema_version: Literal[2] = SCHEMA_VERSION
    assignment: str
    timestamp: str
    device: str  # effkit.measure.device_name: "CPU <model> [<ISA>] (N threads)" or the GPU
    device_class: str
    spec: Spec
    target: TargetRow
    runs: list[Run]
    warmup_s: dict[str, float] = Field(default_factory=dict)
    speed_ratios: list[float] = Field(default_factory=list)
    speedup: float | None
    accuracy_diffs_pp: list[float]
    gate: GateVerdict | None
    gate_calibration: str = ""
    credit: float
    points: float
    max_points: float
    problems: list[str]
    flags: list[str]
    error: GradingFault | None
    phases_s: dict[str, float] = Field(default_factory=dict)
    work_checks: list[WorkCheck] = Field(default_factory=list)
    work_problems: list[str] = Field(default_factory=list)
    # lesson 14's time-to-target evidence (grader/assignments/lesson14/capstone.py): the paired
    # speed-up, every parent evaluation (role, run, chunk, accuracy, seconds charged), each
    # leave-one-out ablation against the learner's predicted share, and the feedback lines
    speed: dict | None = None
    recipe: dict | None = None  # the changes read from the cell (data, never run here)
    times_to_target_s: dict | None = None
    evaluations: list[tuple] = Field(default_factory=list)
    attribution: list[dict] = Field(default_factory=list)
    pipeline_alone: dict | None = None  # lesson 14: the learner's pipeline timed alone
    lines: list[str] = Field(default_factory=list)
    # whose grading: set where it is archived (the leaderboard's signed copy, grader.json)
    student: str | None = None
    notebook: str | None = None

    @property
    def isa(self) -> str:
        """The CPU ISA in ``device`` ("" for a GPU or a report from before devices named it)."""
        found = re.search(r"\[([^\]]+)\]", self.device)
        return found.group(1) if found and self.device.startswith("CPU") else ""


class CellScore(_Strict):
    grade_id: str
    points: float | None
    max_points: float
    error: str | None = None


class GradingReport(_Strict):
    """One submission's grading: graded (scores and outputs), failed (why) or refused (this slot
    cannot grade it: another device class, say). The farm, ``grader check --json`` and
    ``grader grade`` write it; the ledger, nbgrader's recording run and the pytest face read it."""

    schema_version: Literal[2] = SCHEMA_VERSION
    # the ledger's key: a report for another submission or grader never lands in this one's place
    assignment: str
    student: str
    notebook: str
    submission_sha256: str
    grader_version: str
    status: Literal["graded", "failed", "refused"]
    reason: str | None = None  # why it failed, one line for the instructor and the learner
    total: float | None = None
    max_total: float | None = None
    cells: list[CellScore] = Field(default_factory=list)
    # grade_id -> the nbformat outputs the grader wrote into that graded cell (what nbgrader scores)
    outputs: dict[str, list[dict]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    performance: PerformanceReport | None = None
    out_of_kernel: OutOfKernel | None = None
    device: DeviceInfo | None = None
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


def load_performance(data: dict) -> PerformanceReport:
    """A performance report of any archived shape: version 1 had no ``schema_version`` (archived
    signed evidence, ``grader.json``, ``benchmarks/results/*/grading``); it is otherwise the same."""
    if not isinstance(data, dict):
        raise ValueError(f"a performance report is a JSON object, not {type(data).__name__}")
    if "schema_version" not in data:
        data = {**data, "schema_version": SCHEMA_VERSION}
    return PerformanceReport.model_validate(data)


def load_grading(data: dict) -> GradingReport:
    """A grading report of any archived shape. Version 1 (the farm's first ledgers) lacked
    ``device`` and a versioned performance report; ``grader check --json`` before version 2
    wrote the notebook's path and no submission key (``benchmarks/results/*/grading``)."""
    if not isinstance(data, dict):
        raise ValueError(f"a grading report is a JSON object, not {type(data).__name__}")
    data = dict(data)
    version = data.get("schema_version")
    if version is None and "submission_sha256" not in data:  # check --json, before version 2
        data = {
            "assignment": data.get("assignment"),
            "student": "",
            "notebook": PurePath(str(data.get("notebook", ""))).stem,
            "submission_sha256": "",
            "grader_version": "",
            "status": "graded",
            "total": data.get("total"),
            "max_total": data.get("max_total"),
            "cells": data.get("cells", []),
            "notes": data.get("notes", []),
            "performance": data.get("performance"),
            "out_of_kernel": data.get("out_of_kernel"),
        }
        version = 1
    if version == 1:
        data["schema_version"] = SCHEMA_VERSION
    if isinstance(data.get("performance"), dict):
        data["performance"] = load_performance(data["performance"])
    return GradingReport.model_validate(data)
