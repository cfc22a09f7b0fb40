# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 10 — Profiling: find the next bottleneck
#
# **Goal:** stop guessing where a training step's time goes. We will:
#
# 1. profile a few steps with `torch.profiler` the way it is meant to be used: a *schedule*
#    (skip, warm up, record), `record_function` ranges for data / forward / backward / optimizer,
#    the `key_averages` table sorted by *self* time, and a Chrome trace (drawn here as a timeline);
# 2. measure what the profiler itself costs, interleaved A/B, and never quote a throughput under it;
# 3. run the **bottleneck doctor** (`effkit.doctor`) on a step with two planted bottlenecks, fix the
#    first one, and watch the *next* one come up; then on the course's CIFAR recipes;
# 4. see the GPU-only views (kernel gaps, the CUDA memory snapshot) as code written for a GPU (no
#    recording of this lesson has run it on one yet).
#
# **Run time**: about 1 min in `cpu` (66 s recorded, 52-72 s in other quiet runs; the optimizer plant on 256-token rows and the fixes' A/Bs made it longer than earlier runs) on a quiet 2-core Intel Xeon with AMX (2026-12-06, the outputs in
# `docs/recorded/`, a warm compile cache: compiling the overhead-bound step took 1.2-1.9 s there in recordings, a
# cold compile longer; bf16 did not pay there, 0.83-1.00x, so the plants ran in fp32); earlier versions of this lesson: 26 s on a quiet 2-core AMD EPYC, Zen 3, AVX2 only, and 21-28 s
# on a quiet Zen 4 EPYC with AVX512-BF16, both with a warm Inductor cache (on the Zen 4 bf16 measured just
# over its 1.15x bar in some recordings, 1.18x, and under it in another: section 1 prints which this run
# found); no GPU. An earlier AMX Xeon took 54 s cold; 16-40 s in `smoke` (warm or cold compile cache).
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one: the same
# steps, still built and run on the CPU, so the profiler records no GPU work for them; section 4's
# code is what shows the GPU-only views), `smoke` (tests only: fewer steps and pairs; its
# numbers show the code runs, not what is true). Every step runs on **one CPU thread**. The quiz and
# the graded exercise (write the doctor's judgement yourself) are in `exercises/lesson10/`.

# %%
# %matplotlib inline
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyBboxPatch
from torch._dynamo.utils import counters
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from effkit import doctor, doctor_plants, lesson
from effkit.doctor_plants import bf16_pays_here, planted_step, profile_named
from effkit.measure import device_name
from effkit.profiling import profile_training

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
RECIPES = ("cifar:naive", "cifar:optimized")
SIZES = {"smoke": dict(active=3, pairs=6, steps_per_burst=2, recipe_steps=dict(wait=0, warmup=1, active=1, timed=1)),
         # 12 steps a burst: about 50 ms of the clean step here, the least `effkit.abtest` asks of a burst
         "cpu": dict(active=5, pairs=8, steps_per_burst=12, recipe_steps=dict(active=5)),
         "gpu": dict(active=5, pairs=8, steps_per_burst=12, recipe_steps=dict(active=5))}[PROFILE]
torch.set_num_threads(1)  # one thread: the machine is shared, and figures per thread compare
CPU_NAME = device_name("cpu")
work_dir = tempfile.TemporaryDirectory(prefix="lesson10-")  # removed when the kernel stops
work = Path(work_dir.name)
print(f"profile {PROFILE!r}; {CPU_NAME}; CUDA: {torch.cuda.is_available()}")

# %% [markdown]
# ## 1. What a profiler schedule records
#
# A step is data → forward → backward → optimizer (→ whatever else you do: logging, metrics). The
# profiler's `schedule(wait, warmup, active)` skips the first steps (one-off costs: allocations,
# lazy initialisation), records `warmup` steps and throws them away (the profiler's own start-up),
# and keeps `active` steps. `record_function("step/data")` names a range in the trace.

# %%
fig, ax = plt.subplots(figsize=(10, 2.4))
parts = [("wait", 1, "#dddddd"), ("warmup", 2, "#f6d7a7"), ("active", 3, "#9ecae1")]
x = 0.0
for name, n, color in parts:
    for _ in range(n):
        ax.add_patch(FancyBboxPatch((x + 0.05, 1.1), 0.9, 0.6, boxstyle="round,pad=0.02", fc=color, ec="gray"))
        ax.text(x + 0.5, 1.4, f"{name}\nstep", ha="center", va="center", fontsize=8)
        x += 1
