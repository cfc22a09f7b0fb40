"""Lesson 9, worker side: the learner's distillation loss on the grader's logits, and the recipe as JSON.

No reference or verdict here; the parent recomputes everything.
"""

from __future__ import annotations

import json

import torch

from grader.kit.worker import probe_quiz, tensor_msg  # noqa: F401  (probe_quiz: the worker finds probes by name)


def _learner(worker, name: str):
    fn = worker.ns.get(name)
    if not callable(fn):
        raise NameError(f"your solution cells define no function {name!r}")
    return fn


def probe_loss(worker, cases: list):
    fn = _learner(worker, "distillation_loss")
    metas, blobs = [], []
    for case in cases:
        student = torch.tensor(case["student"], dtype=torch.float64, requires_grad=True)
        teacher = torch.tensor(case["teacher"], dtype=torch.float64)
        labels = torch.tensor(case["labels"], dtype=torch.int64)
        loss = fn(student, teacher, labels, case["temperature"], case["alpha"])
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise TypeError(
                f"distillation_loss must return a scalar tensor (one number), got {got}"
            )
        if not loss.requires_grad:
            raise TypeError(
                "distillation_loss returned a tensor with no gradient: compute it from the student's "
                "logits with torch operations (no .item(), no .detach())"
            )
        (grad,) = torch.autograd.grad(loss.reshape(()), student)
        for t in (loss.detach().reshape(1), grad):
            meta, raw = tensor_msg(t.double())
            metas.append(meta)
            blobs.append(raw)
    return {"tensors": metas}, blobs


def probe_recipe(worker, constraints: dict):
    """The learner's recipe for the parent's drawn ``constraints``, as JSON (anything else: its type name)."""
    answer = _learner(worker, "distillation_recipe")(constraints)
    try:
        plain = json.loads(json.dumps(answer, allow_nan=False))
    except (TypeError, ValueError):
        plain = {"not_json": type(answer).__name__}
    return {"recipe": plain}, []
