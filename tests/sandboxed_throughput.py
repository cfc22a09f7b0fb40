"""A lesson-1 `measure_throughput` whose body is an attack, run in the grader's sandboxed worker
(grader.sandbox.probe): the sandbox tests' one way to start such a worker and call its probe.
Shared by test_grader_sandbox.py and test_lesson11_exercise.py (its loopback attack)."""

from grader.assignments.lesson1 import checks as lesson1
from grader.sandbox.launch import Limits
from grader.sandbox.probe import CallResult, ProbeSession

SETUP = [("setup", "import os, sys, time\n")]


def session(body: str, limits: Limits | None = None, **options) -> ProbeSession:
    """A worker whose `measure_throughput(trainer, steps, warmup)` runs ``body`` (its lines, indented
    here); ``options`` go to ProbeSession (cpu_only, loopback, ...)."""
    src = "def measure_throughput(trainer, steps, warmup):\n" + "\n".join(
        "    " + line for line in body.splitlines()
    )
    return ProbeSession(
        "grader.assignments.lesson1.probes",
        SETUP,
        [("measure_throughput", src)],
        ["measure_throughput"],
        limits=limits,
        **options,
    )


def throughput(s: ProbeSession, timeout_s: float = 30, steps: int = 1) -> CallResult:
    """The throughput probe's call, as lesson 1's check makes it (tiny sizes, seed 0)."""
    return s.call(
        "throughput",
        timeout_s,
        lesson1.DeviceServer(0, 0),
        batch_size=4,
        steps=steps,
        warmup=0,
        seed=0,
    )
