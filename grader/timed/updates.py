"""How one training chunk's weights changed against another's: the whole update and tensor by tensor.

Plain tensor arithmetic on committed states (dicts of tensors the parent parsed); the thresholds live
with the checks that use them (:mod:`grader.timed.replay`).
"""

from __future__ import annotations

import torch

# Tensors smaller than this are left to the whole update: biases and norms save a step nothing and
# move most under rounding.
TENSOR_MIN_NUMEL = 4096


def update(start: dict, end: dict) -> torch.Tensor:
    """The flat change of the trained parameters (floats; not BatchNorm's running statistics)."""
    keys = [k for k, v in start.items() if v.is_floating_point() and "running_" not in k]
    if any(k not in end or end[k].shape != start[k].shape for k in keys):
        raise ValueError("the committed weights do not fit the model")
    return torch.cat([(end[k].double() - start[k].double()).reshape(-1) for k in keys])


def untouched(start: dict, mine: dict, ref_start: dict, ref: dict) -> list[str]:
    """Trained tensors the baseline's chunk changed and the learner's left exactly as they were
    (frozen layers make a step cheaper; honest training never leaves a whole trained tensor still)."""
    return [
        k
        for k, v in start.items()
        if v.is_floating_point()
        and "running_" not in k
        and k in mine
        and torch.equal(mine[k], v)
        and not torch.equal(ref[k], ref_start[k])
    ]


def tensors_apart(start: dict, mine: dict, ref: dict) -> list[tuple[str, float, float]]:
    """(name, cosine, size ratio) of each trained tensor of ``TENSOR_MIN_NUMEL`` values or more that
    the reference update moved, the farthest from the reference first (least cosine, then size)."""
    out = []
    for k, v in start.items():
        if not v.is_floating_point() or "running_" in k or v.numel() < TENSOR_MIN_NUMEL:
            continue
        if k not in mine or k not in ref or mine[k].shape != v.shape or ref[k].shape != v.shape:
            raise ValueError("the committed weights do not fit the model")
        base = v.double()
        cos, ratio = compare(
            (mine[k].double() - base).reshape(-1), (ref[k].double() - base).reshape(-1)
        )
        if ratio != float("inf"):
            out.append((k, cos, ratio))
    return sorted(out, key=lambda t: (t[1], -abs(t[2] - 1)))


def tensors_differ(
    apart: list[tuple[str, float, float]], least: float, band: tuple[float, float]
) -> list[str]:
    """The tensors of :func:`tensors_apart` below cosine ``least`` or outside the size ``band``."""
    return [
        f"{k} (direction {cos:+.4f}, size x{ratio:.2f})"
        for k, cos, ratio in apart
        if not (cos >= least and band[0] <= ratio <= band[1])
    ]


def compare(mine: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(cosine, norm ratio) of the learner's update against a reference update."""
    n_mine, n_ref = float(mine.norm()), float(ref.norm())
    if n_ref == 0:
        return float("nan"), float("inf")
    cos = float(mine @ ref) / (n_mine * n_ref) if n_mine > 0 else 0.0
    return cos, n_mine / n_ref
