"""Lesson 11 (b): a per-rank memory budget, the task and the single-process reference only the parent runs.

**What it does.** ``model(seed)`` builds a deep float32 MLP (``LAYERS`` hidden layers of ``WIDTH``:
18.9M parameters, so parameters, gradients and Adam's two moments dwarf everything else a rank
holds) and ``batches(seed, rank)`` each rank's ``STEPS`` micro-batches. The learner's
``train_sharded(rank, world_size, model, batches, config)`` trains it with Adam on 2 gloo ranks so
that every rank's weights equal one process's Adam over the global batch, within a per-rank memory
budget of ``BUDGET`` bytes per parameter. ``reference(init_seed, data_seed)`` is that one process;
``fingerprint`` what a rank sends back instead of 76 MB of weights.

**The arithmetic the budget rests on** (fp32, Adam, 2 ranks, per parameter and rank): DDP holds the
parameters (4 B), their gradients (4), its gradient buckets (a copy: 4) and Adam's moments (8) = 20;
``gradient_as_bucket_view=True`` drops the copy: 16; ZeRO-1 (``ZeroRedundancyOptimizer``) halves the
moments: 16, and 12 with the bucket view; FSDP2 (``fully_shard``) halves parameters, gradients and
moments: 8 plus one layer gathered at a time. Measured by the kernel, each rank a sandboxed worker
of its own (``python benchmarks/lesson11_budget_calibrate.py 1 2 3``, torch 2.15, AMD EPYC, 2
gloo ranks; the same on every seed): DDP 20.6, DDP + bucket view 16.6, ZeRO-1 16.7, ZeRO-1 + bucket
view 12.7, FSDP2 8.9. ``BUDGET`` = 14.5 sits halfway between what sharding needs and what only
replication spends: ~2 bytes per parameter (~38 MB) from either side.

**Pitfalls.** glibc keeps freed blocks above its *dynamic* mmap threshold in the heap, so process
memory once tracked the peak of every transient tensor ever allocated (FSDP2 read 29 B per
parameter); each rank's worker fixes the threshold (``mallopt``) before training, so freed tensors
go back to the kernel and the charge follows live tensors. A learner can raise the threshold again
only to their own cost.
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
    return [(torch.randn(BATCH, D, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g))
            for _ in range(STEPS)]  # fmt: skip


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
