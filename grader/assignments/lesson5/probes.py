"""Lesson 5, worker side: the learner's checkpointed forward and planner on the grader's stack.

Everything returned is a claim; forward counts only explain a failure, never earn a point.
"""

from __future__ import annotations

import ctypes
import json
from functools import partial

import torch

from grader.assignments.lesson5 import ckpt_checks as cc
from grader.kit.worker import probe_quiz, tensor_msg  # noqa: F401  (probe_quiz: the worker finds probes by name)


def _warm_up_checkpoint() -> None:
    """The first ``checkpoint`` call imports ``torch._dynamo``; on torch 2.6 that import writes a
    generated module into a temporary folder, which the worker's audit would blame on the
    learner's code (their call was on the stack). The grader makes the first calls itself, plain
    and selective, here at import: before the audit hook, before any learner code."""
    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.PREFER_RECOMPUTE

    x = torch.ones(2, requires_grad=True)
    selective = partial(create_selective_checkpoint_contexts, policy)
    checkpoint(torch.sin, x, use_reentrant=False).sum().backward()
    checkpoint(torch.sin, x, use_reentrant=False, context_fn=selective).sum().backward()


_warm_up_checkpoint()


def _return_freed_memory() -> None:
    """Blocks of 512 KiB and more straight from and back to the kernel (glibc: a fixed
    ``M_MMAP_THRESHOLD``, which also stops its dynamic raise), so the cgroup's peak follows the
    bytes live at once. With glibc's default the heap keeps freed activations: an honest
    checkpointed step peaked at 0.62 of the plain stack's activation bytes instead of 0.26-0.35
    (nearly all of the memory step's activations are 512 KiB or more). Calibration, not a defence:
    learner code may change it back, which can only raise its own peak. Set at import, before the
    parent reads the worker's memory zero, before any learner code."""
    try:  # the process's own symbols (dlopen(NULL)): libc's, with no ldconfig subprocess
        ctypes.CDLL(None).mallopt(-3, 512 << 10)  # -3: M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass  # not glibc: the peak includes freed blocks, a looser figure for honest code


_return_freed_memory()


def _learner(worker, name: str):
    fn = worker.ns.get(name)
    if not callable(fn):
        raise NameError(f"your solution cells define no function {name!r}")
    return fn


def probe_forward(
    worker, seed: int, rng_seed: int, plan: dict, batch: int = cc.BATCH, seq: int = cc.SEQ
):
    fn = _learner(worker, "checkpointed_forward")
    stack = worker.watch(cc.build_stack(seed))
    x, w = cc.draw_batch(seed + 1, int(batch), int(seq))
    calls = [0] * len(stack)
    for i, block in enumerate(stack):
        block.register_forward_pre_hook(lambda _m, _a, i=i: calls.__setitem__(i, calls[i] + 1))
    torch.manual_seed(rng_seed)
    out = fn(stack, x, json.loads(json.dumps(plan)))  # a fresh copy: the parent's plan stays intact
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        raise TypeError(
            f"checkpointed_forward must return the stack's output, a tensor of shape {tuple(x.shape)}; "
            f"got {type(out).__name__} {tuple(getattr(out, 'shape', ()))}"
        )
    if not out.requires_grad:
        raise RuntimeError(
            "the output of checkpointed_forward does not require grad: no gradient can reach the "
            "blocks' parameters (use_reentrant=True with an input that does not require grad?)"
        )
    forward_calls = list(calls)
    (out * w).sum().backward()
    grads, missing = cc.flat_grads(stack)
    out_meta, out_raw = tensor_msg(out)
    grad_meta, grad_raw = tensor_msg(grads)
    msg = {
        "out": out_meta,
        "grads": grad_meta,
        "missing": missing[:50],
        "forward_calls": forward_calls,
        "calls": list(calls),
    }
    return msg, [out_raw, grad_raw]


def probe_plan(worker, seed: int, budget_bytes: int):
    fn = _learner(worker, "plan_checkpointing")
    stack = worker.watch(cc.build_stack(seed))
    x, _ = cc.draw_batch(seed + 1)
    plan = fn(stack, x, budget_bytes)
    try:
        text = json.dumps(plan)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"plan_checkpointing must return plain data (a dict of lists of ints and strings), "
            f"got {plan!r:.100} ({err})"
        ) from None
    if len(text) > 10_000:
        raise ValueError("the plan is too long (over 10,000 characters as JSON)")
    return {"plan": json.loads(text)}, []
