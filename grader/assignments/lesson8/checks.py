"""Lesson 8 - LoRA, graded out of the kernel: a layer and an injection against peft, a recipe trained here.

Tensors are compared with peft's numbers computed here; worker names and counts can only deny.
The recipe, for constraints drawn per grading, is trained and measured in ``recipe_checks``.
"""

from __future__ import annotations

import torch

from grader.assignments.lesson8 import lora_task as lt
from grader.assignments.lesson8.recipe_checks import check_recipe, validate  # noqa: F401  (validate: tests)
from grader.kit.assignment import Assignment
from grader.kit.checks import CheckFailed, Context, expect, quiz_check, received_tensor, stub_reason

TOLERANCE = 1e-5  # relative error against peft: the same arithmetic
CALL_SECONDS = 30
SETUP_SOURCE = """\
import torch
from torch import nn"""


def _tensors(r) -> dict[str, torch.Tensor]:
    meta = r.data.get("tensors")
    expect(
        isinstance(meta, dict) and len(meta) == len(r.blobs), "the worker's answer was malformed"
    )
    return {k: received_tensor(m, raw) for (k, m), raw in zip(meta.items(), r.blobs, strict=True)}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def _scale_mistake(seed: int, y: torch.Tensor) -> str:
    base, x, _, r, alpha = lt.draw_layer(seed)
    a, b = lt.draw_adapters(seed, base.in_features, base.out_features, r)
    with torch.no_grad():
        plain, delta = base(x), x @ a.T @ b.T
    for scale, name in ((alpha, "alpha"), (1.0, "1 (no scaling)"), (r / alpha, "r / alpha")):
        if _rel(y, plain + scale * delta) < 1e-4:
            return (
                f"your output is base(x) + {name} * x A^T B^T: scale the adapter's output by alpha / r "
                f"(= {alpha:g} / {r} here), so that changing the rank does not change the update's size"
            )
    return "the output should be base(x) + (alpha / r) * x @ lora_A.T @ lora_B.T"


def check_layer(ctx: Context) -> None:
    seed = ctx.rng.randrange(1 << 20)
    r = ctx.session.call("layer", CALL_SECONDS, seed=seed)
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"LoRALinear {r.failure}")
    got, ref = _tensors(r), lt.peft_layer_reference(seed)
    base, x, _, rank, alpha = lt.draw_layer(seed)
    shown = (
        f"LoRALinear(nn.Linear({base.in_features}, {base.out_features}), r={rank}, alpha={alpha:g})"
    )
    with torch.no_grad():
        plain = base(x)
    expect(
        _rel(got["y0"], plain) <= TOLERANCE,
        f"{shown}: at initialisation the output differs from the base layer's by {_rel(got['y0'], plain):.1%}: "
        "initialise lora_B to zeros (and lora_A randomly), so training starts from the pretrained model",
    )
    ctx.ok(f"{shown}: output equal to the base layer's at initialisation")
    err = _rel(got["y"], ref["y"])
    expect(
        err <= TOLERANCE,
        f"{shown}, with peft's A and B: the output differs from peft's by {err:.1%}: "
        f"{_scale_mistake(seed, got['y'])}",
    )
    trainable = r.data.get("trainable") if isinstance(r.data.get("trainable"), dict) else {}
    frozen_base = not any(n.startswith("base") for n in trainable) and "base.weight" not in (
        r.data.get("got_grad") or []
    )
    expect(
        frozen_base,
        f"{shown}: the base layer's parameters require grad ({sorted(trainable)}): freeze them "
        "(base.requires_grad_(False)); otherwise the base gets gradients and two AdamW states "
        "per weight, and LoRA saves nothing",
    )
    count, want = (
        sum(int(v) for v in trainable.values() if isinstance(v, int)),
        rank * (base.in_features + base.out_features),
    )
    expect(
        count == want,
        f"{shown}: {count:,} trainable parameters, expected r * (in + out) = {want:,}",
    )
    for key in ("grad_a", "grad_b"):
        e = _rel(got[key], ref[key])
        expect(
            e <= TOLERANCE,
            f"{shown}: the gradient of {'lora_A' if key == 'grad_a' else 'lora_B'} differs "
            f"from peft's by {e:.1%}",
        )
    ctx.ok(
        f"output and the gradients of A and B equal to peft's (relative error {err:.0e}); the base gets none; "
        f"{count:,} trainable = r * (in + out)"
    )
    werr = max(_rel(got["merged_w"], ref["merged_w"]), _rel(got["merged_b"], ref["merged_b"]))
    expect(
        werr <= TOLERANCE,
        f"merged(): the weights differ from peft's merge_and_unload by {werr:.1%}: the merged "
        "weight is W + (alpha / r) * lora_B @ lora_A, the bias unchanged",
    )
    yerr = _rel(got["y_merged"], got["y"])
    expect(
        yerr <= TOLERANCE, f"merged(): its outputs differ from the unmerged layer's by {yerr:.1%}"
    )
    ctx.ok("merged() equals peft's merge_and_unload and gives the unmerged outputs")


