"""Lesson 4, the pieces the learner's worker runs: the token model, its optimizer and the batches.

Its own module because only this reaches the learner's worker; the references stay in
:mod:`.accum_checks`.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB, DIM = 32, 12
IGNORE = -100
LR = 0.5


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
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).clone()
            for p in model.parameters()
        ]
    )


class RecordingSGD(torch.optim.SGD):
    """Plain SGD that records the flat gradient it steps with (worker side)."""

    def __init__(self, params, lr: float = LR):
        self.recorded: list[torch.Tensor] = []
        super().__init__(params, lr=lr)

    def step(self, closure=None):
        grads = [
            (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).clone()
            for g in self.param_groups
            for p in g["params"]
        ]
        self.recorded.append(torch.cat(grads))
        return super().step(closure)


# torch patches an optimizer class's ``step`` (profiling hooks) when its first instance is made:
# do it at import, so the grader's worker does not mistake that patch for tampering.
RecordingSGD([torch.zeros(1, requires_grad=True)])


def tensors(micro_batches) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        (torch.tensor(x, dtype=torch.int64), torch.tensor(y, dtype=torch.int64))
        for x, y in micro_batches
    ]
