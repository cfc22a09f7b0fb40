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
# # Lesson 3 — Mixed precision
#
# The naive BERT recipe trains in fp32. On hardware with native 16-bit units (bf16 on Ampere and
# later GPUs and on CPUs with AMX or AVX512-BF16; fp16 tensor cores on a T4 or V100) large matmuls
# can run faster in 16 bits: on a 2-core Xeon with AMX, bf16 ran a 1024-wide linear layer roughly
# 1.6-2x as fast as fp32 in the lesson's recorded runs (two records: intervals 1.55-2.06x and
# 1.58-1.98x; the latest, `docs/recorded/03_mixed_precision.outputs.json`, prints every width it
# tried in its section 4). In the lesson's H100 run (`benchmarks/results/nvidia-h100-80gb-hbm3/`),
# no clear difference at 1024 and 9.74x at 4096 (interval 8.86-9.93x). On a CPU without them (AVX2
# only) PyTorch runs bf16 in generic fallback kernels, far slower, so fp32 is the right choice
# there. **Your goal:** add automatic mixed precision (AMP) to the naive recipe — pick the precision
# for the device, a loss scaler only where it is needed, and a train step that uses both correctly —
# so the same recipe trains faster where the hardware allows, and where it does not, stays in fp32
# at fp32's speed (the grader allows for timing noise there: full points from 0.9x the baseline's
# speed, partial credit between 0.7x and 0.9x), with the same accuracy: within 0.5 percentage points
# on the CPU model the grader's accuracy gate was calibrated on (an AMD EPYC with AVX512-BF16); on a
# device its calibration does not describe (another CPU model, a GPU) the gate allows a wider drop,
# and the grading report says so.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch

from effkit.amp import AmpPolicy, DeviceCaps
from effkit.workloads import bert

# %% [markdown]
# ## Measure first
#
# How much faster is a BERT-sized matmul in bf16 than in fp32 here? (Autocast casts the inputs of
# matmuls to bf16; the result comes back in bf16.) A quick look, not lesson 3's A/B: short bursts,
# fp32 and bf16 interleaved so that a change in the machine's load hits both, and the median of
# their ratios.

# %% nbgrader={"grade": false, "grade_id": "measure_matmul", "locked": true, "schema_version": 3, "solution": false, "task": false}
import time

from effkit.measure import device_name


def matmul_time(a, b, n=5):
    start = time.perf_counter()
    for _ in range(n):
        a @ b
    return (time.perf_counter() - start) / n


a32, b32 = torch.randn(2048, 256), torch.randn(256, 1024)
a16, b16 = a32.bfloat16(), b32.bfloat16()
matmul_time(a32, b32, 1), matmul_time(a16, b16, 1)  # warm-up
pairs = [(matmul_time(a32, b32), matmul_time(a16, b16)) for _ in range(7)]
ratios = sorted(fp32 / bf16 for fp32, bf16 in pairs)
print(f"{device_name('cpu')}: bf16 runs this matmul at {ratios[3]:.2f}x fp32's speed (median of"
      f" 7 interleaved pairs, range {ratios[0]:.2f}-{ratios[-1]:.2f}x)")


# %% [markdown]
# ## Part 1: the precision and the scaler
#
# `choose_policy(caps)` gets a `DeviceCaps` (`caps.type` is "cuda", "cpu", ...; `caps.bf16` and
# `caps.fp16` say what the device supports) and returns an `AmpPolicy(device_type, mode)`:
#
# * `"bf16"` wherever the device supports bf16 — it has fp32's exponent range, so almost nothing
#   over- or underflows that would not in fp32 (its subnormals stop near 9e-41, fp32's near
#   1.4e-45);
# * `"fp16"` on a CUDA GPU without bf16 (a T4, a V100);
# * `"off"` (plain fp32) otherwise, even where `caps.fp16` is true (a CPU, an Apple GPU): like
#   effkit, train in fp16 only on CUDA.
#
# `make_scaler(policy)` returns a `torch.amp.GradScaler(policy.device_type, enabled=...)`, for the
# policy's device, that is **enabled only for fp16**: fp16's small range underflows small gradients
# to zero unless the loss is scaled up first; for bf16 and fp32, loss scaling only costs time. (Yes, `effkit.amp` does this
# for you - `choose_precision`, `AmpPolicy.make_scaler` - but the grader sees them run inside your
# functions, and then your policy earns neither these points nor the performance points: write it
# yourself once.)

# %% nbgrader={"grade": false, "grade_id": "policy_and_scaler", "locked": false, "schema_version": 3, "solution": true, "task": false}
def choose_policy(caps):
    """The precision to train in on a device that can do what `caps` says."""
    ### BEGIN SOLUTION
    if caps.bf16:
        return AmpPolicy(caps.type, "bf16")
    if caps.fp16 and caps.type == "cuda":
        return AmpPolicy(caps.type, "fp16")
    return AmpPolicy(caps.type, "off")
    ### END SOLUTION


def make_scaler(policy):
    """A GradScaler that scales the loss only where the precision needs it (fp16)."""
    ### BEGIN SOLUTION
    return torch.amp.GradScaler(policy.device_type, enabled=policy.mode == "fp16")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_policy", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_policy", "lesson3.ipynb")


