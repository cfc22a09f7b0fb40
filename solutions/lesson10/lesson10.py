# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---


# %% [markdown]
# # Lesson 10 — Profiling: find the next bottleneck: exercise
#
# Write the **bottleneck doctor's** judgement yourself: a function `diagnose(profile)` that reads
# a profile of a few training steps (plain data, below) and names the bottleneck.
#
# **How it is graded** (outside your notebook). The grader builds 8 training steps of a small
# text classifier (the lesson's `effkit.doctor_plants`), plants a bottleneck in most of them in
# an order and with data you cannot know, profiles every step **itself** with `torch.profiler`,
# and hands your `diagnose` only the resulting dict, in a separate process. Each label is one
# of:
#
# | label | planted as | the fix, and the lesson that shows it |
# | --- | --- | --- |
# | `"data"` | raw text tokenised in Python, sample by sample, inside the step | workers, prefetch (2) |
# | `"sync"` | `bool(tensor)` NaN checks in the forward and `loss.item()` every step | keep metrics on the device (the lesson's section 3 measures it) |
# | `"overhead"` | batch 1 instead of 32: every operator tiny | `torch.compile` (10), a bigger batch (4) |
# | `"padding"` | random lengths padded to the maximum | per-batch padding, buckets (7) |
# | `"optimizer"` | `Adam(foreach=False)`: a Python loop over the parameter tensors, a large embedding table among them | `fused=True`, or `foreach=True` where it pays (the lesson's Your turn measures it) |
# | `"none"` | nothing planted | |
#
# Each bottleneck appears once and `"none"` three times. **The fields can mislead.** Each
# plant's tell-tale field also turns up where it costs little: one `loss.item()` per step, a few
# percent of padding (at most an eighth of a row), a step that waits a little for its data (short
# documents tokenised: about a tenth of the step, where the plant waits about half of it), `foreach=False` on the optimizer plant's own rows
# and parameter tensors but a small embedding table, so that its optimizer is a small share of the
# time, batch 1 of rows long enough that its matmuls are not tiny. And a case may hold two plants,
# the NaN-check syncs beside another: the label is always the plant that costs **the most of the
# step**, so
# `"foreach": False` alone does not make `"optimizer"`, nor `batch_size == 1` `"overhead"`. Read
# what each suspect costs (its share of `step_ms`, the matmul calls against `matmul_us_floor`)
# before you name it. A sync costs too little on a CPU for its time to be read (an operator's result
# is ready when its call returns, no kernel queue to wait for, so a read costs about its own
# operator): the lesson's table names it by count, syncs per step, and ranks it by that small time.
# The per-tensor optimizer loop is named by its signature, operators per parameter tensor, *and* by
# its time: in the grader's calibration the plant's optimizer range took 32.5-40% of the step, the
# `foreach=False` decoy's 2.8-5.3% (1.6-5.7% on another CPU), and the lesson's line is 12%,
# about 2x from both.
# `test_diagnose` (5 points) needs **all 8** labels right. Miss one or two and the grader profiles
# all 8 steps again on fresh data,
# in a new order, and asks again: that second look must be named whole; miss three or more on the
# first look, or any on the second, and the test fails. So a sound rule survives one or two unlucky
# profiles on the first look, but not a miss on both; a rule left out, or a field read in a rule's
# place, misses on both looks. Return a plain string; anything else counts as wrong. Write the rules yourself:
# a copy of `effkit.doctor`'s code in your cells, renamed or not, earns no points (the grader finds
# functions that share most of their statements with it; a rewrite far enough not to read as a copy
# is not caught, and is the exercise done with the doctor open beside you), and the grader
# reads your cells as text, so a cell that builds code at run time (`exec`, `eval`, `runpy`, `pickle`, ...) or
# reads the frames that called it (`sys`, `inspect`, ...) is refused.
#
# ## The profile you get
#
# ```python
# {
#   "steps": 5,                      # profiled (active) steps the figures average over
#   "step_ms": 14.2,                 # mean step time under the profiler
#   "step_ms_unprofiled": 10.1,      # median step time without it (the number to quote)
#   "profiler_overhead": 1.41,       # step_ms / step_ms_unprofiled
#   "ranges_ms": {"data": 0.1, "forward": 4.2, "backward": 7.9, "optimizer": 1.8, "other": 0.0},
#   "ops_per_step": 234.0,           # operators dispatched per step (not counting those inside others)
#   "ops_per_step_by_range": {"data": 3.0, "forward": 30.0, ...},
#   "top_ops": [["aten::mm", 2.1, 18.0], ...],   # [name, self ms per step, calls per step]
#   "syncs_per_step": 0.0,           # device-to-host reads (.item(), bool(t)) outside the optimizer
#   "sync_ms": 0.0,                  # time spent inside them per step
#   "matmul_ms": 4.3,                # self time in matmul/conv operators per step
#   "matmul_calls_per_step": 27.0,
#   "matmul_us_median": 160.0,       # the median matmul/conv call's self time, in µs
#   "matmul_us_work": 210.0,         # the call that half the matmul time is spent in or shorter, in µs
#   "matmul_us_floor": 6.5,          # this machine's self time of a matmul call doing almost nothing, in µs,
#                                    # measured before and after the steps, the lower kept (same device, precision, load)
#   "overhead_calls": 7.0,           # the line for this precision and CPU class: work calls under this many
#                                    # floors are mostly fixed cost (16.0 for bf16 on AVX512-BF16 without AMX)
#   "cpu_isa": "AVX2",               # the CPU class the line belongs to: "AMX", "AVX512-BF16", "AVX512",
#                                    # "AVX2" (or torch's own word for the CPU); None for a GPU step
#   "batch_size": 32,
#   "compute_dtype": "float32",      # dtype of the Linear outputs
#   "bf16_hardware": False,
#   "optimizer": {"name": "Adam", "foreach": True, "fused": None, "param_tensors": 27},
#   "padding_share": 0.0,            # share of padded token positions in the profiled batches
#   "memory_peak_bytes": None, "memory_limit_bytes": None,
# }
# ```
#
# Use **shares of the step** (a range's ms divided by `step_ms`), not milliseconds, and a call's time
# as a **multiple of `matmul_us_floor`**, not µs, against the profile's own line `overhead_calls`:
# the grader's machine may be faster or slower than yours, and busy, and its class of kernels may need
# another line (bf16 on an AVX512-BF16 CPU: the floor's tiny call takes a shortcut real layers do not). (A line of 40 µs that fitted one Intel Xeon called the clean, sync, optimizer and
# padding steps of an AMD EPYC overhead-bound: its kernels were faster, so even a clean step's calls
# took less than 40 µs there.) The grader makes this concrete: each case reaches your `diagnose` twice,
# in a shuffled list, as a host 5-10 times slower and as one 5-10 times faster would measure the same step:
# every time in it (each `_ms` and `_us` field, `ranges_ms`, `top_ops`' milliseconds) multiplied by the
# copy's factor. A case is named right when both copies are. Shares and multiples of the floor come through
# unchanged; no line in µs or ms holds for both copies.
# When two things look wrong, name the one
# whose fix saves the most time; when one field looks wrong and costs little, it is not the bottleneck.
#
# **Part (b)**, further down: fix a slow training step. The grader holds your step to the original's
# result and times it against the original.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math