ax.text(3.0, 1.95, "only the active steps reach the table and the trace", ha="center", fontsize=9)
x = 0.0
for name, w, color in [("data", 0.6, "#fdae6b"), ("forward", 1.2, "#6baed6"), ("backward", 2.0, "#3182bd"),
                       ("optimizer", 0.7, "#74c476"), ("other", 0.3, "#bcbddc")]:
    ax.add_patch(FancyBboxPatch((x + 0.02, 0.2), w - 0.04, 0.5, boxstyle="round,pad=0.02", fc=color, ec="gray"))
    ax.text(x + w / 2, 0.45, f'record_function\n"step/{name}"', ha="center", va="center", fontsize=7)
    x += w
ax.text(x + 0.1, 0.45, "<- one active step, split into ranges", va="center", fontsize=9)
ax.set(xlim=(0, 7.5), ylim=(0, 2.2), title="torch.profiler: schedule(wait=1, warmup=2, active=3) and ranges")
ax.axis("off")
plt.show()

# %% [markdown]
# Our patient: a small text classifier (embedding, 4 residual MLP blocks, masked mean pooling,
# Adam) whose step has **two bottlenecks planted** (`effkit.doctor_plants`): it tokenises raw text
# in Python inside the step, and it checks every block's activations for NaNs with
# `bool(torch.isfinite(h).all())` and logs `loss.item()`. First by hand, with `torch.profiler`.
#
# **Predict.** What share of the step goes to *data* (tokenising 32 documents of ~1,000 words in
# Python), against the model's forward + backward + Adam on 32 x 32 tokens?

# %%
GUESS_DATA_SHARE = None  # your guess, a fraction, e.g. 0.2

# %%
step = planted_step(("data", "sync"), seed=0)
trace_path = work / "trace.json"
with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else []),
             schedule=schedule(wait=1, warmup=2, active=SIZES["active"]),
             on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path))) as prof:
    for _ in range(1 + 2 + SIZES["active"]):
        step.run()  # data, forward, backward, optimizer, other: each in its record_function range
        prof.step()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
print(f"Chrome trace: {trace_path} ({trace_path.stat().st_size / 2**20:.1f} MiB) — open it in "
      "https://ui.perfetto.dev or chrome://tracing")

# %% [markdown]
# Read the table by **Self CPU** (an operator's own time, without what it called): a wrapper such as
# `aten::linear` has a large *total* but almost no self time (so it may not make this table's top 12 at
# all), the matmul inside it (`aten::addmm` with a bias,
# `aten::mm` in the backward pass and where the bias is added apart) does the work. The
# `step/...` rows are our ranges: their self time is time outside every recorded operator — Python,
# plus, in `step/backward`, the autograd engine's and the profiler's own bookkeeping — so the
# tokenising shows up as `step/data`'s self time. Perfetto is not available offline, so here is
# the trace drawn from its JSON events (the same `user_annotation` ranges Perfetto shows):

# %%
events = json.loads(trace_path.read_text())["traceEvents"]
ranges = [e for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("step/")]
t0 = min(e["ts"] for e in ranges)
colors = {"data": "#fdae6b", "forward": "#6baed6", "backward": "#3182bd", "optimizer": "#74c476", "other": "#bcbddc"}
ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("dur", 0) > 0]
fig, ax = plt.subplots(figsize=(11, 2.6))
for name, color in colors.items():  # one broken_barh per row: thousands of bars in one call
    spans = [((e["ts"] - t0) / 1e3, e["dur"] / 1e3) for e in ranges if e["name"] == f"step/{name}"]
    ax.broken_barh(spans, (0.7, 0.6), facecolors=color)
ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3) for e in ops], (-0.25, 0.5), facecolors="#636363")
ax.set(yticks=[0, 1], yticklabels=["operators", "ranges"], xlabel="ms since the first recorded step",
       title=f"Chrome trace of {SIZES['active']} active steps (CPU thread): ranges above, operators below; "
             "a gap below is time in no recorded operator")
ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()], labels=list(colors),
          ncol=5, loc="upper right", fontsize=8)
plt.show()