# %% [markdown]
# ## Part 2: the train step
#
# Write `amp_train_step(model, batch, optimizer, policy, scaler, max_grad_norm)`, called once per
# batch by the recipe. This is a contract, not a recipe: the grader checks what your step *does* on a
# small probe model (its update against a float64 reference step), not which lines you wrote. The
# calls you need are the ones this lesson used on `GradScaler` and PyTorch's "Automatic Mixed
# Precision examples" page (https://docs.pytorch.org/docs/stable/notes/amp_examples.html); the
# order is yours to work out.
#
# * **What runs in 16 bits**: the forward pass and the loss (`model(**batch).loss`) run under
#   `policy.autocast()`; nothing after them does. (Why is the backward pass not in the block?)
# * **The update**: the parameters change exactly as one step of `optimizer` on the batch's
#   gradients clipped to a total norm of `max_grad_norm` (`torch.nn.utils.clip_grad_norm_`) at their
#   **true** size, whatever loss scale the scaler used to keep fp16 gradients from underflowing.
#   The grader runs your step with an enabled scaler at a scale of thousands: a step that clips the
#   wrong gradients moves the weights by a different amount and fails.
# * **An overflow**: when an fp16 gradient is inf or NaN, the weights do not change and the scaler
#   lowers its scale for the next step (the recipe reads that and does not advance its
#   learning-rate schedule).
# * **Afterwards**: the gradients are cleared, and the step returns the batch's (unscaled) loss as
#   a Python `float`.
#
# With a disabled scaler (bf16, fp32) every scaler call is a cheap no-op, so one step must serve all
# three precisions. Using effkit's `default_train_step`, or lesson 4's `GradAccumulator` (its
# `backward` and `step` are this whole step), earns no points, and neither does a cell that makes
# code from data (`exec`, `importlib`, `types.FunctionType`: the grader cannot tell such code from
# effkit's, so it fails the policy, step and scaler checks): write your own, as plain Python.

# %% nbgrader={"grade": false, "grade_id": "amp_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def amp_train_step(model, batch, optimizer, policy, scaler, max_grad_norm):
    """One mixed-precision training step; returns the loss as a float."""
    ### BEGIN SOLUTION
    with policy.autocast():
        loss = model(**batch).loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach().item()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_step", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_step", "lesson3.ipynb")

# %% nbgrader={"grade": true, "grade_id": "test_scaler", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_scaler", "lesson3.ipynb")

# %% [markdown]
# ## Performance
#
# The grader times the naive recipe in fp32 with effkit's reference step (A) and with your
# `choose_policy`, `make_scaler` and `amp_train_step` (B), in fresh processes it controls, on its own
# data, interleaved A B B A ..., and evaluates the trained weights itself on sentences your code never
# sees. Full points at the target speedup for your device (the report names it), partial credit down
# to a floor; none if accuracy drops more than 0.5 pp below the baseline (where the accuracy gate
# was calibrated, an AMD EPYC with AVX512-BF16; on another device the gate is wider and the report
# says so), your step fails the checks above, effkit's own answers (`choose_precision`,
# `AmpPolicy.make_scaler`, `default_train_step`, `GradAccumulator.backward`/`.step`) run inside
# your functions, named or not, or a cell makes code from data (`exec`, `types.FunctionType`,
# `importlib`, ...). Only your two solution cells travel to the measurement. **Save the notebook
# before running this cell** (or run `python -m grader check lesson3.ipynb` in a terminal).

# %% nbgrader={"grade": true, "grade_id": "test_speed", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
from grader.assignments.lesson3.checks import grade_performance

grade_performance()

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. In fp16 training with a loss scale of 2**10, a gradient would be 2e-8 at its true size. Is it
#    kept, or lost to underflow, on its way back?
#    (a) lost: scaled, it is about 2e-5, still under fp16's smallest normal (6.1e-5), so it is zero;
#    (b) kept: scaled, it is about 2e-5, an fp16 subnormal with fewer bits; unscale_ undoes it;
#    (c) kept, and it would be kept unscaled too: fp16's subnormals reach down to about 6e-10.
# 2. With a `GradScaler` and gradient clipping, the right order is:
#    (a) `scaler.scale(loss).backward()`, `scaler.unscale_(opt)`, clip, `scaler.step(opt)`,
#    `scaler.update()`;
#    (b) `scaler.scale(loss).backward()`, clip, `scaler.unscale_(opt)`, `scaler.step(opt)`,
#    `scaler.update()`;
#    (c) `loss.backward()`, `scaler.unscale_(opt)`, clip, `scaler.step(opt)`, `scaler.update()`.
# 3. A `GradScaler` with `growth_interval=2000` (growth 2x, backoff 0.5x) has settled where a scale S
#    never overflows and 2S always does. Over a long run, how many of its steps are skipped?
#    (a) none: once a step at 2S has overflowed, the scaler keeps S and stops growing;
#    (b) about half: the scale alternates S, 2S, S, 2S, and every step at 2S is skipped;
#    (c) about 1 in 2001: 2000 good steps grow S to 2S, that step is skipped, back to S.
# 4. Under `torch.autocast` **on a CUDA GPU**, what stays in fp32?
#    (a) nothing: the weights, optimizer state and every op's output are cast to 16 bits;
#    (b) the weights and optimizer state, and fp32-listed ops: softmax, layer norm, losses;
#    (c) the weights and optimizer state only: softmax, layer norm, losses run in 16 bits.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "b", "q2": "a", "q3": "c", "q4": "b"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson3.ipynb")
