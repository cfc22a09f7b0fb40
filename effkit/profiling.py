"""A `torch.profiler` wrapper with a wait / warm-up / active schedule.

**What it does.** `profile_steps(step, out_dir)` runs ``step`` for ``wait + warmup + active`` steps
under ``torch.profiler`` with a schedule, writes a Chrome-trace JSON that opens in Perfetto
(https://ui.perfetto.dev) or TensorBoard's profiler plugin, and returns the top operators.

**When to use it.** After the coarse measurements (throughput, data-wait share) say *where* time
goes, to see *which* operators or copies dominate inside a step.

**Expected gain.** None by itself; it names the bottleneck.

**Pitfalls.** The first steps include one-off costs — that is what ``wait`` and ``warmup`` skip.
Profiling adds overhead: never quote throughput measured under the profiler.
The ``ProfilerStep#N`` wrapper and ``record_function`` ranges are not operators: their *self* time is
the step's time outside every operator (Python, waiting for data), so ``top_ops`` leaves them out and
``outside_ops_ms`` reports that time on its own — ranking the wrapper first would name no bottleneck.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule


@dataclass
class ProfileResult:
    trace: Path  # Chrome-trace JSON: open in ui.perfetto.dev or TensorBoard
    table: str  # the top operators by self time
    top_ops: list[tuple[str, float]]  # (operator, self time in ms), descending; no wrappers
    outside_ops_ms: float = 0.0  # self time of the step wrappers: Python, data wait, not operators


def profile_steps(
    step: Callable[[], object],
    out_dir: str | Path,
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    row_limit: int = 12,
    record_shapes: bool = False,
) -> ProfileResult:
    """Profile ``active`` calls of ``step`` after ``wait`` skipped and ``warmup`` traced-but-dropped."""
    if min(wait, warmup) < 0 or active < 1:
        raise ValueError("need wait >= 0, warmup >= 0 and active >= 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    trace = out / "trace.json"
    with profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace)),
        record_shapes=record_shapes,
    ) as prof:
        for _ in range(wait + warmup + active):
            step()
            prof.step()
    use_cuda = ProfilerActivity.CUDA in activities
    sort_key = "self_cuda_time_total" if use_cuda else "self_cpu_time_total"
    averages = prof.key_averages()
    table = averages.table(sort_by=sort_key, row_limit=row_limit)
    attr = "self_device_time_total" if use_cuda else "self_cpu_time_total"
    ranges = _annotation_names(trace)
    wrappers = [e for e in averages if e.key.startswith("ProfilerStep") or e.key in ranges]
    ops = [e for e in averages if e not in wrappers]
    ranked = sorted(ops, key=lambda e: getattr(e, attr, 0.0), reverse=True)
    top = [(e.key, getattr(e, attr, 0.0) / 1e3) for e in ranked[:row_limit]]
    outside = sum(e.self_cpu_time_total for e in wrappers) / 1e3
    return ProfileResult(trace=trace, table=table, top_ops=top, outside_ops_ms=outside)


def _annotation_names(trace: Path) -> set[str]:
    """Names of ``record_function`` ranges (category ``user_annotation`` in the Chrome trace)."""
    import json

    try:
        events = json.loads(trace.read_text()).get("traceEvents", [])
    except (OSError, ValueError):
        return set()
    return {e.get("name", "") for e in events if e.get("cat") == "user_annotation"}
