"""Lesson 4, parent side: the grader's micro-batches, its float64 reference and the mistakes' gradients.

Parent only: the worker cannot see this module (:mod:`grader.sandbox.learner_view`), so it cannot
copy the reference; the ``wrong_*`` gradients let a failure name the mistake it sees.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from grader.assignments.lesson4.accum_task import (  # noqa: F401  (re-exported for the parent's checks)
    DIM,
    IGNORE,
    LR,
    VOCAB,
    RecordingSGD,
    TokenModel,
    flat_grads,
    flat_params,
    tensors,
)

MIN_GAP = 0.05  # the per-micro-batch mean must miss the reference by at least this much


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


def windows(items: list, accum_steps: int) -> list[list]:
    return [items[i : i + accum_steps] for i in range(0, len(items), accum_steps)]


def _grad(params: torch.Tensor, seed: int, losses) -> torch.Tensor:
    model = TokenModel(seed, torch.float64)
    torch.nn.utils.vector_to_parameters(params.double().clone(), model.parameters())
    sum(losses(model)).backward()
    return flat_grads(model)


def _loss_sum(model, x, y):
    return F.cross_entropy(
        model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="sum"
    )


def real_tokens(window) -> int:
    return sum(int((y != IGNORE).sum()) for _, y in window)


def reference_grad(params: torch.Tensor, seed: int, window) -> torch.Tensor:
    """Float64 gradient of the mean loss over every real token of ``window`` (one big batch)."""
    n = real_tokens(window)
    return _grad(params, seed, lambda m: [_loss_sum(m, x, y) / n for x, y in window])


def wrong_grads(
    params: torch.Tensor, seed: int, window, accum_steps: int
) -> dict[str, torch.Tensor]:
    """What the usual mistakes give on ``window``, by name (the names are the hints' keys)."""
    k = len(window)
    padded = sum(y.numel() for _, y in window)
    return {
        "micro_mean": _grad(
            params,
            seed,
            lambda m: [_loss_sum(m, x, y) / int((y != IGNORE).sum()) / k for x, y in window],
        ),
        "micro_mean_accum": _grad(
            params,
            seed,
            lambda m: [
                _loss_sum(m, x, y) / int((y != IGNORE).sum()) / accum_steps for x, y in window
            ],
        ),
        "padding": _grad(params, seed, lambda m: [_loss_sum(m, x, y) / padded for x, y in window]),
        "sum": _grad(params, seed, lambda m: [_loss_sum(m, x, y) for x, y in window]),
    }


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))
