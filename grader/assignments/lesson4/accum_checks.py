"""Lesson 4's shared pieces: the token model, the grader's micro-batches and its float64 reference.

**What it does.** `TokenModel` is a small next-token model whose weights follow from a seed alone
(drawn from a private generator), so the grader's process and the learner's worker build the
same one. `make_micro_batches` draws micro-batches of uneven *real-token* counts (padding is
labelled ``IGNORE``), alternating long and short ones so that a per-micro-batch mean cannot
match the window mean by luck. `reference_grad` is the gradient of the mean token loss over a
whole window in float64 — the big batch the accumulation must reproduce — and the
``wrong_*`` functions compute what the usual mistakes produce, so a failed check can name the
mistake it sees. `RecordingSGD` (worker side) records the gradient each time it steps.

**When to use it.** By :mod:`grader.assignments.lesson4.probes` (worker) and :mod:`grader.assignments.lesson4.checks` (parent).

**Expected gain.** A correct accumulation matches to ~1e-7; each mistake misses by >= 5%.

**Pitfalls.** The worker's recorded gradients are claims: the parent only compares them with the
references it computes itself, along its own float64 trajectory.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM = 32, 12
IGNORE = -100
LR = 0.5
MIN_GAP = 0.05  # the per-micro-batch mean must miss the reference by at least this much


class TokenModel(nn.Module):
    """tokens (rows, length) -> logits (rows, length, VOCAB); weights from ``seed`` alone."""

    def __init__(self, seed: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.hidden = nn.Linear(DIM, DIM)
        self.out = nn.Linear(DIM, VOCAB)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        self.to(dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(self.embed(tokens))))


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).clone()
                      for p in model.parameters()])  # fmt: skip


class RecordingSGD(torch.optim.SGD):
    """Plain SGD that records the flat gradient it steps with (worker side)."""

    def __init__(self, params, lr: float = LR):
        self.recorded: list[torch.Tensor] = []
        super().__init__(params, lr=lr)

    def step(self, closure=None):
        grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).clone()
                 for g in self.param_groups for p in g["params"]]  # fmt: skip
        self.recorded.append(torch.cat(grads))
        return super().step(closure)


# torch patches an optimizer class's ``step`` (profiling hooks) when its first instance is made:
# do it at import, so the grader's worker does not mistake that patch for tampering.
RecordingSGD([torch.zeros(1, requires_grad=True)])


def make_micro_batches(rng: random.Random, count: int) -> list[tuple[list, list]]:
    """``count`` micro-batches (token ids, labels) as plain lists; real-token counts differ several-fold."""
    out = []
    for i in range(count):
        rows, length = rng.randint(2, 4), rng.randint(8, 14)
        long = i % 2 == 0
        x = [[rng.randrange(VOCAB) for _ in range(length)] for _ in range(rows)]
        y = [[rng.randrange(VOCAB) for _ in range(length)] for _ in range(rows)]
        for row in y:
            real = rng.randint(length - 3, length) if long else rng.randint(1, 3)
            row[real:] = [IGNORE] * (length - real)
        out.append((x, y))
    return out


def tensors(micro_batches) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.tensor(x, dtype=torch.int64), torch.tensor(y, dtype=torch.int64)) for x, y in micro_batches]


def windows(items: list, accum_steps: int) -> list[list]:
    return [items[i : i + accum_steps] for i in range(0, len(items), accum_steps)]


def _grad(params: torch.Tensor, seed: int, losses) -> torch.Tensor:
    model = TokenModel(seed, torch.float64)
    torch.nn.utils.vector_to_parameters(params.double().clone(), model.parameters())
    sum(losses(model)).backward()
    return flat_grads(model)


def _loss_sum(model, x, y):
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="sum")


def real_tokens(window) -> int:
    return sum(int((y != IGNORE).sum()) for _, y in window)


def reference_grad(params: torch.Tensor, seed: int, window) -> torch.Tensor:
    """Float64 gradient of the mean loss over every real token of ``window`` (one big batch)."""
    n = real_tokens(window)
    return _grad(params, seed, lambda m: [_loss_sum(m, x, y) / n for x, y in window])


def wrong_grads(params: torch.Tensor, seed: int, window, accum_steps: int) -> dict[str, torch.Tensor]:
    """What the usual mistakes give on ``window``, by name (the names are the hints' keys)."""
    k = len(window)
    padded = sum(y.numel() for _, y in window)
    return {
        "micro_mean": _grad(params, seed, lambda m: [_loss_sum(m, x, y) / int((y != IGNORE).sum()) / k
                                                     for x, y in window]),  # fmt: skip
        "micro_mean_accum": _grad(params, seed, lambda m: [_loss_sum(m, x, y) / int((y != IGNORE).sum())
                                                           / accum_steps for x, y in window]),  # fmt: skip
        "padding": _grad(params, seed, lambda m: [_loss_sum(m, x, y) / padded for x, y in window]),
        "sum": _grad(params, seed, lambda m: [_loss_sum(m, x, y) for x, y in window]),
    }


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))
