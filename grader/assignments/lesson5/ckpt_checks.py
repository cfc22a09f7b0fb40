"""Lesson 5's shared pieces: the grader's transformer stack, its batches, references and timing.

Seeded so parent and worker build the same stack; the gradient answer lives in
:mod:`.ckpt_reference`, which the worker cannot see.
"""

from __future__ import annotations

import copy
import statistics
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from effkit.abtest import median_ci, median_ci_coverage
from effkit.checkpoint_plan import CheckpointPlan, apply_plan, run_blocks

N_BLOCKS, DIM, HEADS, DROPOUT = 6, 64, 4, 0.1
_clock = time.perf_counter  # captured at import (the parent's own clock)
BATCH, SEQ = 4, 128
# The memory step's batch (`memory_shape`): tokens drawn per grading so the plain stack keeps
# ~220-270 MiB of activations for backward, far above what a worker's load moves.
MEMORY_TOKENS, MEMORY_SEQS = (8192, 10240), (256, 512)


class Block(nn.Module):
    """Pre-norm transformer layer: causal self-attention, a 4x MLP, residuals, dropout."""

    def __init__(self, dim: int = DIM, heads: int = HEADS, dropout: float = DROPOUT):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(attn.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


def build_stack(seed: int, n_blocks: int = N_BLOCKS) -> nn.ModuleList:
    g = torch.Generator().manual_seed(seed)
    stack = nn.ModuleList(Block() for _ in range(n_blocks))
    with torch.no_grad():
        for name, p in stack.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return stack


def draw_batch(seed: int, batch: int = BATCH, seq: int = SEQ) -> tuple[torch.Tensor, torch.Tensor]:
    """(input embeddings, loss weights): the loss is ``(output * weights).sum()``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seq, DIM, generator=g), torch.randn(batch, seq, DIM, generator=g) / (
        batch * seq
    )


def memory_shape(rng) -> tuple[int, int]:
    """(batch, sequence) of the memory step, drawn per grading from the parent's ``rng``."""
    seq = rng.choice(MEMORY_SEQS)
    return rng.randint(*MEMORY_TOKENS) // seq, seq


def flat_grads(stack: nn.Module) -> tuple[torch.Tensor, list[str]]:
    """All gradients in one vector (zeros where missing), and the names of the missing ones."""
    missing = [n for n, p in stack.named_parameters() if p.grad is None]
    flat = torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
            for p in stack.parameters()
        ]
    )
    return flat, missing


@contextmanager
def threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _OpCensus(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def ops_in(stack: nn.Module, x: torch.Tensor) -> frozenset[str]:
    """ATen op names one forward of ``stack`` runs (what a selective plan may name)."""
    census = _OpCensus()
    with census:
        run_blocks(stack, x).sum()
    return frozenset(census.names)


def time_plans(
    stack: nn.Module,
    x: torch.Tensor,
    plans: dict[str, CheckpointPlan],
    rounds: int,
    steps: int,
    max_rounds: int | None = None,
    settled=None,
    time_cap_s: float | None = None,
    device: str = "cpu",
) -> dict[str, dict]:
    """Interleaved timing of forward + backward under each plan, in this process, on ``device``
    (the grading's device: on a CUDA machine the plans are timed on the GPU, synchronised).

    Each round runs every plan once (``steps`` steps), in an order that rotates and reverses from
    round to round; per round, each plan's time is divided by the first plan's (the baseline).
    Returns per plan: the median ratio baseline-time / plan-time (> 1: faster than the baseline),
    its order-statistic interval, the interval's real coverage, the median seconds per step and
    the rounds run. After ``rounds`` rounds, while ``settled(result)`` is false, another
    ``rounds`` are added, up to ``max_rounds`` or until ``time_cap_s`` seconds of timing have
    passed (a noisy machine buys more rounds, a quiet one none; the cap bounds a grading's time).
    """
    stacks = {name: apply_plan(build_copy(stack), plan).to(device) for name, plan in plans.items()}
    names = list(plans)
    x = x.to(device)
    # CUDA runs asynchronously: wait for the device before reading the clock, on both ends
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)

    def run(name: str) -> float:
        net = stacks[name]
        sync()
        t0 = _clock()
        for _ in range(steps):
            net.zero_grad(set_to_none=True)
            run_blocks(net, x).sum().backward()
        sync()
        return (_clock() - t0) / steps

    def summary() -> dict[str, dict]:
        out = {}
        for name in names:
            ratios = [b / s for b, s in zip(seconds[names[0]], seconds[name], strict=True)]
            low, high = median_ci(ratios)
            out[name] = {
                "ratio": statistics.median(ratios),
                "low": low,
                "high": high,
                "rounds": len(ratios),
                "coverage": median_ci_coverage(len(ratios)),
                "step_s": statistics.median(seconds[name]),
            }
        return out

    seconds: dict[str, list[float]] = {name: [] for name in names}
    with threads(1):  # on a CPU, one thread: a busy second core disturbs one timed thread far less
        for name in names:  # warm-up: allocator, first-call costs
            run(name)
        r, t_start = 0, _clock()
        while True:
            for _ in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order if r % 2 == 0 else reversed(order):
                    seconds[name].append(run(name))
                r += 1
            result = summary()
            out_of_time = time_cap_s is not None and _clock() - t_start > time_cap_s
            if (
                settled is None
                or settled(result)
                or out_of_time
                or r + rounds > (max_rounds or rounds)
            ):
                return result


def build_copy(stack: nn.Module) -> nn.Module:
    return copy.deepcopy(stack)