# %% nbgrader={"grade": false, "grade_id": "diagnose", "locked": false, "schema_version": 3, "solution": true, "task": false}
def diagnose(profile):
    """The bottleneck's label: "data", "sync", "overhead", "padding", "optimizer" or "none"."""
    ### BEGIN SOLUTION
    step = max(profile["step_ms"], 1e-9)
    ranges = profile["ranges_ms"]
    found = {}  # label -> what its evidence costs, as a share of the profiled step: the ranking key
    data = ranges.get("data", 0.0) / step
    if data >= 0.25:
        found["data"] = data
    if profile.get("syncs_per_step", 0) >= 1.5:  # one loss.item() per step is tolerable; more is a habit
        found["sync"] = profile.get("sync_ms", 0.0) / step  # small on a CPU: it ranks last
    # the calls that do the work, not the typical call, in multiples of this machine's cost of a call that
    # does nothing: a line in µs would be another CPU's (a fast CPU's calls are short on every step)
    per_call_us = profile.get("matmul_us_work") or profile.get("matmul_us_median") or math.inf
    calls = per_call_us / profile["matmul_us_floor"]
    matmul = profile.get("matmul_ms", 0.0) / step
    if calls < profile["overhead_calls"] and profile.get("ops_per_step", 0) >= 50 and data < 0.25:
        found["overhead"] = 1.0 - matmul - data  # tiny matmuls: fixed per-operator costs rule
    padding = profile.get("padding_share") or 0.0
    if padding >= 0.3:
        found["padding"] = padding * (ranges.get("forward", 0.0) + ranges.get("backward", 0.0)) / step
    opt = profile.get("optimizer") or {}
    opt_share = ranges.get("optimizer", 0.0) / step
    tensors = opt.get("param_tensors") or 0
    opt_ops = profile["ops_per_step_by_range"].get("optimizer", 0.0)
    looped = not opt.get("foreach") and not opt.get("fused") and tensors >= 8
    if looped and opt_ops >= 4 * tensors and opt_share >= 0.12:  # one small operator after another per tensor
        found["optimizer"] = opt_share / 2
    return max(found, key=found.get) if found else "none"
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_diagnose", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_diagnose", "lesson10.ipynb")

