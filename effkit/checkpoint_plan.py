"""Checkpointing plans: which blocks to checkpoint and what to keep inside them, as plain data.

A `CheckpointPlan` (JSON: ``{"blocks": [1, 3], "save": ["addmm", "mm"]}``) names the blocks of a stack to
checkpoint and the ops they keep; `apply_plan` applies it, `plan_bytes` measures what a forward keeps under
it (on a copy), and `plan_for_budget` greedily finds the fewest blocks that fit a byte budget, assuming
every block costs the same to recompute.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from effkit.act_checkpoint import checkpoint_modules, saved_activation_bytes, uncheckpoint_modules

__all__ = [
    "CheckpointPlan",
    "PlanError",
    "apply_plan",
    "plan_bytes",
    "plan_for_budget",
    "run_blocks",
]

MAX_SAVE_OPS = 32


class PlanError(ValueError):
    """A plan that cannot be applied; the message says why."""


@dataclass(frozen=True)
class CheckpointPlan:
    blocks: tuple[int, ...] = ()  # indices of the blocks to checkpoint, sorted, no repeats
    save: tuple[str, ...] | None = None  # selective: ATen op names kept; None: recompute all

    @classmethod
    def everything(cls, n_blocks: int) -> CheckpointPlan:
        return cls(tuple(range(n_blocks)))

    @classmethod
    def from_data(
        cls, data: object, n_blocks: int, allowed_ops: frozenset[str] | None = None
    ) -> CheckpointPlan:
        """Validate plain data (e.g. parsed JSON) into a plan for a stack of ``n_blocks``."""
        if not isinstance(data, dict) or not set(data) <= {"blocks", "save"}:
            raise PlanError(
                f'a plan is a dict {{"blocks": [...], "save": None or [...]}}, got {data!r:.120}'
            )
        blocks = data.get("blocks", [])
        if not isinstance(blocks, list | tuple) or not all(type(i) is int for i in blocks):
            raise PlanError(f'"blocks" must be a list of block indices (ints), got {blocks!r:.120}')
        bad = [i for i in blocks if not 0 <= i < n_blocks]
        if bad:
            raise PlanError(f'"blocks" names {bad[:5]}, but the stack has blocks 0..{n_blocks - 1}')
        save = data.get("save")
        if save is not None:
            if not isinstance(save, list | tuple) or not all(isinstance(op, str) for op in save):
                raise PlanError(
                    f'"save" must be None or a list of op names (str), got {save!r:.120}'
                )
            if len(save) > MAX_SAVE_OPS:
                raise PlanError(f'"save" lists {len(save)} ops; at most {MAX_SAVE_OPS}')
            unknown = sorted(set(save) - allowed_ops) if allowed_ops is not None else []
            if unknown:
                raise PlanError(
                    f'"save" names ops this stack never runs: {unknown[:5]}; '
                    f"its ops: {sorted(allowed_ops)}"
                )
            save = tuple(sorted(set(save)))
        return cls(tuple(sorted(set(blocks))), save)

    def to_data(self) -> dict:
        return {"blocks": list(self.blocks), "save": None if self.save is None else list(self.save)}

    def describe(self, n_blocks: int) -> str:
        if not self.blocks:
            return "no block checkpointed"
        which = "every block" if len(self.blocks) == n_blocks else f"blocks {list(self.blocks)}"
        kept = (
            "recomputed whole"
            if self.save is None
            else f"keeping {', '.join(self.save) or 'nothing'}"
        )
        return f"{which} of {n_blocks} checkpointed, {kept}"


def run_blocks(blocks: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """The stack's forward: each block in order."""
    for block in blocks:
        x = block(x)
    return x


def apply_plan(blocks: nn.Module, plan: CheckpointPlan) -> nn.Module:
    """Checkpoint ``blocks[i]`` for every ``i`` in the plan (undoing any earlier plan first)."""
    uncheckpoint_modules(blocks)
    if plan.blocks:
        chosen = {str(i) for i in plan.blocks}
        checkpoint_modules(blocks, lambda name, _m: name in chosen, save_ops=plan.save)
    return blocks


def plan_bytes(blocks: nn.Module, x: torch.Tensor, plan: CheckpointPlan) -> int:
    """Bytes one forward of ``x`` through a copy of ``blocks`` under ``plan`` keeps for backward."""
    stack = apply_plan(copy.deepcopy(blocks), plan)
    return saved_activation_bytes(lambda: run_blocks(stack, x).sum())


def plan_for_budget(
    blocks: nn.Module, x: torch.Tensor, budget_bytes: int, save: Sequence[str] | None = None
) -> CheckpointPlan:
    """The plan with the fewest checkpointed blocks whose measured bytes fit ``budget_bytes``.

    Greedy: blocks sorted by the bytes checkpointing each one alone saves, most first; blocks
    are added until the measured total fits. Raises `PlanError` when even every block does not.
    """
    n = len(blocks)
    save_t = None if save is None else tuple(save)
    plain = plan_bytes(blocks, x, CheckpointPlan())
    if plain <= budget_bytes:
        return CheckpointPlan((), save_t)
    gain = {i: plain - plan_bytes(blocks, x, CheckpointPlan((i,), save_t)) for i in range(n)}
    order = sorted(range(n), key=lambda i: -gain[i])
    for k in range(1, n + 1):
        plan = CheckpointPlan(tuple(sorted(order[:k])), save_t)
        if plan_bytes(blocks, x, plan) <= budget_bytes:
            return plan
    raise PlanError(
        f"even with every block checkpointed the forward keeps more than {budget_bytes:,} bytes"
    )