# %% [markdown]
# The same numbers as plain data: `effkit.profiling.profile_training` runs the schedule above and
# returns per-range milliseconds per step, the operators dispatched per step, the syncs
# (`aten::_local_scalar_dense`: what `.item()` and `bool(tensor)` run), the matmul time, the
# median matmul call and the call that half the matmul time is spent in (`matmul_us_work`: the calls
# that do the work), the optimizer's settings, the padding share. It also times steps *without*
# the profiler, half just before the profiled ones and half just after them, so that both sit in the
# same steady state; their median is the step time to quote.

# %%
# The plants run in bf16 only where it measurably pays for their clean step here (1.15x, measured
# once per kernel) and the doctor's overhead line is calibrated for bf16 on this kind of CPU (see
# below); then "fp32 on bf16 hardware" is a finding. Elsewhere they run in fp32 and it is not: bf16
# units that do not make this step faster are no bottleneck.
BF16_PAYS = bf16_pays_here()
IN_BF16 = doctor_plants.bf16_plantable()
ratio = doctor_plants.MEASURED_BF16_SPEEDUP
print(f"bf16 pays for the clean step on this CPU: {'yes' if BF16_PAYS else 'no'}"
      + (f" (fp32 / bf16 step time {ratio:.2f}x, median of 9 rounds; the bar is "
         f"{doctor_plants.BF16_PAYS:.2f}x)" if ratio else " (no bf16 units)")
      + f": the plants run in {'bf16' if IN_BF16 else 'fp32'}"
      + (" (no calibrated bf16 line for this CPU class)" if BF16_PAYS and not IN_BF16 else ""))


def profiled(step):
    return profile_training(step, active=SIZES["active"], bf16_hardware=IN_BF16)


patient_step = planted_step(("data", "sync"), seed=0)
patient = profiled(patient_step)
split = {k: v / patient["step_ms"] for k, v in patient["ranges_ms"].items()}
print("share of the profiled step: " + ", ".join(f"{k} {v:.0%}" for k, v in split.items()))
print(f"{patient['syncs_per_step']:.0f} syncs and {patient['ops_per_step']:.0f} operators per step; "
      f"{patient['step_ms_unprofiled']:.1f} ms per step unprofiled (median), {patient['step_ms']:.1f} ms profiled "
      f"({doctor.overhead_note(patient)})")
lesson.check_guess(GUESS_DATA_SHARE, split["data"], "share of the profiled step in data (section 2: the profiler "
                   "does not inflate every range alike)", "{:.0%}")

# %% [markdown]
# ## 2. What the profiler costs
#
# The profiler costs twice. While it records, every recorded operator and range pays a little, so
# the overhead is not a constant factor: it depends on what a step does (each doctor's report below
# prints its step's profiled / unprofiled ratio, where x1.25 would mean 25% slower under it: compare
# them from report to report, since each step's mix of operators and Python differs, and a rerun
# moves them too; where the profiled steps ran *faster*, the report says that the profiler's cost
# was below this machine's noise instead of printing a ratio under 1), and a throughput measured under
# the profiler is no throughput at all. And when a session stops, the profiler collects what it
# recorded from its C++ side: a cost paid once per session, for what was recorded (this lesson
# measures it at one session length only). Turning that into the Python events that `key_averages()`
# tables and the doctor read is a third cost, which torch defers to the first call that reads them.
# Measure all three: the same steps with and without a short profiling session around them,
# interleaved, and within each profiled burst how long the stop took, and after it the first read.
#
# **Predict.** How much slower are these steps under a short profiling session (recording CPU
# operators)?

# %%
GUESS_PROFILER_SLOWDOWN = None  # your guess, e.g. 1.3 (times slower)

# %%
clean = planted_step((), seed=1)
burst = SIZES["steps_per_burst"]


def plain_steps():
    for _ in range(burst):
        clean.run()
    return burst


stops, sessions = [], []  # seconds each session took to stop; the sessions, read after the A/B


def profiled_steps():
    session = profile(activities=[ProfilerActivity.CPU])
    session.__enter__()
    for _ in range(burst):
        clean.run()
    start = time.perf_counter()
    session.__exit__(None, None, None)  # stop recording, collect the trace
    stops.append(time.perf_counter() - start)
    sessions.append(session)  # its events are built at its first read: after the A/B, off its clock
    return burst


for _ in range(2):
    plain_steps()  # warm-up outside the comparison
overhead_ab = lesson.ab(f"{burst} steps without vs with a profiling session around them", plain_steps, profiled_steps,
                        pairs=SIZES["pairs"], a_label="unprofiled", b_label="profiled", unit="steps/s",
                        dev=torch.device("cpu"))