def check_inject(ctx: Context) -> None:
    seed = ctx.rng.randrange(1 << 20)
    targets = list(ctx.rng.choice(lt.TARGET_CHOICES))
    rank, alpha = ctx.rng.choice((2, 4)), float(ctx.rng.choice((8, 16)))
    shown = f"inject_lora(model, {targets}, r={rank}, alpha={alpha:g})"
    r = ctx.session.call("inject", CALL_SECONDS, seed=seed, targets=targets, r=rank, alpha=alpha)
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"{shown} {r.failure}")
    got = _tensors(r)
    model, ids = lt.tiny_bert(seed)
    with torch.no_grad():
        before = model(ids).last_hidden_state
    e = _rel(got["at_init"], before)
    expect(
        e <= TOLERANCE,
        f"{shown}: right after injection the model's output differs from the base model's by "
        f"{e:.1%}: a fresh adapter must change nothing (lora_B starts at zero)",
    )
    borrowed = r.data.get("borrowed")
    expect(
        not borrowed,
        f"{shown}: the adapted model holds modules your LoRALinear did not build ({borrowed}): write "
        "the injection in plain PyTorch, wrapping each target in your own LoRALinear (peft is for "
        "comparing, in 'Your turn')",
    )
    trainable = r.data.get("trainable") if isinstance(r.data.get("trainable"), dict) else {}
    want, adapted = lt.peft_trainable(seed, targets, rank, alpha)
    not_lora = sorted(n for n in trainable if "lora_" not in n)
    expect(
        not not_lora,
        f"{shown}: {len(not_lora)} parameters that are not adapters still require grad (e.g. "
        f"{not_lora[:3]}): freeze the whole model first, then add the adapters",
    )
    count = sum(int(v) for v in trainable.values() if isinstance(v, int))
    expect(
        count == want,
        f"{shown}: {count:,} trainable parameters; peft trains {want:,} for these targets "
        f"({adapted} nn.Linear modules whose name is a target or ends with '.' + a target)",
    )
    grads = set(r.data.get("got_grad") or [])
    expect(
        grads == set(trainable),
        f"{shown}: gradients reached {len(grads)} parameters, expected exactly the "
        f"{len(trainable)} adapter matrices",
    )
    ctx.ok(
        f"{shown}: output unchanged at initialisation; {count:,} trainable parameters in {adapted} adapted "
        "modules, as peft; gradients reach only the adapters"
    )


CELL_CHECKS = {
    "test_layer": check_layer,
    "test_inject": check_inject,
    "test_recipe": check_recipe,
    "test_quiz": quiz_check("lesson8", ("q1", "q2", "q3", "q4")),
}
NAMES = ("LoRALinear", "inject_lora", "lora_recipe")


ASSIGNMENT = Assignment(
    "lesson8", "inject_lora", SETUP_SOURCE, CELL_CHECKS, timeout_s=180, names=NAMES
)
