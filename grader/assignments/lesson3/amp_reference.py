"""Lesson 3, parent side: the step a correct fp32 implementation makes, for the probe's checks.

``reference_update`` is the float64 step (forward, backward, clip at ``max_grad_norm``, SGD) the
learner's ``amp_train_step`` must reproduce. It lives apart from :mod:`.amp_checks` (which the
learner's worker imports) so that no worker can copy it (:mod:`grader.sandbox.learner_view`).
"""

from __future__ import annotations

import torch

from grader.assignments.lesson3.amp_checks import LR, ProbeModel, flat_params


def reference_update(
    start: ProbeModel, batch: dict, max_grad_norm: float
) -> tuple[torch.Tensor, float]:
    """(parameter change, loss) of a correct float64 step from ``start``'s weights: clip, then SGD."""
    model = ProbeModel().double()
    model.load_state_dict(start.state_dict())
    before = flat_params(model)
    loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    return (flat_params(model) - before).float(), float(loss.detach())
