"""The parent side of a lesson that scores its own performance cell (``Assignment.performance_grader``):
the timed protocol, the accuracy gate and the report type, as ``grader.scoring.perf`` uses them."""

from grader.scoring.checks import gate_problem
from grader.scoring.perf import GradingError, PerfResult, load_gate
from grader.scoring.report import PerformanceReport
from grader.timed.protocol import WorkerFailed, measure

__all__ = [
    "GradingError",
    "PerfResult",
    "PerformanceReport",
    "WorkerFailed",
    "gate_problem",
    "load_gate",
    "measure",
]
