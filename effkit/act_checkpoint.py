"""Activation checkpointing: trade compute for activation memory.

**What it does.** For each chosen submodule (e.g. every transformer layer), the forward pass
keeps only the submodule's *inputs* instead of every intermediate tensor it would normally save
for backward; during backward the submodule's forward is re-run to rebuild them
(``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``).

**When to use it.** Activation memory, not weights, is what stops you from using a larger
batch, longer sequences or a bigger model. Checkpoint the big repeated blocks (transformer
layers, ResNet stages), not tiny modules.

**Expected gain.** Activation memory of each checkpointed block drops from "all of its
intermediates" to "its inputs" (often 5-20x less per block for transformer layers). Cost: one
extra forward of every checkpointed block, i.e. roughly +20-35 % step time (backward is ~2x
forward, so an extra forward adds ~1/3).

**Pitfalls / trade-offs.**

* Only pays off if the memory is used for something (bigger batch / model); otherwise it is
  pure slowdown.
* Randomness (dropout) is replayed identically: the RNG state is stashed and restored for the
  recompute, which costs a little time.
* The forward is run twice: side effects in forward (counters, BatchNorm running stats, prints)
  happen twice.
* Under ``torch.no_grad()`` nothing is saved anyway, so the wrapper calls the plain forward.

Design: :func:`checkpoint_modules` *replaces the forward* of the chosen modules (an instance
attribute) instead of inserting wrapper modules into the tree. The module tree, the
``state_dict`` keys, ``isinstance`` checks, names used by optimizers/profilers and
``save_pretrained``/``from_pretrained`` are all unchanged, so checkpoints stay compatible with
the unwrapped model, and :func:`uncheckpoint_modules` undoes it by deleting the attribute.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = [
    "checkpoint_modules",
    "is_checkpointed",
    "peak_cuda_memory",
    "saved_activation_bytes",
    "uncheckpoint_modules",
]

Selector = type | tuple[type, ...] | Callable[[str, nn.Module], bool]

# Where the replaced forward is kept: None means "the class's forward". It lives in the
# module's __dict__ so that copy.deepcopy rebinds it to the copy (a closure over the original
# bound method would make a deep-copied model silently run the *original* module's weights).
_INNER = "_effkit_inner_forward"


def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    inner = self.__dict__[_INNER] or type(self).forward.__get__(self)
    if not torch.is_grad_enabled():
        # Nothing would be saved for backward: skip checkpoint's bookkeeping.
        return inner(*args, **kwargs)
    # use_reentrant=False: supports kwargs, inputs that don't require grad and
    # torch.autograd.grad; it is also the variant PyTorch recommends going forward.
    return checkpoint(inner, *args, use_reentrant=False, **kwargs)


def is_checkpointed(module: nn.Module) -> bool:
    """Whether :func:`checkpoint_modules` has wrapped this module's forward."""
    forward = module.__dict__.get("forward")
    return getattr(forward, "__func__", None) is _checkpointed_forward


def _as_predicate(selector: Selector) -> Callable[[str, nn.Module], bool]:
    if isinstance(selector, type) or (
        isinstance(selector, tuple) and all(isinstance(t, type) for t in selector)
    ):
        return lambda _name, module: isinstance(module, selector)
    if callable(selector):
        return selector
    raise TypeError(
        "expected a module class, a tuple of classes or a predicate(name, module) -> bool, "
        f"got {selector!r}"
    )


def checkpoint_modules(model: nn.Module, predicate_or_types: Selector) -> int:
    """Checkpoint every submodule selected by a class / tuple of classes / ``pred(name, mod)``.

    Returns the number of modules newly wrapped. Idempotent: already-wrapped modules are
    skipped, and so are descendants of a selected module (nested checkpoints would recompute
    the inner part twice for no memory gain). Raises ``ValueError`` if nothing matches.
    """
    predicate = _as_predicate(predicate_or_types)
    wrapped = matched = 0
    selected_prefixes: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(prefix) for prefix in selected_prefixes):
            continue
        if not (is_checkpointed(module) or predicate(name, module)):
            continue
        matched += 1
        selected_prefixes.append(f"{name}." if name else "")
        if not is_checkpointed(module):
            # An instance attribute shadows the class's forward; nn.Module.__call__ (and thus
            # hooks) works as before. Keep a forward that was already patched by someone else.
            setattr(module, _INNER, module.__dict__.get("forward"))
            module.forward = types.MethodType(_checkpointed_forward, module)
            wrapped += 1
    if matched == 0:
        raise ValueError(
            f"checkpoint_modules: no submodule of {type(model).__name__} matched "
            f"{predicate_or_types!r}; module types present: "
            f"{sorted({type(m).__name__ for m in model.modules()})}"
        )
    return wrapped


def uncheckpoint_modules(model: nn.Module) -> int:
    """Undo :func:`checkpoint_modules`; returns the number of modules restored."""
    restored = 0
    for module in model.modules():
        if is_checkpointed(module):
            inner = module.__dict__.pop(_INNER)
            del module.forward  # the class's forward becomes visible again
            if inner is not None:
                module.forward = inner
            restored += 1
    return restored


def saved_activation_bytes(fn: Callable[[], Any]) -> int:
    """Run ``fn()`` (a forward pass) and return the bytes it saves for backward.

    Counts every tensor autograd saves (through ``saved_tensors_hooks``), with two rules:

    * Storages are deduplicated by ``(device, data_ptr)``: a view, a transpose or a tensor
      saved by two ops keeps a single storage alive, so it must count once; and we count the
      whole storage (``nbytes``) because a saved view keeps all of it alive.
    * Parameters (leaf tensors that require grad, and views of them, e.g. ``weight.t()`` saved
      by a Linear) are excluded: they live as long as the model, they are not activations.

    With non-reentrant checkpointing the recompute's tensors are not saved during forward; the
    checkpointed block's inputs are (checkpoint saves them to replay the block), so they are
    counted. Works on any device; nothing is copied.
    """
    storages: dict[tuple[str, int], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        base = tensor._base if tensor._base is not None else tensor
        if not (base.is_leaf and base.requires_grad):
            storage = tensor.untyped_storage()
            storages[(str(tensor.device), storage.data_ptr())] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return sum(storages.values())


def peak_cuda_memory(fn: Callable[[], Any], device: torch.device | str | None = None) -> int | None:
    """Peak CUDA memory allocated *by* ``fn()``, in bytes (above what was allocated before).

    Returns ``None`` (after still running ``fn``) when CUDA is not available, so callers can
    use it unconditionally. Measures the caching allocator's ``max_memory_allocated``, i.e.
    tensors, not the reserved pool nor cuBLAS/cuDNN workspaces outside it.
    """
    if not torch.cuda.is_available():
        fn()
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before