lesson.check_guess(GUESS_PROFILER_SLOWDOWN, 1 / overhead_ab.ratio, "slowdown under a short session", "{:.2f}x")
reads = []  # seconds each session's first read took: building its Python events
for session in sessions:
    start = time.perf_counter()
    session.key_averages()
    reads.append(time.perf_counter() - start)
session_s = burst / overhead_ab.b_median  # one profiled burst, stop included (medians of the A/B)
stop_s = statistics.median(stops)
recording = (session_s - stop_s) / (burst / overhead_ab.a_median)
# under 1 the recorded steps ran faster than the plain ones: a cost can't be negative, noise outweighed it
recording_note = (f"made the steps about x{recording:.2f} slower" if recording >= 1 else
                  "cost less than this machine's noise (the recorded steps ran no slower than the plain ones)")
print(f"of a profiled burst of {burst} steps ({1e3 * session_s:.0f} ms, medians), stopping the session took "
      f"{1e3 * stop_s:.0f} ms ({stop_s / session_s:.0%}); recording and the session's start {recording_note} "
      "(a ratio of medians, no interval; the doctor's reports below print each step's profiled / unprofiled "
      "ratio, which leaves the session's start and stop out); reading its events the first time took "
      f"{1e3 * statistics.median(reads):.0f} ms more (median), after the burst")

# %% [markdown]
# ## 3. The bottleneck doctor
#
# `effkit.doctor.diagnose(profile)` is a pure function of that plain data: each rule reads measured
# figures and, when they pass its threshold, names a bottleneck with its evidence, an estimate of
# what its fix saves, as a share of the *profiled* step (for data and sync the share their evidence
# takes; for the optimizer half its range, for precision half the matmul time, for overhead all but
# the matmuls and the data: estimates, not bounds, as measured below) and the lesson that shows
# the fix, where one does; the findings are ranked by that estimate. The rules, calibrated on planted bottlenecks (`python -m effkit.doctor
# --validate`; the evidence per CPU kind in `benchmarks/results/doctor-calibration.md`):
#
# | finding | fires when (shares of the profiled step) | fix (the lesson that shows it) |
# | --- | --- | --- |
# | data | the data range is 25% of the step or more | workers, prefetch, on-device augmentation (2) |
# | sync | 1.5 or more device-to-host reads per step (averaged over the profiled steps) outside the optimizer | keep metrics on the device, read them every N steps (measured in section 3's A/B) |
# | overhead | the matmul calls that do the work take under 7x this machine's cost of an empty call (16x for bf16 on AVX512-BF16 without AMX), and 50 or more operators per step, and data under 25% | fused/compiled operators (`torch.compile`: this lesson, section 3), a bigger batch or accumulation (4) |
# | precision | fp32 matmuls on hardware with bf16 units, and matmul/conv 30% of the step or more | bf16 autocast (3) |
# | padding | 30% or more of the token positions are padding | per-batch padding, buckets (7) |
# | optimizer | `foreach` and `fused` off, 8 or more parameter tensors, 4 or more optimizer operators per parameter tensor, and the optimizer range 12% of the step or more | `fused=True` / `foreach=True` (measured in Your turn) |
# | memory | peak 85% or more of a given limit | activation checkpointing (5) |
#
# **A sync's share is not its cost.** A sync is flagged by count, and ranked, like every finding, by
# its evidence's share of the profiled step: for a sync, the time inside the reads. What syncs cost
# is the stall they cause and the work done only to be read, which the profile books to other
# operators or to none. On a CPU an operator's result is ready when its call returns (there is no
# kernel queue to wait for), so the reads take almost no time, while the planted NaN checks'
# `isfinite`/`all`, work done only to be read, are booked to those operators. On a GPU a read also
# makes the host wait for every kernel queued before it, and the GPU then idles until the host
# queues more: time in no operator on its row (PyTorch's Performance tuning guide asks to avoid
# unnecessary CPU-GPU synchronization, so that the CPU runs ahead and the GPU's queue stays full).
# So on a CPU the doctor's share ranks a sync last whatever it costs, and on a GPU it would count the
# host's wait inside the read but not the idle time after it; what a fix saves is measured by timing
# the step without the syncs, as below.
#
# **Why "7x an empty call" and not a number of µs.** A matmul call's time depends on the machine as
# much as on the work (dispatch speed, the kernel picked for this CPU, the clock, a busy core): a 40 µs
# line set on an Intel Xeon with AMX called clean steps of an AMD EPYC overhead-bound. So each profile
# measures `matmul_us_floor` beside its steps, on their device, in their precision, under their load:
# the self time of a matmul call doing almost no work. Work calls within a few floors are mostly fixed
# cost; the line is a multiple of the floor, per class of kernels (`effkit.profiling.overhead_line`).
# The measurements per CPU kind are in `benchmarks/results/doctor-calibration.md`.

