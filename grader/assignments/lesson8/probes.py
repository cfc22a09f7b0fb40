"""Lesson 8, worker side: the learner's LoRA layer and injection on the grader's seeded layer and model.

The parent judges tensors against peft; names and counts only explain or deny.
"""

from __future__ import annotations

import json

import torch

from grader.assignments.lesson8 import lora_task as lt
from grader.kit.worker import probe_quiz, tensor_msg  # noqa: F401  (probe_quiz: the worker finds probes by name)


def _learner(worker, name: str):
    fn = worker.ns.get(name)
    if not callable(fn):
        raise NameError(f"your solution cells define no {name!r}")
    return fn


def _pack(named: dict[str, torch.Tensor]):
    meta, blobs = {}, []
    for key, t in named.items():
        meta[key], raw = tensor_msg(t.detach().float())
        blobs.append(raw)
    return meta, blobs


def _adapter(layer, name: str, shape: tuple[int, int]) -> torch.nn.Parameter:
    p = getattr(layer, name, None)
    if not isinstance(p, torch.nn.Parameter) or tuple(p.shape) != shape:
        got = tuple(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__
        raise TypeError(f"LoRALinear.{name} must be an nn.Parameter of shape {shape}, got {got}")
    return p


def probe_layer(worker, seed: int):
    cls = _learner(worker, "LoRALinear")
    base, x, w, r, alpha = lt.draw_layer(seed)
    layer = worker.watch(cls(base, r, alpha))
    with torch.no_grad():
        y0 = layer(x)
    a_param = _adapter(layer, "lora_A", (r, base.in_features))
    b_param = _adapter(layer, "lora_B", (base.out_features, r))
    a, b = lt.draw_adapters(seed, base.in_features, base.out_features, r)
    with torch.no_grad():
        a_param.copy_(a)
        b_param.copy_(b)
    y = layer(x)
    (y * w).sum().backward()
    named = dict(layer.named_parameters())
    trainable = {n: p.numel() for n, p in named.items() if p.requires_grad}
    got_grad = [n for n, p in named.items() if p.grad is not None and bool(p.grad.abs().sum() > 0)]
    zero = torch.zeros(1)
    grad_a = a_param.grad if a_param.grad is not None else zero
    grad_b = b_param.grad if b_param.grad is not None else zero
    merged = layer.merged()
    if not isinstance(merged, torch.nn.Linear):
        raise TypeError(
            f"LoRALinear.merged() must return an nn.Linear, got {type(merged).__name__}"
        )
    with torch.no_grad():
        y_merged = merged(x)
    bias = merged.bias if merged.bias is not None else zero
    meta, blobs = _pack(
        {
            "y0": y0,
            "y": y,
            "grad_a": grad_a,
            "grad_b": grad_b,
            "merged_w": merged.weight,
            "merged_b": bias,
            "y_merged": y_merged,
        }
    )
    return {
        "tensors": meta,
        "trainable": trainable,
        "got_grad": got_grad[:50],
        "r": r,
        "alpha": alpha,
    }, blobs


def probe_inject(worker, seed: int, targets: list[str], r: int, alpha: float):
    fn = _learner(worker, "inject_lora")
    model, ids = lt.tiny_bert(seed)
    out = fn(model, list(targets), r, alpha)
    model = out if isinstance(out, torch.nn.Module) else model
    worker.watch(model)
    with torch.no_grad():
        at_init = model(ids).last_hidden_state
    g = torch.Generator().manual_seed(seed + 3)
    for (
        name,
        p,
    ) in model.named_parameters():  # adapters away from zero, so gradients reach both A and B
        if "lora_" in name:
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    out = model(ids)  # the pooler too: a target such as "dense" adapts pooler.dense
    (out.last_hidden_state.pow(2).mean() + out.pooler_output.pow(2).mean()).backward()
    named = dict(model.named_parameters())
    trainable = {n: p.numel() for n, p in named.items() if p.requires_grad}
    got_grad = [n for n, p in named.items() if p.grad is not None and bool(p.grad.abs().sum() > 0)]
    meta, blobs = _pack({"at_init": at_init})
    return {
        "tensors": meta,
        "trainable": trainable,
        "got_grad": got_grad[:200],
        "borrowed": _borrowed(model, worker.ns.get("LoRALinear")),
    }, blobs


def _borrowed(model: torch.nn.Module, mine) -> list[str]:
    """Modules built by a library rather than the learner's own LoRALinear (the cell asks for plain
    PyTorch: a one-line ``get_peft_model`` adapts the same modules with the same counts)."""
    out = []
    for name, module in model.named_modules():
        if any(c.__module__.split(".")[0] == "peft" for c in type(module).__mro__):
            out.append(f"{name or 'the model'} ({type(module).__module__}.{type(module).__name__})")
        elif any(n.startswith("lora_") for n, _ in module.named_parameters(recurse=False)) and not (
            isinstance(mine, type) and isinstance(module, mine)
        ):
            out.append(f"{name} ({type(module).__name__}, not your LoRALinear)")
    return out[:5]


def probe_recipe(worker, budget: dict):
    """The learner's recipe for the parent's drawn ``budget``, as JSON (anything else: its type name)."""
    fn = _learner(worker, "lora_recipe")
    answer = fn(budget)
    try:
        plain = json.loads(json.dumps(answer, allow_nan=False))
    except (TypeError, ValueError):
        plain = {"not_json": type(answer).__name__}
    return {"recipe": plain}, []
