"""The assignments the grader knows: one package per exercise, apart from the grader's core.

**What it does.** Each package ``grader/assignments/<id>/`` defines ``ASSIGNMENT``, an `Assignment`
naming its notebook, the solution objects, the trusted setup code, its correctness checks (run by
the parent on plain data from a sandboxed worker: ``probes`` is the worker side, ``cell_checks``
the parent side), its optional timed protocol (``runtime_module``, ``specs``, ``speed_gate``), its
speedup ``targets`` per device class and its gate calibrations (``calibration/``). ``get`` and
``for_notebook`` look assignments up with clear errors; ``known`` finds the packages.

**When to use it.** Adding an exercise: copy ``lesson4/`` (out-of-kernel checks only) or
``lesson2/`` (checks + a timed, accuracy-gated speedup). Nothing in the core changes: the
sandbox, supervisor, protocol, gate, nbgrader integration, reports and CLI stay as they are;
only the modules its workers import are added to ``grader.learner_view`` (the view a learner's
worker sees: a test names any that are missing).

**Expected gain.** One protocol, many exercises.

**Pitfalls.** ``setup_source`` must equal the notebook's locked setup cell (a test checks it):
it is the only notebook code besides the solution cells that reaches the measured process.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: importing grader.protocol (nbformat, jsonschema) costs every
    from grader.protocol import GradingSpec  # probe worker ~1.5 s at start-up, once per restart


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
    # Correctness out of the kernel (grader.cells): the worker-side probe module, the names the
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
    # grader.cells before any timed worker starts (never a verdict from inside a timed worker)
    speed_gate: tuple[str, ...] = ()
    # effkit's own answer: solution sources naming it earn no speed points (checked by the parent
    # on the source text; the worker's ``reuses_reference`` is a second, reported line)
    reference_names: tuple[str, ...] = ()
    # speedup targets per device class (grader.targets: "target" full points, "floor" none);
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


def get(assignment_id: str) -> Assignment:
    """The assignment ``assignment_id``: the ``ASSIGNMENT`` of package ``grader.assignments.<id>``."""
    if assignment_id not in known():
        raise ValueError(f"unknown assignment {assignment_id!r}; the grader knows {known()}")
    assignment = importlib.import_module(f"{__name__}.{assignment_id}").ASSIGNMENT
    if not isinstance(assignment, Assignment) or assignment.id != assignment_id:
        raise TypeError(f"grader/assignments/{assignment_id}/ must define ASSIGNMENT = Assignment(id={assignment_id!r}, ...)")
    return assignment


def known() -> list[str]:
    """Every package under ``grader/assignments/`` (found, not listed: a new lesson touches no core file)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg)


def for_notebook(stem: str) -> Assignment:
    """The assignment whose notebook is called ``stem`` (e.g. "lesson2")."""
    for aid in known():
        a = get(aid)
        if a.notebook == stem:
            return a
    raise ValueError(f"no assignment has a notebook called {stem!r}.ipynb; known: {known()} "
                     "(pass --assignment if you renamed the file)")  # fmt: skip