# %%
print(doctor.report(patient))

# %% [markdown]
# Fix the first finding (tokenise once, before training: the batches are sliced from memory) and
# profile again. The next bottleneck is the one that was second, or one that was not listed at all.
#
# Then each fix is measured as lesson 1 measures any change: the step before it against the step
# after it, in interleaved bursts, with an interval on the saving. The lines set each finding's
# share against that saving and rank the fixes by it, where the intervals separate them. A share is
# an estimate, not a bound on the saving, and it can miss either way. It is a share of the
# *profiled* step, whose operators each paid the profiler's cost (section 2), so it is not the
# unprofiled step's share; and a fix can change more than its own range (the data fix also takes
# the tokeniser's work, and the memory it streams through, out of the step, which can speed up the
# rest of it), so a saving can exceed the share. The sync finding's share, the time inside the
# reads, never counted the NaN checks' `isfinite`/`all` operators that its fix removes (above).

# %%
fixed_once_step, fixed_twice_step = planted_step(("sync",), seed=0), planted_step((), seed=0)
fixed_once = profiled(fixed_once_step)
print(doctor.report(fixed_once))
fixed_twice = profiled(fixed_twice_step)
print(doctor.report(fixed_twice))


def steps_burst(step):
    def run():
        for _ in range(SIZES["steps_per_burst"]):
            step.run()
        return SIZES["steps_per_burst"] * step.batch_size
    return run


fix_saved = {}  # finding -> (median, low, high) share of the step before the fix that it saved
for finding, before, before_step, after_step in (
        ("data", patient, patient_step, fixed_once_step),
        ("sync", fixed_once, fixed_once_step, fixed_twice_step)):
    fix_ab = lesson.ab(f"the {finding} fix: before vs after", steps_burst(before_step), steps_burst(after_step),
                       pairs=SIZES["pairs"], a_label="before", b_label="after", unit="samples/s",
                       dev=torch.device("cpu"))
    fix_saved[finding] = tuple(1 - 1 / r for r in (fix_ab.ratio, fix_ab.ci_low, fix_ab.ci_high))
    # a profile on a busy machine can miss a finding (CI's smoke run once did): say so, not crash
    said = next((f.share for f in doctor.diagnose(before) if f.label == finding), None)
    mid, low, high = fix_saved[finding]
    print(f"{finding} finding: "
          + (f"{said:.0%} of the profiled step" if said is not None else "not named in this profile")
          + f"; its fix saved {mid:.0%} of the step ({low:.0%} to {high:.0%}, the A/B's interval)")
first_fix, second_fix = sorted(fix_saved, key=lambda k: fix_saved[k][0], reverse=True)
separated = fix_saved[first_fix][1] > fix_saved[second_fix][2]  # intervals apart
by_saving = [first_fix, second_fix] if separated else []
print("ranked by what their fixes saved: " + (f"{first_fix}, then {second_fix} (their intervals do not overlap)"
      if separated else "not resolved (their intervals overlap)")
      + f"; the doctor ranked them by share: {', '.join(f.label for f in doctor.diagnose(patient))}")

# %% [markdown]
# ### The overhead finding's fix, measured: `torch.compile`
#
# At batch 1 of 8-token rows (the overhead plant) the step is a few hundred tiny operators: the time goes to Python and the dispatcher,
# not to arithmetic. That is what `torch.compile` is for: TorchDynamo captures the forward (and
# AOTAutograd the backward) as a graph, and Inductor fuses the small operators into a few generated
# kernels (C++ on a CPU, Triton on a GPU), so fewer dispatches remain. On a GPU,
# `mode="reduce-overhead"` also replays the step as a CUDA graph, removing each kernel's launch.
# PyTorch's `torch.compile` getting-started guide calls fusion "the single most important
# optimization that inductor performs" and says CUDA graphs "help eliminate the overhead from
# launching individual kernels". It is not free: the first call compiles, and those seconds are
# the recipe's too.
#
# **Predict.** After how many training steps does compiling this step pay back its compile time?