# %% [markdown]
# ## Part (b), your turn: a slow training step to fix
#
# Below is a training step that is **correct and slow**: one step of SGD with weight decay on the
# mean cross-entropy of a batch, for a small MLP (32 → 64 → 64 → 10). It is the grader's own code
# (`grader/assignments/lesson10/slow_step.py`), shown here exactly:
#
# ```python
# def slow_step(model, inputs, targets, lr, weight_decay):
#     """One SGD step with weight decay on the mean cross-entropy of the batch; returns the mean loss."""
#     params = list(model.parameters())
#     # float64 where float32 would do
#     grads = [torch.zeros(p.shape, dtype=torch.float64) for p in params]
#     total = 0.0
#     for i in range(len(inputs)):  # one sample at a time: hundreds of tiny operators per step
#         x = torch.tensor(inputs[i].tolist()).unsqueeze(0)  # to a Python list and back: a new tensor
#         y = torch.tensor([int(targets[i].item())])  # .item(): a host read per sample
#         loss = F.cross_entropy(model(x), y)
#         for g, sample_grad in zip(grads, torch.autograd.grad(loss, params), strict=True):
#             g += sample_grad.double()
#         total += loss.item()  # and another
#     with torch.no_grad():
#         # a Python loop over the parameters, small operators each
#         for p, g in zip(params, grads, strict=True):
#             update = (g / len(inputs)).float() + weight_decay * p
#             p -= lr * update
#     return total / len(inputs)
# ```
#
# Profile it (or just read it: every bottleneck of part (a) but padding is in there), then write
# `fast_step(model, inputs, targets, lr, weight_decay)` that makes **the same update** faster and
# returns the batch's mean loss as a float. `inputs` is a float32 tensor `[batch, 32]`, `targets`
# an int64 tensor `[batch]`; update the model's parameters in place.
#
# **How it is graded** (outside your notebook; your step runs in a separate process on one CPU
# thread, the original in the grader's own):
#
# * `test_fast_step_equal` (2 points): the grader draws a model, a batch size, the learning rate and
#   the weight decay, runs the original step 3 times itself, and your step 3 times on the same
#   batches. Your weights must match its weights to within 1e-3 of the update (float32 instead of a
#   float64 sum is fine: ~1e-6), and each loss you return its loss.
# * `test_fast_step_speed` (3 points): the grader times 8 of your steps against 8 of the original's,
#   alternating (A B B A ...), 6 pairs, each pair on a fresh task whose result it checks too. The
#   interval of the median speed-up must start at **3x** or above (a step that keeps the
#   per-sample loop reaches ~1.2x).

