"""A `torch.profiler` wrapper with a wait / warm-up / active schedule.

**What it does.** `profile_steps(step, out_dir)` runs ``step`` for ``wait + warmup + active`` steps
under ``torch.profiler`` with a schedule, writes a Chrome-trace JSON that opens in Perfetto
(https://ui.perfetto.dev) or TensorBoard's profiler plugin, and returns the top operators.

**When to use it.** After the coarse measurements (throughput, data-wait share) say *where* time
goes, to see *which* operators or copies dominate inside a step.

**Expected gain.** None by itself; it names the bottleneck.

**Pitfalls.** The first steps include one-off costs — that is what ``wait`` and ``warmup`` skip.
Profiling adds overhead: never quote throughput measured under the profiler.
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
    top_ops: list[tuple[str, float]]  # (operator, self time in ms), descending


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
    ranked = sorted(averages, key=lambda e: getattr(e, attr, 0.0), reverse=True)
    top = [(e.key, getattr(e, attr, 0.0) / 1e3) for e in ranked[:row_limit]]
    return ProfileResult(trace=trace, table=table, top_ops=top)
