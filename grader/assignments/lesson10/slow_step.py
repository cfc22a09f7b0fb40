"""Lesson 10 (b): the slow training step the learner fixes, and the task both steps train on.

**What it does.** ``slow_step(model, inputs, targets, lr, weight_decay)`` is one step of SGD with
weight decay on the batch's mean cross-entropy, written the slow way on purpose: one sample at a
time, each sample copied to a Python list and back into a new tensor, ``.item()`` per sample, the
gradient summed in float64, and a Python loop of small operators per parameter. The notebook shows
this very function; the learner's ``fast_step`` must make the same update faster. ``Task`` draws,
from one seed, the model's initial weights and the batches (a random teacher labels Gaussian
inputs), so the parent and a worker build the same run from a seed alone. ``run`` trains ``steps``
steps with a given step function and returns the losses and the final weights.

**When to use it.** Imported by both sides of lesson 10 (b): :mod:`probes` (the worker runs the
learner's step, or this one as the timed baseline) and :mod:`step_checks` (the parent runs this one
for its own reference).

**Expected gain.** On one CPU thread the batched step is ~15-25x faster (the calibration in
grader/assignments/lesson10/README.md); the per-sample loop is most of it.

**Pitfalls.** Everything is drawn from ``torch.Generator`` objects, never the global RNG, so a
learner's code that draws random numbers cannot shift the data of the next step. The model's
activations are GELU, smooth everywhere, on purpose: with ReLU, a pre-activation within rounding
of zero takes the other branch in a correct batched step than in the original, that sample's
gradient through the unit switches on or off, and the gap compounds over the steps. 1 task in
1,000 ended 5.4e-3 of the update away after 8 steps, above ``step_checks.TOLERANCE``, so ~1% of
gradings (8 tasks each) failed a correct step; with GELU the same 1,000 tasks end at most 9.2e-7
apart (``benchmarks/lesson10_drift.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FEATURES, HIDDEN, CLASSES = 32, 64, 10


def slow_step(model, inputs, targets, lr, weight_decay):
    """One SGD step with weight decay on the mean cross-entropy of the batch; returns the mean loss."""
    params = list(model.parameters())
    grads = [torch.zeros(p.shape, dtype=torch.float64) for p in params]  # float64 where float32 does
    total = 0.0
    for i in range(len(inputs)):  # one sample at a time: hundreds of tiny operators per step
        x = torch.tensor(inputs[i].tolist()).unsqueeze(0)  # to a Python list and back: a new tensor
        y = torch.tensor([int(targets[i].item())])  # .item(): a host read per sample
        loss = F.cross_entropy(model(x), y)
        for g, sample_grad in zip(grads, torch.autograd.grad(loss, params), strict=True):
            g += sample_grad.double()
        total += loss.item()  # and another
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):  # a Python loop over the parameters, small operators each
            update = (g / len(inputs)).float() + weight_decay * p
            p -= lr * update
    return total / len(inputs)


class Task:
    """A seed's run: the model's initial weights and ``steps`` batches of ``batch`` samples."""

    def __init__(self, seed: int, batch: int, steps: int):
        self.seed, self.batch, self.steps = seed, batch, steps
        g = torch.Generator().manual_seed(seed)
        self.init = {name: torch.randn(p.shape, generator=g) * (0.5 if name.endswith("bias") else 1.5 / p.shape[-1] ** 0.5)
                     for name, p in _shape_model().named_parameters()}  # fmt: skip
        teacher = torch.randn(FEATURES, CLASSES, generator=g)
        self.batches = []
        for _ in range(steps):
            x = torch.randn(batch, FEATURES, generator=g)
            self.batches.append((x, (x @ teacher).argmax(1)))

    def model(self) -> nn.Module:
        """A fresh model holding the task's initial weights."""
        model = _shape_model()
        model.load_state_dict(self.init)
        return model


def _shape_model() -> nn.Module:
    # GELU, not ReLU: a kink at zero lets rounding pick a gradient (see Pitfalls)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN), nn.GELU(),
                         nn.Linear(HIDDEN, CLASSES))  # fmt: skip


def run(step, task: Task, lr: float, weight_decay: float) -> tuple[nn.Module, list]:
    """``step`` applied to each of the task's batches, from its initial weights: (model, losses).
    The batches are fresh copies each run, so a step that edits its inputs changes nothing after it."""
    model = task.model()
    losses = [step(model, x.clone(), y.clone(), lr, weight_decay) for x, y in task.batches]
    return model, losses


def flat(model: nn.Module) -> torch.Tensor:
    """Every parameter of the task's model, in order, as one float32 vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def numel() -> int:
    return sum(p.numel() for p in _shape_model().parameters())