# %% nbgrader={"grade": false, "grade_id": "fast_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
import torch
import torch.nn.functional as F


def fast_step(model, inputs, targets, lr, weight_decay):
    """slow_step's update, fast: one SGD step with weight decay on the batch's mean cross-entropy."""
    ### BEGIN SOLUTION
    loss = F.cross_entropy(model(inputs), targets)  # the whole batch in one forward: its mean loss
    # plain SGD keeps no state between steps, so a fresh optimizer per step makes the same update;
    # foreach=True: a few multi-tensor operators instead of a Python loop over the parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, weight_decay=weight_decay, foreach=True)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()  # one host read per step instead of two per sample
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fast_step_equal", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_fast_step_equal", "lesson10.ipynb")

# %% nbgrader={"grade": true, "grade_id": "test_fast_step_speed", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_fast_step_speed", "lesson10.ipynb")

# %% [markdown]
# Try it before you ask the grader (not graded): the same task, both steps, timed interleaved.

# %%
from effkit.abtest import compare
from grader.assignments.lesson10.slow_step import Task, flat, run, slow_step

task = Task(seed=0, batch=64, steps=3)
torch.set_num_threads(1)
slow_model, slow_losses = run(slow_step, task, 0.1, 0.01)
fast_model, fast_losses = run(fast_step, task, 0.1, 0.01)
update = (flat(slow_model) - flat(task.model())).norm()
print(f"weights differ by {float((flat(fast_model) - flat(slow_model)).norm() / update):.1e} of the update")
print(compare(lambda: run(slow_step, task, 0.1, 0.01), lambda: run(fast_step, task, 0.1, 0.01), min_pairs=6, max_pairs=6))

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., ..., "q5": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. `torch.profiler.schedule(wait=1, warmup=2, active=5)`: why skip and warm up before recording?
#    (a) so the learning-rate warm-up is over and the recorded steps run at the final LR;
#    (b) the first steps pay one-off costs (allocation, lazy init, the profiler's start-up);
#    (c) recording every step would fill memory; skipping a few keeps the trace small.
# 2. In `prof.key_averages().table(...)`, which column ranks where the time *goes*?
#    (a) self time (CPU or CUDA): each operator's own time, without its children;
#    (b) the number of calls, since the operators called most are the ones to fix;
#    (c) CPU total time, since it counts everything the operator called inside it.
# 3. A step runs at 1,000 samples/s with the profiler on and 1,400 without. What do you report?
#    (a) 1,000 samples/s, since only the profiled run shows what the step really does;
#    (b) 1,000 × 1.4 for any profiled step, since the profiler's overhead is a fixed factor;
#    (c) 1,400 samples/s, measured without it; the profile says where the time goes.
# 4. Why do `.item()` reads inside a GPU step (a NaN check per layer, a loss read mid-step) hurt,
#    when reading one number is cheap?
#    (a) it blocks the CPU until the queued kernels finish, so it cannot queue ahead: the GPU idles;
#    (b) it detaches the loss from the graph, so autograd has to rebuild that graph at the next
#    step;
#    (c) it copies the whole loss tensor, its autograd graph included, from the GPU back to the CPU.
# 5. You fixed the doctor's first finding and the step is 30% faster. What next?
#    (a) work down the first profile's list: its ranking still holds after the fix;
#    (b) profile again: the shares have moved, and the next bottleneck may be new;
#    (c) stop: the doctor ranked the other findings lower, so none of them matter.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "b", "q2": "a", "q3": "c", "q4": "a", "q5": "b"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson10.ipynb")
