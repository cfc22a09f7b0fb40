"""Lesson 11 (b): a per-rank memory budget, the task and the single-process reference only the parent runs.

An 18.9M-parameter MLP trained with Adam on 2 ranks; ``BUDGET`` bytes per parameter sits between
what sharding (ZeRO-1 + bucket view, FSDP2) needs and what replication spends (calibration in
benchmarks/results/grader-code-notes.md). Each rank's worker fixes glibc's mmap threshold so the
cgroup charge follows live tensors, not past peaks.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

WORLD = 2
D, WIDTH, LAYERS, CLASSES = 32, 768, 32, 4
STEPS, BATCH = 3, 16  # per rank; the global batch of a step is both ranks' micro-batch
CONFIG = {"steps": STEPS, "lr": 1e-3}  # torch.optim.Adam(lr=...), its other defaults
BUDGET = 14.5  # bytes per parameter and rank, peak, as the kernel charges each rank's sandbox
TOL = 1e-5  # max |difference| of any weight: fp32 sharded vs one process ~1e-7; a wrong recipe >= 1e-3


def model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(D, WIDTH), nn.ReLU()]
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, CLASSES))


def shapes() -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in model(0).state_dict().items()}


def parameters() -> int:
    return sum(int(np.prod(s)) for s in shapes().values())


def batches(seed: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed * WORLD + rank)
    return [
        (torch.randn(BATCH, D, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g))
        for _ in range(STEPS)
    ]


def reference(init_seed: int, data_seed: int) -> dict[str, torch.Tensor]:
    """One process, the same initial weights, step ``k`` on every rank's ``k``-th micro-batch together."""
    net = model(init_seed)
    opt = torch.optim.Adam(net.parameters(), lr=CONFIG["lr"])
    per_rank = [batches(data_seed, r) for r in range(WORLD)]
    for k in range(STEPS):
        x = torch.cat([b[k][0] for b in per_rank])
        y = torch.cat([b[k][1] for b in per_rank])
        F.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return net.state_dict()


def fingerprint(state: dict, seed: int, k: int = 4) -> list[float]:
    """``k`` bilinear forms ``u' W v`` per parameter (``u``, ``v`` unit Gaussian vectors drawn from
    ``seed``; a bias is ``u' b``): 66 x ``k`` numbers that move by about the RMS of any change to a
    tensor (``TOL`` 1e-5: honest fp32 sharding moves them ~1e-7, a wrong recipe >= 1e-3), so the
    ranks need not send 76 MB of weights each while the kernel is still counting their memory.
    Computing the right numbers takes the right weights: only correct training gets there."""
    g, out = torch.Generator().manual_seed(seed), []
    for key, shape in shapes().items():
        w = state[key].detach().to(torch.float64)
        w = w.reshape(shape[0], -1)
        for _ in range(k):
            u = torch.randn(shape[0], generator=g, dtype=torch.float64)
            v = torch.randn(w.shape[1], generator=g, dtype=torch.float64)
            out.append(float((u / u.norm()) @ w @ (v / v.norm())))
    return out
