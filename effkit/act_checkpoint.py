"""Activation checkpointing: trade compute for activation memory.

`checkpoint_modules` makes chosen blocks keep only their inputs and recompute the rest in backward
(``use_reentrant=False``: the reentrant variant gives no gradient to a block whose inputs need none);
``save_ops=`` keeps the named ops' outputs (selective checkpointing), and `sqrt_segments`/`run_segments`
checkpoint ~sqrt(n) segments. It replaces each module's ``forward`` attribute instead of wrapping it, so
``state_dict`` keys and names stay unchanged. Side effects in a checkpointed forward run twice.
`CountedSaveOnCpu` is torch's activation offloading (``save_on_cpu``), counting what its hooks move.
"""

from __future__ import annotations

import functools
import inspect
import math
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import save_on_cpu
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

__all__ = [
    "MATMUL_OPS",
    "CountedSaveOnCpu",
    "OffloadCount",
    "checkpoint_modules",
    "is_checkpointed",
    "peak_cuda_memory",
    "run_segments",
    "saved_activation_bytes",
    "selective_context",
    "sqrt_segments",
    "uncheckpoint_modules",
]

# Ops whose outputs selective checkpointing keeps by default: the matmuls (and attention, a
# fused pair of matmuls), by ATen name. F.linear runs as addmm (with bias) or mm.
MATMUL_OPS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    }
)

# SAC keeps its cache outside autograd's saved tensors; since torch 2.12 it can route it through
# the saved_tensors_hooks in scope (so saved_activation_bytes sees it, and no FutureWarning).
_ROUTE_SAC = "respect_saved_tensors_hooks" in inspect.signature(checkpoint).parameters
# Selective blocks that ran while saved_activation_bytes was counting, on a torch whose SAC
# cache bypasses the hooks: their kept tensors are invisible, so the count would be too low.
_UNCOUNTED: list[int] = []


class UncountedSaves(RuntimeError):
    """Selective checkpointing ran during a byte count on a torch (< 2.12) that hides what it keeps."""


Selector = type | tuple[type, ...] | Callable[[str, nn.Module], bool]

# Where the replaced forward is kept: None means "the class's forward". It lives in the
# module's __dict__ so that copy.deepcopy rebinds it to the copy (a closure over the original
# bound method would make a deep-copied model silently run the *original* module's weights).
_INNER = "_effkit_inner_forward"
_SAVE = "_effkit_save_ops"


def _op_name(op: Any) -> str:
    packet = getattr(op, "overloadpacket", None)
    return getattr(packet, "__name__", str(op))


def selective_context(save_ops: Iterable[str] = MATMUL_OPS) -> Callable[[], Any]:
    """A ``context_fn`` for ``checkpoint``: save the outputs of ``save_ops`` (ATen names such as
    ``"addmm"``, ``"gelu"``), recompute every other op of the block in backward."""
    names = frozenset(save_ops)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if _op_name(op) in names:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy)


def _checkpoint(
    fn: Callable[..., Any], *args: Any, save_ops: Iterable[str] | None = None, **kwargs: Any
) -> Any:
    # use_reentrant=False: supports kwargs, inputs that don't require grad and
    # torch.autograd.grad; it is also the variant PyTorch recommends going forward.
    extra: dict[str, Any] = {}
    if save_ops is not None:
        extra["context_fn"] = selective_context(save_ops)
        if _ROUTE_SAC:
            extra["respect_saved_tensors_hooks"] = True
        elif _UNCOUNTED:  # a count is running and cannot see this block's cache
            _UNCOUNTED[-1] += 1
    return checkpoint(fn, *args, use_reentrant=False, **extra, **kwargs)


def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    inner = self.__dict__[_INNER] or type(self).forward.__get__(self)
    if not torch.is_grad_enabled():
        # Nothing would be saved for backward: skip checkpoint's bookkeeping.
        return inner(*args, **kwargs)
    return _checkpoint(inner, *args, save_ops=self.__dict__.get(_SAVE), **kwargs)


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


