"""Lesson 5 - activation checkpointing, graded out of the kernel: gradients, bytes and time.

Gradients cross as raw bytes and are checked here; plans cross as data and are measured and timed
here (:mod:`plan_checks`); "recomputed" is judged by memory the worker's cgroup released, since
forward counts are forgeable. The timing runs in the grading process: keep the machine quiet.
"""

from __future__ import annotations

import torch

from effkit.act_checkpoint import MATMUL_OPS
from effkit.checkpoint_plan import CheckpointPlan, plan_bytes
from grader.assignments.lesson5 import ckpt_checks as cc
from grader.assignments.lesson5.ckpt_reference import reference_grads
from grader.assignments.lesson5.plan_checks import (
    CALL_SECONDS,
    _refuse_reference,
    check_budget,
    check_least_recompute,
    check_speed,
)
from grader.kit.assignment import Assignment
from grader.kit.checks import CheckFailed, Context, expect, quiz_check, received_tensor, stub_reason

TOLERANCE = 1e-5  # relative gradient error: checkpointing changes no arithmetic
MATCH = 1e-4  # "your gradient is what this mistake gives"
# The memory step passes when the worker's peak growth is at most what the plan keeps, plus this
# share of what checkpointing frees (plain - plan), plus OVERHEAD of the plain stack's bytes (the
# step's own working memory: a block recomputed, its gradients). Measured here (2 cores, no GPU,
# busy), in shares of the plain stack's bytes: the reference grows by 0.24-0.30 above what its plan
# keeps, on the every-block and the partial plans alike; a forward that keeps its activations and
# re-runs blocks under no_grad by 1.17-1.23 in all. The limit sits halfway for every plan:
# every-block 0.77 (reference 0.29-0.35), partial (3 of 6 blocks) ~1.0 (reference ~0.82).
RELEASED = 0.5
OVERHEAD = 0.25

SETUP_SOURCE = """\
import functools

import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy

from effkit.act_checkpoint import saved_activation_bytes"""


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def _forward_plans(ctx: Context, ops: frozenset[str]) -> list[CheckpointPlan]:
    some = sorted(
        {0, *ctx.rng.sample(range(1, cc.N_BLOCKS), 2)}
    )  # block 0: fed data, the reentrant trap
    return [
        CheckpointPlan(tuple(some)),
        CheckpointPlan(tuple(range(cc.N_BLOCKS)), tuple(sorted(MATMUL_OPS & ops))),
    ]


def _diagnose(
    data: dict,
    got: torch.Tensor,
    seed: int,
    rng_seed: int,
    plan: CheckpointPlan,
    shape: tuple[int, int] = (cc.BATCH, cc.SEQ),
) -> str:
    missing = data.get("missing") or []
    if missing:
        return (
            f"{len(missing)} parameters got no gradient (e.g. {str(missing[0])[:40]}): with use_reentrant=True "
            "a checkpointed block whose input does not require grad (block 0 is fed data) passes no gradient "
            "to its parameters. Use checkpoint(..., use_reentrant=False)"
        )
    _, no_rng = reference_grads(seed, rng_seed, plan, preserve_rng_state=False, shape=shape)
    if _rel(got, no_rng) < MATCH:
        return (
            "they are exactly the gradients of a recompute that draws new dropout masks: keep "
            "preserve_rng_state=True (the default) so the recompute replays the forward's random numbers"
        )
    return "check that every block runs exactly once in forward, in order, on the previous block's output"


def _plan_calls_hint(data: dict, plan: CheckpointPlan) -> str:
    fwd, total = data.get("forward_calls"), data.get("calls")
    if not (isinstance(fwd, list) and isinstance(total, list) and len(total) == cc.N_BLOCKS):
        return ""
    if not any(isinstance(c, int) and c > 0 for c in total):
        return ""  # blocks called through .forward: hooks cannot see them
    skipped = [i for i in plan.blocks if total[i] == fwd[i]]
    extra = [i for i in range(cc.N_BLOCKS) if i not in plan.blocks and total[i] != fwd[i]]
    if skipped:
        return (
            f"the gradients are right, but blocks {skipped} of the plan ran only in forward: they were not "
            "checkpointed (a checkpointed block runs again in backward)"
        )
    if extra:
        return f"the gradients are right, but blocks {extra} are not in the plan and were recomputed in backward"
    return ""


