"""Learning-rate schedules and the linear scaling rule.

`warmup_cosine` and `one_cycle` return ``LambdaLR`` schedulers (linear warm-up, then cosine or linear decay)
that step once per optimizer step; `scale_lr` scales the LR with the batch size (linear, or ``"sqrt"`` for
Adam-family optimizers).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR


def scale_lr(base_lr: float, base_batch: int, batch: int, rule: str = "linear") -> float:
    """LR for ``batch`` given a ``base_lr`` tuned at ``base_batch`` (linear or sqrt rule)."""
    if base_batch <= 0 or batch <= 0:
        raise ValueError(f"batch sizes must be positive, got base={base_batch}, new={batch}")
    ratio = batch / base_batch
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    raise ValueError(f"unknown scaling rule {rule!r}; use 'linear' or 'sqrt'")


def _check(total_steps: int, warmup_steps: int) -> None:
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_steps must be in [0, {total_steps}], got {warmup_steps}")


def _warmup_then(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int,
    decay: Callable[[float], float],
) -> LambdaLR:
    """Linear warm-up, then ``decay(progress)`` with progress going 0 -> 1 over the remaining steps."""
    _check(total_steps, warmup_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return decay(min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps)))

    return LambdaLR(optimizer, factor)


def warmup_cosine(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int, final_ratio: float = 0.0
) -> LambdaLR:
    """Linear warm-up to the optimizer's LR, then cosine decay to ``final_ratio`` of it."""
    return _warmup_then(
        optimizer,
        total_steps,
        warmup_steps,
        lambda progress: final_ratio + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * progress)),
    )


def one_cycle(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int, final_ratio: float = 0.0
) -> LambdaLR:
    """Linear warm-up then a linear ramp down to ``final_ratio`` (the airbench-style triangle)."""
    return _warmup_then(
        optimizer, total_steps, warmup_steps, lambda progress: 1.0 - (1.0 - final_ratio) * progress
    )
