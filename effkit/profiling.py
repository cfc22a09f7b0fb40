"""A `torch.profiler` wrapper with a wait / warm-up / active schedule.

`profile_steps` writes a Chrome trace and returns the top operators; `profile_training` profiles a
`TrainStep` split into data / forward / backward / optimizer ranges and returns plain data (the input of
:func:`effkit.doctor.diagnose`), with the step time measured without the profiler: never quote throughput
measured under it.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from bisect import bisect_right
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from effkit.amp import cpu_isa, cpu_native_bf16, cuda_native_bf16


def quiet_kineto() -> None:
    """Kineto, the profiler's tracer, prints a start and a stop marker ("USDT: ... profiler_start")
    around every session and, without a GPU, an ERROR that only says there is none: 62 such lines
    in lesson 10's output. Level 6 silences them where CUDA is absent; where it is present its
    messages can matter (CUPTI permissions), so they stay. A KINETO_LOG_LEVEL already set wins.
    Read when the profiler first starts, so setting it after ``import torch`` is in time."""
    if not torch.cuda.is_available():
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")


quiet_kineto()


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
    try:
        events = json.loads(trace.read_text()).get("traceEvents", [])
    except (OSError, ValueError):
        return set()
    return {e.get("name", "") for e in events if e.get("cat") == "user_annotation"}


# -- a training step profiled range by range, summarised as plain data (the doctor's input) --------

RANGES = (
    "data",
    "forward",
    "backward",
    "optimizer",
    "other",
)  # record_function names, "step/<name>"
SYNC_OPS = (
    "aten::_local_scalar_dense",
)  # what .item() / bool(t) / .tolist() run: a device-to-host copy
SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
)  # explicit syncs, CUDA runtime events
MATMUL_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
    "aten::convolution",
    "aten::_convolution",
    "aten::mkldnn_convolution",
    "aten::cudnn_convolution",
    "aten::convolution_backward",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
)


@dataclass
class TrainStep:
    """One training step in parts, so each part runs in its own ``record_function`` range.

    ``next_batch()`` -> batch; ``loss(batch)`` -> scalar loss (forward); the doctor runs
    ``backward``, ``optimizer.step()`` + ``zero_grad`` (+ ``scheduler.step()``), then ``after(loss)``
    (the user's per-step extras: logging, metrics) in the range "other". ``padding(batch)`` -> share
    of padded positions (text), ``memory_limit_bytes``: the budget activations must fit in.
    """

    next_batch: Callable[[], object]
    loss: Callable[[object], torch.Tensor]
    optimizer: torch.optim.Optimizer
    model: torch.nn.Module
    batch_size: int
    scheduler: object = None
    after: Callable[[torch.Tensor], object] | None = None
    padding: Callable[[object], float] | None = None
    memory_limit_bytes: int | None = None
    name: str = "step"

    def run(self) -> None:
        from torch.profiler import record_function

        with record_function("step/data"):
            batch = self.next_batch()
        with record_function("step/forward"):
            loss = self.loss(batch)
        with record_function("step/backward"):
            loss.backward()
        with record_function("step/optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            if self.scheduler is not None:
                self.scheduler.step()
        with record_function("step/other"):
            if self.after is not None:
                self.after(loss)
        self._last = batch


def _compute_dtype(step: TrainStep, batch) -> str:
    """The dtype most Linear / Conv / attention outputs have in one forward (autocast shows here)."""
    seen: dict[str, int] = {}

    def hook(_module, _inputs, output):
        if isinstance(output, torch.Tensor) and output.is_floating_point():
            key = str(output.dtype).replace("torch.", "")
            seen[key] = seen.get(key, 0) + 1

    kinds = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.MultiheadAttention)
    handles = [m.register_forward_hook(hook) for m in step.model.modules() if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            step.loss(batch)
    finally:
        for h in handles:
            h.remove()
    return max(seen, key=seen.get) if seen else "unknown"


def _optimizer_info(opt: torch.optim.Optimizer) -> dict:
    group = opt.param_groups[0] if opt.param_groups else {}
    return {
        "name": type(opt).__name__,
        "foreach": group.get("foreach"),
        "fused": group.get("fused"),
        "param_tensors": sum(len(g["params"]) for g in opt.param_groups),
    }


# The doctor's overhead line: a step is overhead-bound when the matmul calls that do its work take
# under this many times matmul_us_floor (effkit.doctor). 7x sits between the overhead plant (2-3x)
# and the clean step (20x and more) in fp32 on AVX2 and AVX512 EPYCs. One class of kernels needs its
# own: bf16 on an AVX512-BF16 CPU without AMX, where the floor's width-8 call takes PyTorch's
# small-matrix path (2.4 us) but every real layer's call goes through oneDNN, which costs about 16 us
# even for a 16x16 Linear on 17 rows, some 14 us above the floor. There the overhead plant sits at
# 9.2-10.4x and every other step at 26-30x, quiet or beside two busy cores (AMD EPYC Zen 4, 2026-12-05,
# benchmarks/results/doctor-calibration.md): 16x, their geometric middle. In fp32 on a 2-core AMX
# Xeon 7x holds (overhead plant 1.9-2.7x on its 8-token rows, every other step 15-35x, 2026-12-05);
# bf16 on AMX has no line (its plant measured 15.6-22.8x there, beside a clean step's 27x: on an AMX
# host where bf16 pays, 7x would call that plant clean). Calibrated on lesson 10's plants only: the
# course's CIFAR and BERT recipes and learners' own models on these classes were not.
OVERHEAD_CALLS = 7.0
OVERHEAD_CALLS_BY_CLASS = {("bfloat16", "AVX512-BF16"): 16.0}


def overhead_line(compute_dtype: str | None, isa: str | None) -> float:
    """The overhead line (multiples of the floor) for a profile's precision and CPU class."""
    return OVERHEAD_CALLS_BY_CLASS.get((str(compute_dtype), str(isa)), OVERHEAD_CALLS)


def call_floor_us(device: str = "cpu", dtype: str = "float32", calls: int = 40) -> float:
    """This host's fixed cost of one matmul call, now: the median self time of the matmul calls of a Linear
    that does almost no work (width 8, batch 1, forward and backward) under the profiler, on ``device`` in
    ``dtype``. A call's µs mean nothing across machines (dispatch speed, kernel choice and clock all move
    them, and a busy core moves them again); as multiples of this floor, measured beside them, they do."""
    lin = torch.nn.Linear(8, 8, device=device)
    x = torch.randn(1, 8, device=device)
    low = dtype in ("bfloat16", "float16")
    cast = torch.autocast(device, dtype=getattr(torch, dtype)) if low else nullcontext()

    def run(n: int) -> None:
        for _ in range(n):
            with cast:
                y = lin(x)
            y.float().sum().backward()

    run(5)  # kernel selection, allocator, lazy init
    on_gpu = device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        run(calls)
        if on_gpu:
            torch.cuda.synchronize()
    times = [
        getattr(e, "self_device_time_total", 0.0) if on_gpu else e.self_cpu_time_total
        for e in prof.events()
        if e.name in MATMUL_OPS
    ]
    if not times:
        raise RuntimeError("no matmul call was recorded while measuring the call floor")
    return float(statistics.median(times))


def profile_training(
    step: TrainStep,
    *,
    wait: int = 1,
    warmup: int = 2,
    active: int = 5,
    timed: int = 9,
    settle: int = 4,
    bf16_hardware: bool | None = None,
) -> dict:
    """Profile ``active`` steps of ``step`` (after ``wait`` + ``warmup``) and return plain data.

    Also times ``timed`` steps *without* the profiler, after ``settle`` untimed ones: half of them
    just before the profiling session and the rest just after it, so that they share the profiled
    steps' steady state (allocator, caches, clock) and a burst of a neighbour's work. Their median is
    ``step_ms_unprofiled``, the number to quote; ``profiler_overhead`` = profiled / unprofiled step
    time (never quote throughput under the profiler). Below 1 the profiled steps ran faster than the
    unprofiled ones: the profiler's cost was below this machine's noise, and
    ``profiler_overhead_inverted`` says so (True) rather than leave x0.8 to be read as an overhead.
    Everything returned is JSON: per-range ms per step, dispatched operators per step, the top
    operators by self time, syncs per step, the compute dtype, the optimizer's settings, the padding
    share, memory.
    """
    # one-off costs (allocator, lazy init) out of the unprofiled timing; at least one step, whose
    # batch the dtype probe below reads
    for _ in range(max(1, settle)):
        step.run()
    times: list[float] = []
    # the step's device, not the machine's: a CPU step on a CUDA host launches no kernels, so its
    # matmuls' device time reads 0 ms and every step looks overhead-bound (lesson 10's planted CPU
    # cases on an H100: the reference named 4 of 8)
    first = next(iter([*step.model.parameters(), *step.model.buffers()]), None)
    cuda = first is not None and first.device.type == "cuda"

    # the median of all: one step slowed by a neighbour does not move it
    def time_steps(n: int) -> None:
        for _ in range(n):
            if cuda:  # a CUDA step returns before its kernels end: time them, not the queueing
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step.run()
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)

    time_steps(timed // 2)  # before the session; the rest (and with timed=1, the one) after it
    dtype = _compute_dtype(step, step._last)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    floor_args = (
        "cuda" if cuda else "cpu",
        dtype if dtype in ("bfloat16", "float16") else "float32",
    )
    floor_before = call_floor_us(*floor_args)
    if cuda:  # the peak of these steps, not of whatever ran before them
        torch.cuda.reset_peak_memory_stats()
    # repeat=1: one cycle; with repeat=0 the next cycle would start (and clear the events) at the last step()
    with profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        profile_memory=False,
    ) as prof:
        batches = []  # measured after the profiler stops: its own ops would count as the step's
        for i in range(wait + warmup + active):
            step.run()
            if i >= wait + warmup:
                batches.append(step._last)
            prof.step()
    time_steps(timed - timed // 2)
    unprofiled = statistics.median(times) if times else 0.0
    paddings = [float(step.padding(b)) for b in batches] if step.padding is not None else []
    data = summarize_events(prof.events(), active, on_gpu=ProfilerActivity.CUDA in activities)
    # the yardstick the doctor reads the step's calls against (overhead_line): measured
    # just before and just after the steps, on their device, in their precision, under the same load;
    # the lower of the two, since a neighbour's burst can only make a measurement slower
    data["matmul_us_floor"] = min(floor_before, call_floor_us(*floor_args))
    # the class the floor's line was calibrated for (overhead_line): a GPU step's is its own, uncalibrated
    data["cpu_isa"] = None if cuda else cpu_isa()
    data["overhead_calls"] = OVERHEAD_CALLS if cuda else overhead_line(dtype, data["cpu_isa"])
    if not data["step_ms"]:
        raise RuntimeError(
            "the profiler recorded no step: check the schedule (wait, warmup, active)"
        )
    if (
        bf16_hardware is None
    ):  # bf16 tensor cores from Ampere on (is_bf16_supported says yes on a T4)
        bf16_hardware = (
            cuda_native_bf16(torch.cuda.get_device_capability()) if cuda else cpu_native_bf16()
        )
    overhead = data["step_ms"] / unprofiled if unprofiled > 0 else None
    data.update(
        name=step.name,
        batch_size=step.batch_size,
        step_ms_unprofiled=unprofiled,
        profiler_overhead=overhead,
        # profiled faster than unprofiled: a cost can't be negative, so noise outweighed it here
        profiler_overhead_inverted=overhead is not None and overhead < 1.0,
        compute_dtype=dtype,
        bf16_hardware=bool(bf16_hardware),
        optimizer=_optimizer_info(step.optimizer),
        padding_share=sum(paddings) / len(paddings) if paddings else None,
        memory_peak_bytes=torch.cuda.max_memory_allocated() if cuda else None,
        memory_limit_bytes=step.memory_limit_bytes
        or (torch.cuda.get_device_properties(0).total_memory if cuda else None),
    )
    return data


def summarize_events(events, steps: int, on_gpu: bool = False) -> dict:
    """Plain per-step figures from the profiler's events (``prof.events()`` of the active window)."""
    per = 1.0 / max(1, steps)
    step_us = [e.time_range.elapsed_us() for e in events if e.name.startswith("ProfilerStep#")]
    ranges = {r: 0.0 for r in RANGES}
    dispatched, in_range = 0, {r: 0 for r in RANGES}
    self_us: dict[str, list[float]] = {}
    syncs, sync_us, matmul_us, matmul_calls, matmul_starts = 0, 0.0, 0.0, [], []
    # where each step begins: its data range comes first (ProfilerStep# events are not always among the events)
    step_starts = sorted(e.time_range.start for e in events if e.name == "step/" + RANGES[0])
    for e in events:
        name = e.name
        if name.startswith("step/") and name[5:] in ranges:
            ranges[name[5:]] += e.time_range.elapsed_us()
            continue
        if not name.startswith("aten::") and name not in SYNC_CALLS:
            continue
        nested, owner, parent = False, None, e.cpu_parent
        while parent is not None:  # the whole ancestry: under another operator? in which range?
            nested = nested or parent.name.startswith("aten::")
            if parent.name.startswith("step/"):
                owner = parent.name[5:]
            parent = parent.cpu_parent
        if (name in SYNC_OPS or (name in SYNC_CALLS and not nested)) and owner != "optimizer":
            syncs += 1  # (optimizers .item() their host-side step counts: no device sync)
            sync_us += e.time_range.elapsed_us()
        if name in SYNC_CALLS:
            continue
        row = self_us.setdefault(name, [0.0, 0])
        row[0] += e.self_cpu_time_total
        row[1] += 1
        if name in MATMUL_OPS:  # on a GPU the kernels' time, not their launches'
            us = getattr(e, "self_device_time_total", 0.0) if on_gpu else e.self_cpu_time_total
            matmul_us += us
            matmul_calls.append(us)
            matmul_starts.append(
                e.time_range.start
            )  # the CPU op's start, on GPU too: which step it is in
        if not nested:  # no operator above it: dispatched from Python or by autograd's engine
            dispatched += 1
            if owner in in_range:
                in_range[owner] += 1
    top = sorted(self_us.items(), key=lambda kv: kv[1][0], reverse=True)[:12]
    step_ms = (sum(step_us) / len(step_us) / 1e3) if step_us else sum(ranges.values()) * per / 1e3
    return {
        "steps": steps,
        "step_ms": step_ms,
        "ranges_ms": {r: v * per / 1e3 for r, v in ranges.items()},
        "ops_per_step": dispatched * per,
        "ops_per_step_by_range": {r: v * per for r, v in in_range.items()},
        "top_ops": [[k, v[0] * per / 1e3, v[1] * per] for k, v in top],
        "syncs_per_step": syncs * per,
        "sync_ms": sync_us
        * per
        / 1e3,  # wall time inside the syncs: on a GPU, the wait for the queue
        "matmul_ms": matmul_us * per / 1e3,
        "matmul_calls_per_step": len(matmul_calls) * per,
        # the median call, not the mean: a call the OS descheduled (a busy machine) does not move it
        "matmul_us_median": sorted(matmul_calls)[len(matmul_calls) // 2] if matmul_calls else None,
        "matmul_us_work": work_median(per_position(matmul_calls, matmul_starts, step_starts)),
    }


def per_position(
    calls_us: list[float], starts: list[float], step_starts: list[float]
) -> list[float]:
    """Each call's median over the profiled steps, position by position: the steps run the same operators in the
    same order, so a call the OS descheduled in one step (a 3 ms time slice on a busy core, 100x a small matmul) is
    outvoted by the same call in the other steps. Unchanged when the steps' call counts differ or there is one step."""
    if len(step_starts) < 2 or not calls_us:
        return calls_us
    by_step: list[list[float]] = [[] for _ in step_starts]
    for start, us in sorted(zip(starts, calls_us, strict=True)):
        k = bisect_right(step_starts, start) - 1
        if k < 0:
            return calls_us
        by_step[k].append(us)
    if any(len(s) != len(by_step[0]) for s in by_step):
        return calls_us
    return [statistics.median(column) for column in zip(*by_step, strict=True)]


def work_median(calls_us: list[float]) -> float | None:
    """The time-weighted median call: half the matmul/conv time is spent in calls at least this long.

    The calls that *do the work*: a step's few big convolutions sit beside many small ones (the head,
    bias gradients), and the median by count would make a compute-bound step read as overhead-bound.
    Weighting by time also weights preemption: pass the calls through :func:`per_position` first.
    """
    if not calls_us:
        return None
    ordered, half, seen = sorted(calls_us), sum(calls_us) / 2, 0.0
    for us in ordered:
        seen += us
        if seen >= half:
            return us
    return ordered[-1]
