"""Lesson 5, parent side: the plain stack's output and gradients, the learner's answer to match.

``reference_grads`` runs the plain stack (or, to name a mistake, a stack checkpointed by hand)
on the grading's seeds. It lives apart from :mod:`.ckpt_checks` (which the learner's worker
imports) so that no worker can copy it (:mod:`grader.sandbox.learner_view`).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from effkit.checkpoint_plan import CheckpointPlan
from grader.assignments.lesson5.ckpt_checks import (
    BATCH,
    SEQ,
    build_stack,
    draw_batch,
    flat_grads,
    threads,
)


def reference_grads(
    seed: int,
    rng_seed: int,
    plan: CheckpointPlan | None = None,
    preserve_rng_state: bool = True,
    shape: tuple[int, int] = (BATCH, SEQ),
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, flat gradients) of the plain stack on a batch of ``shape``; with ``plan``:
    checkpointed by hand, for naming a mistake (``preserve_rng_state=False``: the recompute draws
    new dropout masks)."""
    stack = build_stack(seed)
    x, w = draw_batch(seed + 1, *shape)
    with threads(1):  # the worker runs one thread: same reduction order, same numbers
        torch.manual_seed(rng_seed)
        h = x
        for i, block in enumerate(stack):
            if plan is not None and i in plan.blocks:
                h = checkpoint(block, h, use_reentrant=False, preserve_rng_state=preserve_rng_state)
            else:
                h = block(h)
        (h * w).sum().backward()
    return h.detach(), flat_grads(stack)[0]