# %%
GUESS_BREAK_EVEN_STEPS = None  # e.g. 1000

# %%
print(doctor.report(profiled(planted_step(("overhead",), seed=0))))
eager_step = planted_step(("overhead",), seed=0)
compiled_step = planted_step(("overhead",), seed=0)
compiled_step = dataclasses.replace(compiled_step, loss=torch.compile(compiled_step.loss))  # forward + loss
start = time.perf_counter()
compiled_step.run()  # the first call compiles: Dynamo traces, Inductor generates and builds the kernels
compile_s = time.perf_counter() - start
# Inductor keeps compiled graphs on disk (/tmp/torchinductor_<user>): a second run of this lesson reuses them
cache_hits = counters["inductor"]["fxgraph_cache_hit"]
cache_note = (f"Inductor's on-disk cache held {cache_hits} of its graphs (an earlier run compiled them): a first"
              " compile on a fresh machine takes longer" if cache_hits else "a cold compile: no cached graph reused")


compile_ab = lesson.ab("overhead-bound step: eager vs torch.compile", steps_burst(eager_step), steps_burst(compiled_step),
                       pairs=SIZES["pairs"], a_label="eager", b_label="compiled", unit="samples/s",
                       dev=torch.device("cpu"))
eager_step_s = eager_step.batch_size / compile_ab.a_median
if compile_ab.ci_low > 1:  # the step's saving, from the ratio's interval
    saved = [eager_step_s * (1 - 1 / r) for r in (compile_ab.ci_low, compile_ab.ci_high)]
    break_even = [compile_s / s for s in saved]  # most steps first
    compile_line = (f"compiling took {compile_s:.1f} s and saves {1e3 * saved[0]:.2f}-{1e3 * saved[1]:.2f} ms a step"
                    f" (interval of the speed ratio): it pays back after roughly {break_even[1]:,.0f}-{break_even[0]:,.0f}"
                    f" steps (the ratio's interval only: the compile time is one measurement, and the eager step's"
                    f" own time moves between measurements); {cache_note}")
    lesson.check_guess(GUESS_BREAK_EVEN_STEPS, compile_s / (eager_step_s * (1 - 1 / compile_ab.ratio)),
                       "steps to pay back the compile (at the median ratio)", "{:,.0f}")
else:
    compile_line = (f"compiling took {compile_s:.1f} s and no speed-up this measurement can resolve: it never pays"
                    f" back here; {cache_note}")
    lesson.check_guess(GUESS_BREAK_EVEN_STEPS, float("inf"), "steps to pay back the compile", "{:,.0f}")
print(compile_line)

# %% [markdown]
# **Why less than the doctor's estimate.** The doctor's estimate for the overhead-bound step (about
# nine tenths of it, in its report above) is everything in the profiled step but the matmuls and the
# data: the fixed per-operator cost that all of the overhead fixes together go after, a bigger batch
# included. This cell compiled only the forward and the loss (`step.loss`); AOTAutograd compiles
# their backward too, but Adam's `optimizer.step()` and `zero_grad` ran eager as before. In the
# profiled ranges the report prints for that step, forward and backward are about three fifths of it
# and the optimizer about two fifths (on this page's AMX Xeon recordings): compiling could reach at
# most the first part, whose generated kernels still do the work and are still dispatched, and none
# of the second. The A/B above prints the ratio it measured: 1.25x would be a fifth of the eager step
# saved.

# %% [markdown]
# The course's own CIFAR recipes (smoke size: synthetic images; the optimized recipe's data is
# already on the device, its step is convolutions). Compare them per image, not per step: their
# batches differ (the optimized recipe measures its batch on each CPU, see the printed sizes), so
# a longer step can still be the cheaper one per image; the reports below say which it was here. They
# are different networks too (naive: a small ResNet; optimized: airbench's net, which reaches the
# target in fewer epochs), so images per second compares work per image, not which recipe trains
# faster: time to target is that measure (lesson 1, `make demo`).

# %%
recipes = {}
for name in RECIPES:
    recipes[name] = profile_named(name, **SIZES["recipe_steps"])
    print(doctor.report(recipes[name]))

