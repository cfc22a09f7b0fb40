"""What a lesson declares once, beside its checks: ``grader/assignments/<id>/manifest.py``.

The registry (``grader.assignments``) reads every lesson's ``MANIFEST``; the sandbox, the demo and
the tests read the registry, so none of them names a lesson. A manifest holds no answer and
imports nothing heavy: the learner's worker reads it too, to know which grader modules it may see.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from effkit import syllabus

DEVICES = ("any", "cpu", "gpu")


@dataclass(frozen=True)
class Manifest:
    """``Manifest("lesson1", worker_modules=("probes", "task"), points={...}, ...)``."""

    id: str  # the package's name: grader/assignments/<id>/
    # modules of the package a learner's worker imports (its probes, timed runtime, the task modules
    # those import), named relative to the package; never the checks or a reference
    worker_modules: tuple[str, ...]
    # graded cell -> points, as the instructor's notebook must give them (tests/test_manifest.py)
    points: dict[str, float]
    # wall seconds of `python -m grader check` on the reference solution and on the untouched stub,
    # measured (the lesson's manifest says where): the demo's estimate of the time left
    reference_grading_s: float
    stub_grading_s: float
    # effkit functions that *are* this exercise's answer (the lesson says so): in this lesson's
    # workers their bodies raise (grader.sandbox.learner_view), so one line calling effkit earns nothing
    withheld: tuple[str, ...] = ()
    # effkit functions a withheld answer calls that are no answer themselves: a tool the lesson hands
    # its learners (a byte counter) or one the lesson's worker runs the learner's result with. Kept
    # whole, and the search for the answer's helpers and twins does not go through them
    tools: tuple[str, ...] = ()
    # graded on counts (bytes, epochs, memory), not on a clock: tests may run it beside timed work
    clocked: bool = True
    # the device class its grading needs: "any" (the slot's device; a timed lesson uses that
    # class's targets), "cpu" (its workers see no GPU, so a GPU slot would sit idle: graded on
    # CPU cores even on a GPU node), "gpu" (only a GPU grades it: a CPU-only slot refuses it)
    device: str = "any"
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py):
    # an exercise graded on cell checks names at least one, or has a quiz key, whose answers that
    # test checks itself (never named here: learners read manifests; the key file is the parent's)
    released_without: tuple[str, ...] = ()
    # this lesson's test files that time something: tests/lanes.py runs them in the timed lane
    timed_tests: tuple[str, ...] = ()
    # the lesson's "In your own words" key points -> the phrases that count as saying each
    # (effkit.lesson.check_answer): here, not in the notebook, so they show only after writing
    key_points: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self):
        if not self.worker_modules or not all(
            isinstance(m, str) and m.isidentifier() for m in self.worker_modules
        ):
            raise ValueError(
                f"{self.id}: worker_modules must name the package's worker-side modules, e.g. ('probes',)"
            )
        named = (*self.withheld, *self.tools)
        bad = [w for w in named if not w.startswith("effkit.") or w.count(".") < 2]
        if bad:
            raise ValueError(
                f"{self.id}: withheld and tools name effkit functions as 'effkit.module.function', not {bad}"
            )
        if self.device not in DEVICES:
            raise ValueError(f"{self.id}: device is one of {DEVICES}, not {self.device!r}")
        if min(self.reference_grading_s, self.stub_grading_s) <= 0:
            raise ValueError(f"{self.id}: grading times are measured wall seconds, above 0")
        if any(not f.startswith("test_") or not f.endswith(".py") for f in self.timed_tests):
            raise ValueError(
                f"{self.id}: timed_tests names test files, e.g. 'test_lesson1_exercise.py'"
            )
        if not self.points or any(p <= 0 for p in self.points.values()):
            raise ValueError(f"{self.id}: points must give every graded cell a positive score")

    @property
    def package(self) -> str:
        return f"grader.assignments.{self.id}"

    @property
    def modules(self) -> tuple[str, ...]:
        """The package, this manifest (the registry imports it in every process) and the worker-side
        modules, fully named: what ``WORKER_MODULES`` lists for this lesson."""
        workers = (f"{self.package}.{m}" for m in ("manifest", *self.worker_modules))
        return (self.package, *dict.fromkeys(workers))

    @property
    def max_points(self) -> float:
        return float(sum(self.points.values()))

    @property
    def syllabus(self):
        """This lesson's row of ``effkit.syllabus`` (number, title, notebook): referenced, not copied."""
        return syllabus.by_assignment(self.id)
