"""Lesson 11 (b): a per-rank memory budget, the task and the single-process reference only the parent runs.

A ~18M-parameter MLP drawn per grading (uneven blocks in two nested stages) trained with Adam on 2
ranks; ``BUDGET`` bytes per parameter sits below what any ZeRO-1 holds (parameters and gradients
replicated: 12) and above FSDP2 with one unit per block (8 plus the largest block gathered), so the
lesson's flat-``Sequential`` FSDP2 loop, which leaves both stages to the root unit, does not fit
(calibration in the lesson's README). Each rank's worker fixes glibc's mmap threshold so the cgroup
charge follows live tensors, not past peaks.
"""

from __future__ import annotations

import random

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

WORLD = 2
D, WIDTH, CLASSES = 32, 512, 4
BLOCKS = (12, 16)  # drawn number of blocks, each Linear(WIDTH, h) -> Linear(h, WIDTH)
HIDDEN = range(
    384, 1792 + 1, 128
)  # each block's h, drawn: uneven blocks, the largest <= 11% of the model
HIDDEN_SUM = (16_384, 18_432)  # sum of the h's: ~17-19M parameters whatever the draw
STEPS, BATCH = 3, 16  # per rank; the global batch of a step is both ranks' micro-batch
CONFIG = {"steps": STEPS, "lr": 1e-3}  # torch.optim.Adam(lr=...), its other defaults
BUDGET = 11.5  # bytes per parameter and rank, peak, as the kernel charges each rank's sandbox
TOL = 1e-5  # max |difference| of any weight: fp32 sharded vs one process ~1e-7; a wrong recipe >= 1e-3


def draw(rng: random.Random) -> dict:
    """One grading's architecture: the blocks' hidden widths and where the second stage starts
    (JSON-able: it travels to the ranks as a probe argument)."""
    while True:
        hidden = [rng.choice(HIDDEN) for _ in range(rng.randint(*BLOCKS))]
        if not HIDDEN_SUM[0] <= sum(hidden) <= HIDDEN_SUM[1]:
            continue
        n, total = len(hidden), sum(hidden)
        # a stage of 55% of the blocks' parameters or more: a unit per stage gathers >= 4.4 B per parameter
        splits = [
            k
            for k in range(n // 3, 2 * n // 3 + 1)
            if abs(sum(hidden[:k]) - total / 2) >= 0.05 * total
        ]
        if splits:
            return {"hidden": hidden, "split": rng.choice(splits)}


def model(seed: int, arch: dict) -> nn.Sequential:
    """Input layer, two stages (``nn.Sequential``) of blocks ``Linear -> ReLU -> Linear -> ReLU``,
    output layer: every tensor of a block is whole in one stage, and the larger stage holds 55% of
    the blocks' parameters or more."""
    torch.manual_seed(seed)
    blocks = [
        nn.Sequential(nn.Linear(WIDTH, h), nn.ReLU(), nn.Linear(h, WIDTH), nn.ReLU())
        for h in arch["hidden"]
    ]
    k = arch["split"]
    return nn.Sequential(
        nn.Linear(D, WIDTH),
        nn.ReLU(),
        nn.Sequential(*blocks[:k]),
        nn.Sequential(*blocks[k:]),
        nn.Linear(WIDTH, CLASSES),
    )


def shapes(arch: dict) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in model(0, arch).state_dict().items()}


def parameters(arch: dict) -> int:
    return sum(int(np.prod(s)) for s in shapes(arch).values())


def largest_block(arch: dict) -> float:
    """The largest block's share of the parameters: what FSDP2 with one unit per block gathers at most."""
    h = max(arch["hidden"])
    return (2 * WIDTH * h + h + WIDTH) / parameters(arch)


def batches(seed: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed * WORLD + rank)
    return [
        (torch.randn(BATCH, D, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g))
        for _ in range(STEPS)
    ]


def reference(init_seed: int, data_seed: int, arch: dict) -> dict[str, torch.Tensor]:
    """One process, the same initial weights, step ``k`` on every rank's ``k``-th micro-batch together."""
    net = model(init_seed, arch)
    opt = torch.optim.Adam(net.parameters(), lr=CONFIG["lr"])
    per_rank = [batches(data_seed, r) for r in range(WORLD)]
    for k in range(STEPS):
        x = torch.cat([b[k][0] for b in per_rank])
        y = torch.cat([b[k][1] for b in per_rank])
        F.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return net.state_dict()


def fingerprint(state: dict, seed: int, arch: dict, k: int = 4) -> list[float]:
    """``k`` bilinear forms ``u' W v`` per parameter (``u``, ``v`` unit Gaussian vectors drawn from
    ``seed``; a bias is ``u' b``): ``k`` numbers per tensor that move by about the RMS of any change
    to it (``TOL`` 1e-5: honest fp32 sharding moves them ~1e-7, a wrong recipe >= 1e-3), so the
    ranks need not send 70 MB of weights each while the kernel is still counting their memory.
    Computing the right numbers takes the right weights: only correct training gets there."""
    g, out = torch.Generator().manual_seed(seed), []
    for key, shape in shapes(arch).items():
        w = state[key].detach().to(torch.float64)
        w = w.reshape(shape[0], -1)
        for _ in range(k):
            u = torch.randn(shape[0], generator=g, dtype=torch.float64)
            v = torch.randn(w.shape[1], generator=g, dtype=torch.float64)
            out.append(float((u / u.norm()) @ w @ (v / v.norm())))
    return out
