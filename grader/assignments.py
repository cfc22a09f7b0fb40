"""The assignments the grader knows: what to extract, what to measure, with which settings.

**What it does.** An `Assignment` names its notebook, the object the learner's solution cells must
define, the ``grade_id`` of the performance test cell, the trusted setup code run before the
solution cells, the runtime module the measurement processes import, and its grading specs (one
per device kind). ``get`` and ``for_notebook`` look assignments up with clear errors.

**When to use it.** Adding an exercise that is graded on speed: define an `Assignment` in its own
module (see :mod:`grader.lesson2`) and register it in ``_MODULES``.

**Expected gain.** One protocol, many exercises.

**Pitfalls.** ``setup_source`` must equal the notebook's locked setup cell (a test checks it):
it is the only notebook code besides the solution cells that reaches the measured process.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field

from grader.protocol import GradingSpec

_MODULES = {"lesson2": "grader.lesson2", "lesson3": "grader.lesson3"}


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
    # grade_ids of the cell checks that must pass for speed to count; run by the parent through
    # grader.cells before any timed worker starts (never a verdict from inside a timed worker)
    speed_gate: tuple[str, ...] = ()
    # effkit's own answer: solution sources naming it earn no speed points (checked by the parent
    # on the source text; the worker's ``reuses_reference`` is a second, reported line)
    reference_names: tuple[str, ...] = ()

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


def _lesson1() -> Assignment:
    from grader import lesson1

    return Assignment(id="lesson1", notebook="lesson1", object_name="measure_throughput",
                      performance_cell=None, setup_cell="setup", setup_source=lesson1.SETUP_SOURCE,
                      runtime_module="", timeout_s=180, probes="grader.lesson1_probes",
                      names=("measure_throughput", "data_wait_share", "name_bottleneck"),
                      cell_checks=lesson1.CELL_CHECKS)  # fmt: skip


def _lesson4() -> Assignment:
    from grader import lesson4

    return Assignment(id="lesson4", notebook="lesson4", object_name="train_accumulated",
                      performance_cell=None, setup_cell="setup", setup_source=lesson4.SETUP_SOURCE,
                      runtime_module="", timeout_s=120, probes="grader.lesson4_probes",
                      names=lesson4.NAMES, cell_checks=lesson4.CELL_CHECKS)  # fmt: skip


def _lesson6() -> Assignment:
    from grader import lesson6

    return Assignment(id="lesson6", notebook="lesson6", object_name="train", performance_cell=None,
                      setup_cell="setup", setup_source=lesson6.SETUP_SOURCE, runtime_module="", timeout_s=180,
                      probes="grader.lesson6_probes", names=lesson6.NAMES, cell_checks=lesson6.CELL_CHECKS)  # fmt: skip


_OUT_OF_KERNEL = {"lesson1": _lesson1, "lesson4": _lesson4, "lesson6": _lesson6}


def get(assignment_id: str) -> Assignment:
    if assignment_id in _OUT_OF_KERNEL:
        return _OUT_OF_KERNEL[assignment_id]()
    if assignment_id not in _MODULES:
        raise ValueError(f"unknown assignment {assignment_id!r}; the grader knows {known()}")
    return importlib.import_module(_MODULES[assignment_id]).ASSIGNMENT


def known() -> list[str]:
    return sorted([*_MODULES, *_OUT_OF_KERNEL])


def for_notebook(stem: str) -> Assignment:
    """The assignment whose notebook is called ``stem`` (e.g. "lesson2")."""
    for aid in known():
        a = get(aid)
        if a.notebook == stem:
            return a
    raise ValueError(f"no assignment has a notebook called {stem!r}.ipynb; known: {known()} "
                     "(pass --assignment if you renamed the file)")  # fmt: skip
