"""Lesson 11: the grader's data-parallel task (data, model, recipe), shared by the ranks and the parent.

float64 throughout, so DDP's averaged gradients and the one-process reference agree far inside
``TOL``. Rank ``r`` starts from ``model(init_seed + r)`` on purpose (DDP broadcasts rank 0's).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

WORLD = 2
# 2048 hidden units: 26,628 float64 parameters, 213 KB a gradient all-reduce through the relay
N, D, HIDDEN, CLASSES = 128, 8, 2048, 4
# 8 micro-batches per rank and epoch in windows of 3: 3, 3 and a shorter last one of 2, which must
# step too (the lesson's loop, stepping only on full windows, carries it into the next epoch)
CONFIG = {"epochs": 2, "batch_size": 8, "accumulation": 3, "lr": 0.05, "momentum": 0.9}
RANK_SECONDS = (
    40.0  # gloo's timeout in a rank; the parent waits a little longer for each rank's call
)
TOL = 1e-8  # max |difference| of any weight; float64 DDP vs one process differ by ~1e-15


def per_rank_samples(config: dict = CONFIG) -> int:
    """Samples one rank serves in all epochs when every sample is seen once per epoch."""
    return config["epochs"] * N // WORLD


def windows(config: dict = CONFIG) -> list[int]:
    """Micro-batches per optimizer step, in order: every epoch ``accumulation`` at a time, its last
    window shorter when they do not divide the epoch's micro-batches (every window steps)."""
    per_epoch, acc = N // WORLD // config["batch_size"], config["accumulation"]
    one = [acc] * (per_epoch // acc) + ([per_epoch % acc] if per_epoch % acc else [])
    return one * config["epochs"]


def optimizer_steps(config: dict = CONFIG) -> int:
    return len(windows(config))


def param_bytes() -> int:
    return 8 * sum(int(np.prod(s)) for s in shapes().values())


def data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=g, dtype=torch.float64)
    w = torch.randn(D, CLASSES, generator=g, dtype=torch.float64)
    y = (x @ w + 0.5 * torch.randn(N, CLASSES, generator=g, dtype=torch.float64)).argmax(1)
    return x, y


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, CLASSES)).double()


def shapes() -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model(0).state_dict().items()}


def to_bytes(state: dict) -> bytes:
    """The parameters in ``shapes()`` order as raw little-endian float64 (never a pickle)."""
    return b"".join(
        state[k].detach().to(torch.float64).contiguous().numpy().astype("<f8").tobytes()
        for k in shapes()
    )


def from_bytes(raw: bytes) -> dict[str, torch.Tensor] | None:
    """The state dict back from ``to_bytes``' layout, or None when the size is wrong."""
    sizes = {k: int(np.prod(s)) for k, s in shapes().items()}
    if len(raw) != 8 * sum(sizes.values()):
        return None
    flat, out, at = np.frombuffer(raw, dtype="<f8"), {}, 0
    for k, s in shapes().items():
        out[k] = torch.from_numpy(flat[at : at + sizes[k]].copy()).reshape(s)
        at += sizes[k]
    return out
