"""Lesson 4, worker side: run the learner's ``train_accumulated`` on the grader's micro-batches.

Returns raw parameters and recorded gradients only; the parent, which holds the reference, judges.
"""

from __future__ import annotations

import json

import torch

from grader.assignments.lesson4 import accum_task as ac
from grader.kit.worker import probe_quiz, tensor_msg  # noqa: F401  (probe_quiz: the worker finds probes by name)

MAX_STEPS = 32


def probe_train(worker, seed: int, micro_batches: list, accum_steps: int):
    fn = worker.ns.get("train_accumulated")
    if not callable(fn):
        raise NameError("your solution cells define no function 'train_accumulated'")
    model = worker.watch(ac.TokenModel(seed))
    optimizer = worker.watch(ac.RecordingSGD(model.parameters()))
    # Event order, not counts: a summed backward padded with zero backwards, or every forward of a
    # window before its backwards, gives the right gradients and counts while holding every
    # micro-batch's activations to the window's end, which accumulation exists to free. "F": a
    # forward that builds a graph (embed runs first in every forward); "B": a backward pass
    # reaching out.weight (a leaf's hook fires once per pass).
    events: list[str] = []
    model.embed.register_forward_hook(
        lambda module, args, out: events.append("F") if torch.is_grad_enabled() else None
    )
    model.out.weight.register_hook(lambda grad: events.append("B"))
    init_meta, init_raw = tensor_msg(ac.flat_params(model))
    fn(model, optimizer, ac.tensors(micro_batches), accum_steps)
    grads = [tensor_msg(g) for g in optimizer.recorded[:MAX_STEPS]]
    after_meta, after_raw = tensor_msg(ac.flat_params(model))
    msg = {
        "init": init_meta,
        "steps": len(optimizer.recorded),
        # capped: a window's misorder shows well within it, and a runaway loop cannot flood the pipe
        "events": "".join(events[: 4 * len(micro_batches) + 8]),
        "forwards": events.count("F"),
        "backwards": events.count("B"),
        "grads": [m for m, _ in grads],
        "after": after_meta,
    }
    return msg, [init_raw, *(raw for _, raw in grads), after_raw]


def probe_recipe(worker, micro_batch: int, base_batch: int, base_lr: float, budget_samples: int):
    """Part (b): the learner's ``choose_recipe`` answer, as plain JSON data (the parent validates it).

    Only JSON-able values cross: anything else is sent as its type name, which the parent refuses.
    """
    fn = worker.ns.get("choose_recipe")
    if not callable(fn):
        raise NameError("your solution cells define no function 'choose_recipe'")
    answer = fn(
        micro_batch=micro_batch,
        base_batch=base_batch,
        base_lr=base_lr,
        budget_samples=budget_samples,
    )
    try:
        plain = json.loads(json.dumps(answer, allow_nan=False))
    except (TypeError, ValueError):
        plain = {"not_json": type(answer).__name__}
    return {"recipe": plain}, []
