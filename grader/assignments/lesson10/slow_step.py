"""Lesson 10 (b): the slow training step the learner fixes, and the task both steps train on.

``slow_step`` is SGD with weight decay written the slow way on purpose (the notebook shows it);
``Task`` draws weights and batches from one seed so parent and worker build the same run.
Everything uses private ``torch.Generator`` objects, and the model uses GELU, not ReLU, so a
correct batched step cannot drift past ``step_checks.TOLERANCE`` at a ReLU kink.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FEATURES, HIDDEN, CLASSES = 32, 64, 10


def slow_step(model, inputs, targets, lr, weight_decay):
    """One SGD step with weight decay on the mean cross-entropy of the batch; returns the mean loss."""
    params = list(model.parameters())
    # float64 where float32 would do
    grads = [torch.zeros(p.shape, dtype=torch.float64) for p in params]
    total = 0.0
    for i in range(len(inputs)):  # one sample at a time: hundreds of tiny operators per step
        x = torch.tensor(inputs[i].tolist()).unsqueeze(0)  # to a Python list and back: a new tensor
        y = torch.tensor([int(targets[i].item())])  # .item(): a host read per sample
        loss = F.cross_entropy(model(x), y)
        for g, sample_grad in zip(grads, torch.autograd.grad(loss, params), strict=True):
            g += sample_grad.double()
        total += loss.item()  # and another
    with torch.no_grad():
        # a Python loop over the parameters, small operators each
        for p, g in zip(params, grads, strict=True):
            update = (g / len(inputs)).float() + weight_decay * p
            p -= lr * update
    return total / len(inputs)


class Task:
    """A seed's run: the model's initial weights and ``steps`` batches of ``batch`` samples."""

    def __init__(self, seed: int, batch: int, steps: int):
        self.seed, self.batch, self.steps = seed, batch, steps
        g = torch.Generator().manual_seed(seed)
        self.init = {
            name: torch.randn(p.shape, generator=g)
            * (0.5 if name.endswith("bias") else 1.5 / p.shape[-1] ** 0.5)
            for name, p in _shape_model().named_parameters()
        }
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
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.GELU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.GELU(),
        nn.Linear(HIDDEN, CLASSES),
    )


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
