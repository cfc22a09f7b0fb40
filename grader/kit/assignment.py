"""What a lesson declares: its notebook, its checks, its timed protocol and its speed targets.

Each package ``grader/assignments/<id>/`` defines ``ASSIGNMENT = Assignment(...)``. Workers import
this module too (through the registry), so it imports nothing heavy: the timed protocol's
``GradingSpec`` is only named in annotations.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: workers import this module and never need the protocol
    from grader.timed.protocol import GradingSpec


@dataclass(frozen=True)
class Assignment:
    id: str
    notebook: str  # notebook name without .ipynb
    object_name: str  # what the solution cells must define
    performance_cell: str | None  # grade_id of the cell the grader fills in; None: no timed grading
    setup_cell: str  # grade_id of the locked setup cell
    setup_source: str  # its code, run before the solution cells in the measured process
    runtime_module: str  # imported by workers and parent: build_trainer, GraderData, ...
    specs: dict[str, GradingSpec] = field(default_factory=dict)
    timeout_s: int = 120  # nbgrader's per-cell limit for this notebook (nbgrader_config.py)
    # Correctness out of the kernel (grader.scoring.checks): the worker-side probe module, the names the
    # solution cells define, and grade_id -> check run by the parent on the worker's plain data.
    probes: str = ""
    names: tuple[str, ...] = ()
    cell_checks: dict = field(default_factory=dict)
    # the worker's private network namespace gets its loopback up (lesson 11: gloo ranks in one sandbox)
    loopback: bool = False
    # the workers see no GPU (launch(no_gpu=True)): the task is specified on the CPU (lesson 11: gloo
    # ranks whose budget is host memory, which GPU memory would escape), and on a GPU host FSDP2's
    # default mesh would put the shards on cuda:0 while the grader's batches stay on the CPU (an H200
    # graded the reference 0/3)
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