# %% [markdown]
# ## 4. On a GPU: kernel gaps and the memory snapshot
#
# Two views exist only with CUDA, and no recording of this lesson has had a GPU: this section says
# what the cell below would show there, from PyTorch's documentation, not from a run; only what the
# cell prints on a GPU would be measured. **Kernel gaps**: on a GPU the trace has a row of kernels,
# and white space between two of them is time the GPU had nothing queued: the next launch had not
# come yet (a launch-bound step), or a sync had drained the queue. Holistic Trace Analysis (HTA)
# computes a GPU's idle time from such traces and splits it into waiting for the host, waiting for
# another kernel, and other (its documentation); the cell below prints the kernels' busy share of
# their span and the largest gap. **The memory snapshot**: `torch.cuda.memory._record_memory_history()`
# records every allocation with its stack; the pickle the cell dumps opens at
# https://pytorch.org/memory_viz, whose Active Memory Timeline shows every live tensor over time
# (PyTorch, *Understanding CUDA memory usage*): for a training step you would expect activations to
# grow through the forward and be freed through the backward, as lesson 5 counts them on a CPU.

# %%
if torch.cuda.is_available():
    net = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).cuda()
    x = torch.randn(256, 1024, device="cuda")
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as gpu_prof:
        for _ in range(3):
            with record_function("step/forward"):
                loss = net(x).square().mean()
            with record_function("step/backward"):
                loss.backward()
        torch.cuda.synchronize()
    snapshot = work / "memory_snapshot.pickle"
    torch.cuda.memory._dump_snapshot(str(snapshot))
    torch.cuda.memory._record_memory_history(enabled=None)
    kernels = sorted((e for e in gpu_prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(kernels, kernels[1:], strict=False)]
    busy = sum(e.time_range.elapsed_us() for e in kernels)
    span = kernels[-1].time_range.end - kernels[0].time_range.start if kernels else 0
    print(f"{len(kernels)} kernels, GPU busy {busy / max(span, 1):.0%} of their span; largest gap "
          f"{max(gaps, default=0):.0f} µs; memory snapshot: {snapshot} (open it at https://pytorch.org/memory_viz)")
else:
    print("No CUDA device here: the kernel-gap and memory-snapshot cell did not run (written for a GPU; no GPU run of it is recorded yet).")

# %% [markdown]
# ## Your turn
#
# Hand the doctor a step, read the findings, fix the first one and profile again. The cell below does
# it once for the classifier with Adam's per-tensor loop planted (`foreach=False`): it profiles that
# step, rebuilds its optimizer with `fused=True` (one of the two fixes the doctor names) and profiles
# again. Whether a fix pays is the A/B's to say, not the doctor's. The finding is that the loop makes
# several passes over every parameter tensor, one small operator at a time; on a CPU each operator is
# a function call, not a kernel launch, so `foreach=True`, which groups the same passes into fewer
# calls, may save little here, while `fused=True` does the whole update in one pass per tensor. Try
# both.
# Then make it yours: another plant (`planted_step(("sync",))`, `("padding",)`, `("overhead",)`: batch
# 1), a decoy (`planted_step((), decoys=("sync",))`: one `.item()` per step in `after`), or your own
# loader, loss, model and optimizer wrapped in `effkit.profiling.TrainStep`; and change the fix line to
# the fix of *its* first finding.

# %%
mine_step = planted_step(("optimizer",), seed=2)  # your turn: another plant or decoy, or a TrainStep of your own
mine = profiled(mine_step)
print(doctor.report(mine))
# the fix of the first finding, the per-tensor loop: the same model and batches, Adam with fused=True
mine_fixed = dataclasses.replace(mine_step, optimizer=torch.optim.Adam(mine_step.model.parameters(), lr=1e-3,
                                                                       fused=True))
mine_after = profiled(mine_fixed)
print(doctor.report(mine_after))
mine_ab = lesson.ab("your step: before vs after the fix", steps_burst(mine_step), steps_burst(mine_fixed),
                   pairs=SIZES["pairs"], a_label="before", b_label="after", unit="samples/s", dev=torch.device("cpu"))

# %% [markdown]
# ### In your own words
#
# Section 3's doctor ranked the planted bottlenecks; once the tokenising moved out of the step, a
# different finding came first. Explain in 2–3 sentences why fixing one bottleneck brings up the
# next, and why a finding's share of the profiled step is an estimate of what its fix saves and
# not a bound (section 3's last lines set the two side by side).
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=10)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(10, CPU_NAME))
first = doctor.diagnose(patient)
print(f"* patient (data + sync planted): {patient['step_ms_unprofiled']:.1f} ms per step unprofiled; data "
      f"{split['data']:.0%} of the profiled step, {patient['syncs_per_step']:.0f} syncs per step")
