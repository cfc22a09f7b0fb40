"""What a lesson declares: its notebook, its checks, its timed protocol and its speed targets.

Each package ``grader/assignments/<id>/`` defines ``ASSIGNMENT = Assignment(...)``. Workers import
this module too (through the registry), so it imports nothing heavy: a timed lesson's ``GradingSpec``
is plain data in ``grader.timed.spec``, not the timed protocol.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field

from grader.timed.spec import GradingSpec


@dataclass(frozen=True)
class Assignment:
    """``Assignment("lesson4", "train_accumulated", SETUP_SOURCE, CELL_CHECKS)``: the rest defaults
    to what a lesson without a timed grading uses (its notebook and probes named after its id)."""

    id: str
    object_name: str  # what the solution cells must define
    setup_source: str  # the locked setup cell's code, run before the solution cells in every worker
    # grade_id -> check run by the parent on the probe worker's plain data (grader.scoring.checks)
    cell_checks: dict = field(default_factory=dict)
    names: tuple[
        str, ...
    ] = ()  # what the solution cells define that the checks call (default: object_name)
    notebook: str = ""  # notebook name without .ipynb (default: the id)
    probes: str = ""  # the worker-side probe module (default: grader.assignments.<id>.probes)
    setup_cell: str = "setup"  # grade_id of the locked setup cell
    performance_cell: str | None = (
        None  # grade_id of the cell the timed grading fills; None: no timing
    )
    runtime_module: str = ""  # imported by timed workers and parent: build_trainer, GraderData, ...
    specs: dict[str, GradingSpec] = field(default_factory=dict)
    timeout_s: int = 120  # nbgrader's per-cell limit for this notebook (nbgrader_config.py)
    # the worker's private network namespace gets its loopback up (lesson 11: gloo ranks in one sandbox)
    loopback: bool = False
    # the workers see no GPU: the task is specified on the CPU (lesson 11: gloo ranks whose budget is
    # host memory, which GPU memory would escape; FSDP2's default mesh would shard onto cuda:0)
    cpu_only: bool = False
    # grade_ids of the cell checks that must pass for speed to count; run by the parent through
    # grader.scoring.checks before any timed worker starts (never a verdict from inside a timed worker)
    speed_gate: tuple[str, ...] = ()
    # effkit's own answer: solution sources naming it earn no speed points (checked by the parent
    # on the source text; the worker's ``reuses_reference`` is a second, reported line)
    reference_names: tuple[str, ...] = ()
    # speedup targets per device class (grader.scoring.targets: "target" full points, "floor" none);
    # instructors override them in course/grader_targets.json
    targets: dict[str, dict[str, float]] = field(default_factory=dict)
    # a parent-side module whose ``grade(assignment, cells, max_points, device=, spec_name=,
    # progress=, gate_verdicts=)`` scores the performance cell in place of the one-speed-up grading
    # (grader.scoring.perf.grade): lesson 14 grades time to target and each gain's attribution
    performance_grader: str = ""

    def __post_init__(self):
        probes = f"grader.assignments.{self.id}.probes"
        defaults = {"names": (self.object_name,), "notebook": self.id, "probes": probes}
        for name, value in defaults.items():
            if not getattr(self, name):
                object.__setattr__(self, name, value)

    @property
    def kernel_free(self) -> bool:
        """True when every graded cell is computed out of the kernel: the kernel never runs."""
        return bool(self.cell_checks)

    def runtime(self):
        return importlib.import_module(self.runtime_module)

    def trusted_cells(self) -> list[tuple[str, str]]:
        return [(self.setup_cell, self.setup_source)]

    def spec(self, device: str, name: str | None = None) -> GradingSpec:
        """``name``, else ``$EFFKIT_GRADER_SPEC``, else "gpu" on CUDA and "smoke" elsewhere."""
        name = (
            name
            or os.environ.get("EFFKIT_GRADER_SPEC")
            or ("gpu" if device.startswith("cuda") else "smoke")
        )
        if name not in self.specs:
            raise ValueError(
                f"unknown grading spec {name!r} for {self.id}; choose one of {sorted(self.specs)}"
            )
        return self.specs[name]