def checkpoint_modules(
    model: nn.Module, predicate_or_types: Selector, save_ops: Iterable[str] | None = None
) -> int:
    """Checkpoint every submodule selected by a class / tuple of classes / ``pred(name, mod)``.

    ``save_ops``: selective checkpointing, keep these ops' outputs (e.g. :data:`MATMUL_OPS`);
    ``None`` recomputes the whole block. Returns the number of modules newly wrapped.
    Idempotent: already-wrapped modules are skipped, and so are descendants of a selected module
    (nested checkpoints would recompute the inner part twice for no memory gain). Raises
    ``ValueError`` if nothing matches.
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
            setattr(module, _SAVE, None if save_ops is None else frozenset(save_ops))
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
            module.__dict__.pop(_SAVE, None)
            del module.forward  # the class's forward becomes visible again
            if inner is not None:
                module.forward = inner
            restored += 1
    return restored


def sqrt_segments(n_blocks: int, segments: int | None = None) -> list[range]:
    """Contiguous segments of ``range(n_blocks)``: ``round(sqrt(n))`` of them by default
    (Chen et al. 2016), the first ones one block longer when ``n`` does not divide evenly."""
    if n_blocks < 1:
        raise ValueError(f"need at least one block, got {n_blocks}")
    k = min(n_blocks, segments or max(1, round(math.sqrt(n_blocks))))
    size, extra = divmod(n_blocks, k)
    out, start = [], 0
    for i in range(k):
        stop = start + size + (i < extra)
        out.append(range(start, stop))
        start = stop
    return out


def run_segments(
    blocks: Sequence[nn.Module], x: torch.Tensor, segments: Sequence[range]
) -> torch.Tensor:
    """Run ``x`` through ``blocks``, each segment checkpointed as one unit (only its input is
    kept; backward recomputes the segment). Unlike ``torch.utils.checkpoint.checkpoint_sequential``
    the last segment is checkpointed too, and segments are explicit ranges."""

    def run(segment: range) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(h: torch.Tensor) -> torch.Tensor:
            for i in segment:
                h = blocks[i](h)
            return h

        return forward

    for segment in segments:
        x = _checkpoint(run(segment), x) if torch.is_grad_enabled() else run(segment)(x)
    return x


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
    counted. Tensors that selective checkpointing keeps are counted when the block was wrapped
    here (torch >= 2.12 routes them through these hooks); on an older torch such a block makes
    the count raise `UncountedSaves` rather than return too little. Works on any device;
    nothing is copied.
    """
    storages: dict[tuple[str, int], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        base = tensor._base if tensor._base is not None else tensor
        if not (base.is_leaf and base.requires_grad):
            storage = tensor.untyped_storage()
            storages[(str(tensor.device), storage.data_ptr())] = storage.nbytes()
        # A detached alias (same storage, no graph): handing back ``tensor`` itself would tie an
        # op's saved *output* to its own graph node, a cycle inside autograd that gc cannot
        # see, so a forward that is never backpropagated would keep everything it saved.
        return tensor.detach()

    _UNCOUNTED.append(0)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            fn()
    finally:
        hidden = _UNCOUNTED.pop()
    if hidden:  # a wrong (too low) number is worse than none
        raise UncountedSaves(
            f"{hidden} selectively checkpointed block(s) ran: torch {torch.__version__} keeps their"
            " saved tensors outside saved_tensors_hooks, so they cannot be counted (torch >= 2.12 can)"
        )
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


@dataclass
class OffloadCount:
    """What `CountedSaveOnCpu` moved: every saved tensor is counted at its own size (``numel`` x
    element size, what a copy of it moves), once per save, so a storage saved twice counts twice."""

    tensors: int = 0  # saved tensors the pack hook received
    packed_bytes: int = 0  # their bytes: what goes to the host in forward
    parameter_bytes: int = 0  # of which parameters and views of them (a Linear saves its weight)
    copied: int = 0  # packed tensors given new storage (a CPU tensor's .cpu() is itself)
    unpacked_bytes: int = 0  # bytes handed back to backward (what comes back from the host)


class CountedSaveOnCpu(save_on_cpu):
    """``torch.autograd.graph.save_on_cpu(pin_memory)`` that also counts what its hooks move, in
    ``.count`` (an `OffloadCount`). The offloading is torch's own; only counting is added.

    Use it like ``save_on_cpu``: the forward runs inside it; backward (inside or after) fills
    ``unpacked_bytes``. Counting costs no copy and syncs nothing."""

    def __init__(self, pin_memory: bool = False) -> None:
        super().__init__(pin_memory=pin_memory)
        self.count = OffloadCount()
        pack, unpack = self.pack_hook, self.unpack_hook

        def counting_pack(tensor: torch.Tensor) -> Any:
            packed = pack(tensor)
            nbytes = tensor.numel() * tensor.element_size()
            base = tensor._base if tensor._base is not None else tensor
            self.count.tensors += 1
            self.count.packed_bytes += nbytes
            if base.is_leaf and base.requires_grad:
                self.count.parameter_bytes += nbytes
            kept = [t for t in tree_leaves(packed) if torch.is_tensor(t)]
            if tensor.layout != torch.strided:  # sparse: no storage to compare
                same = any(t is tensor for t in kept)
            else:
                ptr = tensor.untyped_storage().data_ptr()
                same = any(t.untyped_storage().data_ptr() == ptr for t in kept)
            self.count.copied += not same
            return packed

        def counting_unpack(packed: Any) -> torch.Tensor:
            tensor = unpack(packed)
            self.count.unpacked_bytes += tensor.numel() * tensor.element_size()
            return tensor

        self.pack_hook, self.unpack_hook = counting_pack, counting_unpack
