"""The gradient noise scale: how big a batch still buys fewer steps (McCandlish et al. 2018).

`measure_noise_scale` estimates ``B_simple = tr(Sigma) / |G|^2`` from gradient norms at two batch sizes
(`noise_scale`, `grad_sq_norm`); `steps_to_target_model` is the paper's ``S(B) = S_min * (1 + B_noise / B)``.
The estimate is noisy (read it as an order of magnitude); measure BatchNorm models in ``eval()`` mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "NoiseScale",
    "grad_sq_norm",
    "measure_noise_scale",
    "noise_scale",
    "steps_to_target_model",
]


@dataclass(frozen=True)
class NoiseScale:
    b_simple: float  # tr(Sigma) / |G|^2, in samples
    true_grad_sq: float  # estimate of |G|^2
    trace_sigma: float  # estimate of tr(Sigma), per-sample gradient variance
    small: int  # the two batch sizes
    big: int


def noise_scale(small_sq: float, big_sq: float, small: int, big: int) -> NoiseScale:
    """``B_simple`` from mean squared gradient norms at batch sizes ``small`` < ``big``.

    E|G_B|^2 = |G|^2 + tr(Sigma) / B, so two batch sizes give two equations in |G|^2 and tr(Sigma).
    """
    if not 0 < small < big:
        raise ValueError(f"need 0 < small < big, got {small}, {big}")
    g2 = (big * big_sq - small * small_sq) / (big - small)
    trace = (small_sq - big_sq) / (1 / small - 1 / big)
    b = trace / g2 if g2 > 0 else float("inf")
    return NoiseScale(b, g2, trace, small, big)


def grad_sq_norm(model: nn.Module, loss_fn: Callable, x: torch.Tensor, y: torch.Tensor) -> float:
    """|mean-loss gradient|^2 of one batch (gradients are cleared before and after)."""
    model.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    total = sum(
        float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None
    )
    model.zero_grad(set_to_none=True)
    return total


def measure_noise_scale(
    model: nn.Module,
    loss_fn: Callable,
    small_batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    big_batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
) -> NoiseScale:
    """Average |G|^2 over several ``small_batches`` and ``big_batches`` (each of one size)."""
    small_sq, big_sq, sizes = [], [], set()
    for store, batches in ((small_sq, small_batches), (big_sq, big_batches)):
        for x, y in batches:
            sizes.add((store is big_sq, len(y)))
            store.append(grad_sq_norm(model, loss_fn, x, y))
    small = {n for is_big, n in sizes if not is_big}
    big = {n for is_big, n in sizes if is_big}
    if len(small) != 1 or len(big) != 1 or not small_sq or not big_sq:
        raise ValueError(f"expected batches of one small and one big size, got {sorted(sizes)}")
    return noise_scale(
        sum(small_sq) / len(small_sq), sum(big_sq) / len(big_sq), small.pop(), big.pop()
    )


def steps_to_target_model(batch: float, s_min: float, b_noise: float) -> float:
    """McCandlish et al.'s prediction of optimizer steps to a target at batch size ``batch``."""
    return s_min * (1 + b_noise / batch)


def steps_bracket(
    curve: list[tuple[int, float]], target: float, batch: int
) -> tuple[int, int] | None:
    """(fewest, most) steps to ``target`` that a run's evaluations allow, None if never reached.

    ``curve`` is [(samples seen, accuracy)] at each evaluation. A run is only *seen* reaching the
    target at an evaluation, so it got there after the evaluation before: a coarse grid turns
    "steps to target" into an interval, and a ratio of two runs into a wider one.
    """
    hit = next((n for n, acc in curve if acc >= target), None)
    if hit is None:
        return None
    before = [n for n, _ in curve if n < hit]
    return (before[-1] if before else 0) // batch + 1, hit // batch


def model_verdict(predicted: float, low: float, high: float) -> str:
    """McCandlish et al.'s predicted step cut against the cut a sweep allows, [low, high]."""
    if predicted < low:
        return (
            "the model predicted fewer saved steps than the sweep's lowest bound: it under-predicts"
        )
    if predicted > high:
        return (
            "the model predicted more saved steps than the sweep's highest bound: it over-predicts"
        )
    return "the prediction lies within what the evaluation grid allows: consistent"
