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
# # Lesson 5 — Memory for compute: activation checkpointing: exercise
#
# The grader gives you a stack of 6 transformer blocks (`blocks`, an `nn.ModuleList`; dropout on)
# and a batch `x` of shape `(batch, sequence, width)` that does **not** require grad (it is data).
# A *plan* says what to checkpoint, as plain data:
#
# ```python
# {"blocks": [0, 2, 3], "save": None}            # checkpoint blocks 0, 2, 3; recompute them whole
# {"blocks": [0, 1, 2, 3, 4, 5], "save": ["addmm", "mm"]}  # every block, keeping the matmul outputs
# ```
#
# `"save"` lists ATen op names (`op.overloadpacket.__name__`, e.g. `"addmm"`, `"gelu"`,
# `"_scaled_dot_product_flash_attention_for_cpu"`): selective checkpointing keeps those ops'
# outputs and recomputes the rest.
#
# 1. Write `checkpointed_forward(blocks, x, plan)`: run `x` through every block in order and return
#    the last output; checkpoint each block the plan names with `torch.utils.checkpoint.checkpoint`,
#    using a selective policy (`create_selective_checkpoint_contexts`) when `plan["save"]` is a list.
#    The gradients must equal the plain stack's — with dropout on, and with block 0 fed data.
# 2. Write `plan_checkpointing(blocks, x, budget_bytes)`: return a plan whose forward keeps at most
#    `budget_bytes` for backward (as `saved_activation_bytes` counts them) **with as little
#    recompute as possible**. Measure, don't guess: what does one checkpointed block save?
#    (If you measure a selective plan yourself: torch >= 2.12 lets the hooks see what it keeps when
#    you pass `respect_saved_tensors_hooks=True` to `checkpoint`; older torch has no such argument
#    (check with `inspect.signature(checkpoint)`), and `saved_activation_bytes` refuses to count
#    a selective block there rather than miss its bytes.)
#
# Write them with plain PyTorch; `effkit.checkpoint_plan.plan_for_budget`, `apply_plan` and
# `effkit.act_checkpoint.checkpoint_modules` are the lesson's reference answers and are refused.
#
# **How it is graded.** Outside your notebook. Your forward runs in a separate process on a stack,
# batch, dropout seed and plans the grader draws; it compares your gradients with *its own* plain
# stack's (3 points). Your planner is called with budgets the grader draws; only the *plan* comes
# back: the grader applies it to its own copy of the stack with effkit's implementation and
# measures the bytes itself (2 points: a loose and a tight budget). Then it times your plan for the
# loose budget against "checkpoint every block" and against its own plan, interleaved, on its own
# clock: faster than checkpointing everything (2 points). One more point for recomputing no more
# than the budget needs: a whole-block plan may checkpoint no more blocks than the grader's own
# (its blocks are identical, so the count *is* the recompute — a timing this small is too noisy to
# judge it); a plan that also saves ops inside blocks must gain at least 80% of the speed the
# grader's plan gains over checkpointing everything, timed.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import functools

import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy

from effkit.act_checkpoint import saved_activation_bytes

# %% nbgrader={"grade": false, "grade_id": "checkpointed_forward", "locked": false, "schema_version": 3, "solution": true, "task": false}
def checkpointed_forward(blocks, x, plan):
    """Run x through blocks, checkpointing those in plan["blocks"] (selectively if plan["save"])."""
    ### BEGIN SOLUTION
    import inspect

    chosen, save = set(plan["blocks"]), plan.get("save")
    context = {}
    if save is not None:
        keep = set(save)

        def policy(ctx, op, *args, **kwargs):
            if op.overloadpacket.__name__ in keep:
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        context = {"context_fn": functools.partial(create_selective_checkpoint_contexts, policy)}
        # torch >= 2.12 can route what SAC keeps through saved_tensors_hooks (so it is counted);
        # older torch has no such argument and rejects it
        if "respect_saved_tensors_hooks" in inspect.signature(checkpoint).parameters:
            context["respect_saved_tensors_hooks"] = True
    for i, block in enumerate(blocks):
        if i in chosen:
            x = checkpoint(block, x, use_reentrant=False, **context)
        else:
            x = block(x)
    return x
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "plan_checkpointing", "locked": false, "schema_version": 3, "solution": true, "task": false}
def plan_checkpointing(blocks, x, budget_bytes):
    """A plan {"blocks": [...], "save": None or [...]} that fits budget_bytes with the least recompute."""
    ### BEGIN SOLUTION
    # The blocks are identical: each checkpointed block saves the same bytes and costs one more
    # forward of itself. So: the fewest blocks that fit, found by measuring.
    for k in range(len(blocks) + 1):
        plan = {"blocks": list(range(k)), "save": None}
        kept = saved_activation_bytes(lambda: checkpointed_forward(blocks, x, plan).sum())  # noqa: B023
        if kept <= budget_bytes:
            return plan
    return {"blocks": list(range(len(blocks))), "save": None}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_gradients", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_gradients", "lesson5.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_budget", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_budget", "lesson5.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_speed", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_speed", "lesson5.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_least_recompute", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_least_recompute", "lesson5.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. Training a 1-billion-parameter model with mixed-precision Adam needs, before any activation,
#    about:
#    (a) 8 GB; (b) 12 GB; (c) 16 GB.
# 2. With `use_reentrant=True`, checkpointing the first block of a model fed with data (no
#    `requires_grad`) gives:
#    (a) no gradient for that block's parameters, though backward still runs;
#    (b) the same gradients as without checkpointing, a little more slowly;
#    (c) an error in backward, since no input of the checkpoint needs grad.
# 3. Selective checkpointing that keeps the matmul outputs and recomputes the pointwise ops,
#    compared with checkpointing the whole block:
#    (a) keeps less memory and recomputes fewer FLOPs: better on both counts;
#    (b) keeps the same memory, and recomputes just as many FLOPs;
#    (c) keeps more memory, but recomputes far fewer FLOPs.
# 4. 16 layers, each keeping activations about the size of its input, cut into checkpointed segments
#    (Chen et al. 2016): the peak memory is lowest near
#    (a) 1 segment; (b) 4 segments; (c) 16 segments.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "c", "q2": "a", "q3": "c", "q4": "b"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson5.ipynb")

# %% [markdown]
# ## Your turn: bytes and time of your plans (not graded)
#
# Measure what your plans keep and how long a step takes under each: the plain stack, your plan for
# half of the plain bytes, every block checkpointed, and every block keeping its matmuls.

# %%
import time

torch.manual_seed(0)
demo_blocks = torch.nn.ModuleList(
    torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.1, batch_first=True, norm_first=True) for _ in range(6))
demo_x = torch.randn(4, 128, 64)
plain_kept = saved_activation_bytes(lambda: checkpointed_forward(demo_blocks, demo_x, {"blocks": [], "save": None}).sum())
plans = {"plain": {"blocks": [], "save": None},
         "yours (half)": plan_checkpointing(demo_blocks, demo_x, plain_kept // 2),
         "everything": {"blocks": list(range(6)), "save": None},
         "everything, keep matmuls": {"blocks": list(range(6)), "save": ["addmm", "mm", "bmm"]}}
for name, plan in plans.items():
    kept = saved_activation_bytes(lambda: checkpointed_forward(demo_blocks, demo_x, plan).sum())  # noqa: B023
    start = time.perf_counter()
    for _ in range(3):
        checkpointed_forward(demo_blocks, demo_x, plan).sum().backward()
    print(f"{name:26} keeps {kept / 2**20:6.2f} MiB, {(time.perf_counter() - start) / 3 * 1e3:5.0f} ms per step")