def _forward(ctx: Context, seed: int, plan: CheckpointPlan, shape: tuple[int, int]) -> str:
    """One learner forward + backward in the worker on a batch of ``shape``, its output and
    gradients compared with this process's plain stack; returns what passed."""
    rng_seed = ctx.rng.randrange(1 << 20)
    shown = f"checkpointed_forward(blocks, x, {plan.to_data()})"
    r = ctx.session.call(
        "forward",
        CALL_SECONDS,
        seed=seed,
        rng_seed=rng_seed,
        plan=plan.to_data(),
        batch=shape[0],
        seq=shape[1],
    )
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"{shown} {r.failure}")
    expect(len(r.blobs) == 2, "the worker's answer was malformed")
    out = received_tensor(r.data.get("out"), r.blobs[0], "output")
    got = received_tensor(r.data.get("grads"), r.blobs[1], "gradient")
    want_out, want = reference_grads(seed, rng_seed, shape=shape)
    expect(
        got.shape == want.shape and out.shape == want_out.shape, "the worker's answer was malformed"
    )
    err = _rel(got, want)
    if not err <= TOLERANCE:
        why = _diagnose(r.data, got, seed, rng_seed, plan, shape)
        raise CheckFailed(
            f"{shown}: the gradients differ from the plain stack's by {err:.1%}: {why}."
        )
    expect(
        _rel(out, want_out) <= TOLERANCE,
        f"{shown}: the gradients are right but the output differs from "
        "the plain stack's: return the last block's output",
    )
    hint = _plan_calls_hint(r.data, plan)
    expect(not hint, f"{shown}: {hint}")
    return f"{plan.describe(cc.N_BLOCKS)}: gradients equal to the plain stack's (relative error {err:.0e})"


def _check_released(ctx: Context, seed: int, plans: list[CheckpointPlan]) -> None:
    """Checkpointing judged by its effect, not by events learner code can produce (a counter of
    forward calls is satisfied by re-running a block whose activations were kept): each graded plan
    once more, on a batch drawn here so large that activations dominate; the worker's memory is the
    kernel's peak charge of its cgroup since before any learner cell ran
    (`ProbeSession.memory_growth`), which no sandboxed process can lower. Only the every-block plan
    was measured once, so a forward honest there alone kept every other plan's activations (issue
    52): now every plan is, in the order of what it may keep, each held to the peak so far (a peak
    only rises). The plain stack's activation bytes and each plan's are measured here, on this
    process's own stack."""
    shape = cc.memory_shape(ctx.rng)
    growth = getattr(ctx.session, "memory_growth", lambda: None)
    # every saved tensor of a block is a fixed number of bytes per token (27,840 plain, 1,536 with
    # every block checkpointed, at any batch and length): measured on the small batch and scaled
    stack, (x, _) = cc.build_stack(seed), cc.draw_batch(seed + 1)
    per_token = shape[0] * shape[1] / (cc.BATCH * cc.SEQ)
    plain = round(plan_bytes(stack, x, CheckpointPlan()) * per_token)
    measured = sorted((round(plan_bytes(stack, x, p) * per_token), p) for p in plans)
    for kept, plan in measured:
        passed = _forward(ctx, seed, plan, shape)
        grew = growth()
        expect(
            grew is not None,
            f"{plan.describe(cc.N_BLOCKS)}: the grader could not read the worker's memory, "
            "so it cannot see whether the activations were released",
        )
        limit = kept + OVERHEAD * plain + RELEASED * (plain - kept)
        mib = f"{grew / 2**20:.0f} MiB at its peak; the plain stack keeps {plain / 2**20:.0f} MiB of activations for "
        mib += f"backward, this plan {kept / 2**20:.0f} MiB (batch {shape[0]}x{shape[1]}, measured by the grader)"
        expect(
            grew <= limit,
            f"{plan.describe(cc.N_BLOCKS)}: the gradients are right, but the activations were not "
            f"released: the worker's memory grew by {mib}. A checkpointed block keeps only its "
            "input (and, in a selective plan, what it saves) and torch.utils.checkpoint recomputes "
            "the rest in backward, one block at a time; running a block again whose activations "
            "you kept saves no memory",
        )
        ctx.ok(
            f"{passed}; activations released: the worker's memory grew by {mib} "
            f"({(grew - kept) / plain:.2f} of the plain stack's above the plan's, limit {(limit - kept) / plain:.2f})"
        )


def check_gradients(ctx: Context) -> None:
    _refuse_reference(ctx)
    seed = ctx.rng.randrange(1 << 20)
    ops = cc.ops_in(cc.build_stack(seed), cc.draw_batch(seed + 1)[0])
    plans = _forward_plans(ctx, ops)
    for plan in plans:
        ctx.ok(_forward(ctx, seed, plan, (cc.BATCH, cc.SEQ)))
    _check_released(ctx, seed, [*plans, CheckpointPlan.everything(cc.N_BLOCKS)])


CELL_CHECKS = {
    "test_gradients": check_gradients,
    "test_budget": check_budget,
    "test_speed": check_speed,
    "test_least_recompute": check_least_recompute,
    "test_quiz": quiz_check("lesson5", ("q1", "q2", "q3", "q4")),
}
NAMES = ("checkpointed_forward", "plan_checkpointing")


ASSIGNMENT = Assignment(
    "lesson5",
    "plan_checkpointing",
    SETUP_SOURCE,
    CELL_CHECKS,
    timeout_s=180,
    names=NAMES,
    cpu_only=True,
)