print(f"* doctor, ranked by share: {', '.join(f.label for f in first)} (by what each fix saved: "
      f"{', '.join(by_saving) or 'not resolved'}); after fixing data: "
      f"{', '.join(f.label for f in doctor.diagnose(fixed_once))}; after fixing both: "
      f"{', '.join(f.label for f in doctor.diagnose(fixed_twice))}")
print(f"* profiler cost: a session of {burst} steps {str(overhead_ab.verdict).rstrip('.')}; stopping it took {stop_s / session_s:.0%} "
      f"of that burst, recording and start {recording_note.split(' (')[0]} per step")
print(f"* torch.compile on the overhead-bound step (batch 1, 8-token rows): {compile_ab.verdict} {compile_line}")
for name, p in recipes.items():
    print(f"* {name} (smoke-size recipe, synthetic images, whatever the profile): "
          f"{p['step_ms_unprofiled']:.0f} ms per step of {p['batch_size']} images "
          f"({p['batch_size'] / p['step_ms_unprofiled'] * 1e3:,.0f} images/s); doctor: "
          f"{', '.join(f.label for f in doctor.diagnose(p))}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson10/`: write `diagnose(profile)` yourself.
# The grader plants bottlenecks in training steps you never see, profiles them itself and hands
# your function only the plain profile; every case must be named right (miss one or two, and all
# are profiled again for a second look that must be right whole). It also sets each plant's
# tell-tale field where it costs little (`foreach=False` on a step whose optimizer is a small
# share, batch 1 of long rows, one `.item()`, a little padding), on steps with nothing planted
# among others, and in one case of every grading plants two at once: the data or the overhead plant
# with the NaN-check syncs beside it, labelled by the costlier. In those pairs the data or overhead
# plant always leads, so the grading does not test whether you rank by cost; do it anyway, since on a
# step of your own the suspect that is there is not always the one that costs the most.
#
# ### References
#
# * PyTorch, [torch.profiler](https://pytorch.org/docs/stable/profiler.html) (schedule,
#   `record_function`, `key_averages`, `export_chrome_trace`) and the
#   [profiler recipe](https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html).
# * [Perfetto UI](https://ui.perfetto.dev) (opens the Chrome trace); PyTorch,
#   [Holistic Trace Analysis](https://hta.readthedocs.io) (idle time, kernel gaps, from the same traces).
# * PyTorch, [Understanding CUDA memory usage](https://pytorch.org/docs/stable/torch_cuda_memory.html)
#   (`_record_memory_history`, the snapshot viewer at https://pytorch.org/memory_viz).
# * PyTorch, [Performance tuning guide](https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html)
#   (syncs, DataLoader workers, `torch.compile`, CUDA graphs); PyTorch,
#   [torch.optim](https://pytorch.org/docs/stable/optim.html) (its for-loop, `foreach` and `fused`
#   implementations, and which is the default);
#   [Introduction to torch.compile](https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html);
#   [torch.compile, Getting Started](https://pytorch.org/docs/stable/torch.compiler_get_started.html)
#   (fusion as Inductor's most important optimization; CUDA graphs against launch overhead);
#   Hugging Face, [Efficient training on a single GPU](https://huggingface.co/docs/transformers/perf_train_gpu_one)
#   (`torch_compile=True`).
# * H. He, [Making Deep Learning Go Brrrr From First Principles](https://horace.io/brrr_intro.html)
#   (compute-, memory- and overhead-bound).
#
# ### What to try next
#
# * Run `python -m effkit.doctor cifar:naive cifar:optimized --json profiles.json` and read the JSON.
# * Plant a pair (`planted_step(("padding", "optimizer"))`) and check the ranking against the
#   calibration in `benchmarks/results/doctor-calibration.md` (or your own `python -m effkit.doctor --validate`).
# * On a GPU: the same doctor with CUDA activity recorded, and the memory snapshot of lesson 5's
#   checkpointed model; compile the overhead-bound step with `mode="reduce-overhead"` (CUDA graphs)
#   and compare its pay-back with the CPU's.
