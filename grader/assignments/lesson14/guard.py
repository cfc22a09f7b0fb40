"""Lesson 14's learner worker: what a pipeline may not change besides its batches (attack class D).

The recipe's changes are declared (``recipe.read``) and built by the grader; a pipeline is input
work. One that also flips a torch switch (``torch.backends.mkldnn.enabled``, the matmul precision,
the thread count, autocast, a global hook, a torch function replaced ...) or yields batches in a
layout the recipe did not declare would change the recipe by the back door, and its "pipeline
alone" timing. Here, in the learner's worker (the baseline's too, as a check of the guard), every
process-global setting that changes speed or numerics is read before learner code runs and again
after every call into it (the cells, the pipeline's ``__init__``, ``__len__``, ``__iter__``, each
batch), at the build and after every chunk; any change refuses the run with a sentence naming it.
Each batch is held to what the declared recipe implies.

A tripwire in the process that runs learner code, not proof: its getters are bound at import,
before any learner code; its state is kept where an assignment cannot clear it and its own
bindings are held with the settings (``_vault``); the parent refuses a cell whose text names the
grader or walks to its objects (``cell_filters._reaches_grader``); the rest is in the lesson's README.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F  # noqa: N812
import torch.nn.modules.module as _module
import torch.optim.lr_scheduler as _lr
import torch.optim.optimizer as _optimizer
import torch.optim.sgd as _sgd


def _getter(name: str):
    """``torch._C``'s getter ``name``, bound now (None where this torch has none)."""
    return getattr(torch._C, name, None)


def _fp32_precision(backend: str, op: str):
    get = _getter("_get_fp32_precision_getter")
    return None if get is None else lambda: get(backend, op)


_TINY = torch.tensor([1e-39])  # a float32 denormal, made before any learner code


def _flushes_denormals() -> bool:
    """``torch.set_flush_denormal`` has no getter: a denormal multiplied by one tells."""
    return float((_TINY * 1.0).item()) == 0.0


def _hooks(module, name: str):
    """How many global hooks ``module.name`` holds, read by name: torch runs the dict bound there
    when it runs them, and one put in its place (a review) hides the hooks registered in it."""
    first = getattr(module, name, None)
    if first is None:
        return None

    def count():
        now = getattr(module, name)
        return len(now) if now is first else f"{len(now)} in another dict put in its place"

    return count


_SAVED_TOP = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
_B, _MM = "torch.backends.", "torch.backends.cuda.matmul."
# Every process-global (or thread-global, in the thread that runs the steps) setting that changes
# a recipe's speed or numerics: (what the learner would call it, a getter bound here). One list;
# the public switches first: one of them moves several backend flags below it.
SETTINGS: tuple[tuple[str, object], ...] = tuple((name, get) for name, get in (
    ("torch.get_float32_matmul_precision()", _getter("_get_float32_matmul_precision")),
    *((_B + name, _getter(get)) for name, get in (
        ("mkldnn.enabled", "_get_mkldnn_enabled"), ("mkldnn.allow_tf32", "_get_onednn_allow_tf32"),
        ("mkldnn.deterministic", "_get_mkldnn_deterministic"), ("nnpack.enabled", "_get_nnpack_enabled"),
        ("cudnn.enabled", "_get_cudnn_enabled"), ("cudnn.benchmark", "_get_cudnn_benchmark"),
        ("cudnn.deterministic", "_get_cudnn_deterministic"), ("cudnn.allow_tf32", "_get_cudnn_allow_tf32"),
        ("cuda.matmul.allow_tf32", "_get_cublas_allow_tf32"),
        ("cuda.flash_sdp_enabled()", "_get_flash_sdp_enabled"),
        ("cuda.mem_efficient_sdp_enabled()", "_get_mem_efficient_sdp_enabled"),
        ("cuda.math_sdp_enabled()", "_get_math_sdp_enabled"),
        ("cuda.cudnn_sdp_enabled()", "_get_cudnn_sdp_enabled"),
        ("cuda.preferred_blas_library()", "_get_blas_preferred_backend"),
        ("cuda.preferred_linalg_library()", "_get_linalg_preferred_backend"),
    )),
    *((_MM + name, _getter(f"_get_cublas_{name}")) for name in (
        "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
        "allow_fp16_accumulation",
    )),
    *((f"{_B}{name}.fp32_precision", _fp32_precision(backend, op)) for name, backend, op in (
        ("mkldnn", "mkldnn", "all"), ("mkldnn.matmul", "mkldnn", "matmul"),
        ("mkldnn.conv", "mkldnn", "conv"), ("cudnn.conv", "cuda", "conv"),
        ("cuda.matmul", "cuda", "matmul"),
    )),
    *((f"torch.{name}()", getattr(torch, name, None)) for name in (
        "get_num_threads", "get_num_interop_threads", "are_deterministic_algorithms_enabled",
        "is_deterministic_algorithms_warn_only_enabled", "get_default_dtype", "get_default_device",
        "is_autocast_cache_enabled", "is_grad_enabled", "is_inference_mode_enabled",
        "is_anomaly_enabled",
    )),
    ("torch.set_flush_denormal", _flushes_denormals),
    *((f"torch.{f.__name__}({d!r})", lambda f=f, d=d: f(d)) for f in (
        torch.is_autocast_enabled, torch.get_autocast_dtype) for d in ("cpu", "cuda")),
    ("torch.backends.mha.get_fastpath_enabled()", torch.backends.mha.get_fastpath_enabled),
    ("a TorchFunctionMode entered (torch.overrides)", _getter("_len_torch_function_stack")),
    ("a TorchDispatchMode entered (torch.utils._python_dispatch)",
     _getter("_len_torch_dispatch_stack")),
    # a pack hook runs in the grader's forward with every saved tensor in hand (a review's route)
    ("a default saved-tensor hook entered (torch.autograd.graph.saved_tensors_hooks)",
     None if _SAVED_TOP is None else lambda: _SAVED_TOP(False) is not None),
    *((f"the global module hooks torch.nn.modules.module.{h}", _hooks(_module, h)) for h in (
        "_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
        "_global_backward_hooks", "_global_buffer_registration_hooks",
        "_global_module_registration_hooks", "_global_parameter_registration_hooks",
    )),
    *((f"the global optimizer hooks torch.optim.optimizer.{h}", _hooks(_optimizer, h))
      for h in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")),
    ("sys.settrace", sys.gettrace),
    ("sys.setprofile", sys.getprofile),
) if get is not None)  # fmt: skip

# An optimizer's first build wraps its class's ``step`` (torch's profiling hook, once per class):
# done here, before the functions are first read, so that a pipeline that builds an SGD is not
# taken for one that replaced its step.
torch.optim.SGD([torch.zeros(1, requires_grad=True)])

# The torch namespaces the naive recipe's step goes through: a function or method replaced in them
# (``torch.Tensor.contiguous``, ``F.conv2d``, ``torch.nn.Conv2d.forward``, ``torch.optim.SGD.step``)
# changes the recipe's step as surely as a switch. Compared by identity; names added later (lazy
# submodules) do not count.
_nn = torch.nn
NAMESPACES: tuple[tuple[str, object], ...] = (
    ("torch", torch), ("torch.Tensor", torch.Tensor), ("torch.nn.functional", F),
    ("torch.autograd", torch.autograd), ("torch.nn.Module", _nn.Module),
    *((f"torch.nn.{cls.__name__}", cls) for cls in (
        _nn.Conv2d, _nn.BatchNorm2d, _nn.Linear, _nn.ReLU, _nn.MaxPool2d, _nn.AdaptiveAvgPool2d,
        _nn.Sequential, _nn.CrossEntropyLoss,
    )),
    ("torch.nn.modules.conv._ConvNd", _nn.modules.conv._ConvNd),
    ("torch.nn.modules.batchnorm._BatchNorm", _nn.modules.batchnorm._BatchNorm),
    # the optimizer's step (a review): SGD's, the functional sgd it calls, the scheduler's, the scaler's
    ("torch.optim.Optimizer", torch.optim.Optimizer), ("torch.optim.SGD", torch.optim.SGD),
    ("torch.optim.sgd", _sgd), ("torch.optim.optimizer", _optimizer),
    ("torch.optim.lr_scheduler.LambdaLR", _lr.LambdaLR),
    ("torch.optim.lr_scheduler.LRScheduler", _lr.LRScheduler),
    ("torch.amp.GradScaler", torch.amp.GradScaler),
)  # fmt: skip

_ERROR = "<raised>"


def _read(get):
    try:
        return get()
    except Exception:  # noqa: BLE001 - a getter this build lacks (no CUDA): a value too
        return _ERROR


def settings() -> dict[str, object]:
    """Every setting of ``SETTINGS`` now (a getter that raises reads as one value)."""
    return {name: _read(get) for name, get in SETTINGS}


def functions() -> list[dict]:
    """Each namespace of ``NAMESPACES`` as it is now (a shallow copy: identities kept)."""
    return [dict(vars(space)) for _, space in NAMESPACES]


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an odd value: by identity
        return a is b


def moved(before: dict, after: dict) -> list[str]:
    """The settings of ``after`` that differ from ``before``, as "changed X from a to b"."""
    return [
        f"changed {name} from {before[name]!r} to {value!r}"
        for name, value in after.items()
        if name in before and not _same(before[name], value)
    ]


def replaced(before: list[dict], after: list[dict]) -> list[str]:
    """The callables of ``before`` that ``after`` holds another object for (or none), and the names
    added on a class over one it inherits (``torch.Tensor.contiguous`` is ``TensorBase``'s), as
    "replaced X"; other names added since (a module's lazy submodules) do not count."""
    out = []
    for (prefix, space), old, new in zip(NAMESPACES, before, after, strict=True):
        for name, value in old.items():
            if new.get(name, _ERROR) is not value and (
                callable(value) or isinstance(value, staticmethod | classmethod | property)
            ):
                out.append(f"replaced {prefix}.{name}")
        if isinstance(space, type) and len(new) > len(old):  # a name added: a class's, inherited?
            out += [
                f"replaced {prefix}.{name}"
                for name in new.keys() - old.keys()
                if any(name in vars(base) for base in space.__mro__[1:])
            ]
    return out


class SettingsChanged(RuntimeError):
    """Learner code changed a setting that belongs to the declared recipe."""


def refusal(where: str, changes: list[str]) -> SettingsChanged:
    """The sentence a run is refused with: what ``where`` (the learner's code) changed."""
    more = f" (and {len(changes) - 3} more)" if len(changes) > 3 else ""
    return SettingsChanged(
        f"your {where} {'; '.join(changes[:3])}{more}: a setting belongs in the recipe's declared "
        "changes (CHANGES: precision, channels_last, compile, batch_size, lr), which the grader "
        "builds on your side and leaves out in an ablation; your code may not change torch's "
        "settings or functions itself"
    )


def batch_problem(batch, channels_last: bool) -> str:
    """Why a batch is refused ('' when it is not): anything but a plain tuple or list of two plain
    tensors (a review: a tensor subclass's ``__torch_function__``, a pair's ``__iter__``) would run
    learner code inside the grader's step; x is float32, contiguous NCHW or channels-last where the
    recipe declares channels_last (it converts). Another length or shape is the audit's to name."""
    if type(batch) not in (tuple, list):
        odd = f"a batch of type {type(batch).__qualname__}, not a plain tuple (x, y)"
    elif len(batch) != 2:
        return ""
    else:
        odd = next(
            (
                f"a batch whose {n} is a {type(v).__qualname__}, not a plain torch.Tensor"
                for n, v in zip("xy", batch, strict=True)
                if type(v) is not torch.Tensor
            ),
            "",
        )
    if odd:
        return (
            f"your pipeline yielded {odd}: its methods (a subclass's __torch_function__, __iter__) "
            "would run your code inside the grader's step"
        )
    x = batch[0]
    if x.dim() != 4:
        return ""
    if x.dtype != torch.float32:
        return (
            f"your pipeline yielded a batch of {x.dtype}, not float32: the recipe's precision is a "
            "declared change ('precision'; autocast casts inside the step), and a pipeline hands "
            "over float32"
        )
    if x.is_contiguous() or (channels_last and x.is_contiguous(memory_format=torch.channels_last)):
        return ""
    if x.is_contiguous(memory_format=torch.channels_last):
        return (
            "your pipeline yielded channels-last batches, and your recipe does not declare "
            "channels_last: a memory layout belongs in the recipe's declared changes "
            "({'channels_last': True}); else hand over contiguous NCHW batches (x.contiguous())"
        )
    return (
        f"your pipeline yielded a batch with strides {tuple(x.stride())}, neither contiguous NCHW "
        "nor channels-last: hand over x.contiguous()"
    )


# What the grader's own build of a recipe sets (cifar.build on a GPU: cuDNN's benchmark), to the
# value it sets: the one change ``rebase`` absorbs. Any other is learner code run during the build
# (a thread), refused (a review: absorbed, it passed).
BUILD_SETS = {"torch.backends.cudnn.benchmark": True}


def _vault():
    """Each guard's state, kept in this closure, not on the guard: a cell that reached this module
    (a review: ``pydoc.locate`` on its name) cleared ``GUARD.base`` or ``SETTINGS`` and silenced it.
    A closure's cells are reached only through ``__closure__``, which the parent refuses in a cell's
    text. ``intact`` holds this module's and ``Guard``'s bindings as they were at import (``seal``),
    with the settings, so that rebinding ``SETTINGS``, ``GUARD`` or a method refuses the run."""
    kept: dict[int, tuple] = {}  # the guards too: an id is not reused while its guard is kept
    own: list[tuple] = []
    missing = object()

    def state(guard) -> dict:
        fresh = {"base": None, "cells": None, "channels_last": False}
        return kept.setdefault(id(guard), (guard, fresh))[1]

    def seal(*spaces) -> None:
        own.extend((space, name, value) for space in spaces for name, value in vars(space).items())

    def intact() -> None:
        changed = [
            f"{space.__name__}.{name}" for space, name, value in own
            if vars(space).get(name, missing) is not value
        ]  # fmt: skip
        if changed:
            raise refusal("code", [f"replaced the grader's guard ({', '.join(changed[:3])})"])

    return state, seal, intact


_state, _seal, _intact = _vault()


class Guard:
    """One worker's guard. ``base``: the settings learner code must leave as it found them, held
    everywhere (grader code changes none after the build); torch's functions across the cells and
    each call into learner code only (torch patches some lazily in the grader's steps:
    ``nn.Module.__init__`` at a ``torch.compile``'s first call). No instance attributes: its state
    is in ``_vault``, and no method can be shadowed on the instance."""

    __slots__ = ()
    base = property(lambda self: _state(self)["base"])
    # declared, set by the grader's build (the parent read it); each pipeline keeps the value it was
    # wrapped with (``wrap``), so a later change reaches no built pipeline
    channels_last = property(
        lambda self: _state(self)["channels_last"],
        lambda self, value: _state(self).update(channels_last=bool(value)),
    )

    def start(self) -> None:
        """Before any learner code runs (the worker's load): the state learner code must keep.
        Held first where it started already: a second start may not absorb a change."""
        state = _state(self)
        if state["base"] is not None:
            self.hold("code", since=state["cells"])
        state.update(base=settings(), cells=functions())

    def rebase(self) -> None:
        """The settings as the grader's build left them, held first: only ``BUILD_SETS`` may have
        moved since the last base (nothing is held before the first ``start`` or pipeline)."""
        _intact()
        state, now = _state(self), settings()
        if state["base"] is not None:
            built = [k for k, v in BUILD_SETS.items() if k in now and _same(now[k], v)]
            held = {k: v for k, v in state["base"].items() if k not in built}
            if changes := moved(held, now):
                raise refusal("code (during the recipe's build)", changes)
        state["base"] = now

    def hold(self, where: str, since: list[dict] | None = None) -> None:
        """Raise if a setting moved since ``base``, or a torch function since ``since``."""
        _intact()
        base = _state(self)["base"]
        if base is None:
            return  # the baseline's worker before its first pipeline: no learner code ran
        changes = moved(base, settings())
        if since is not None:
            changes += replaced(since, functions())
        if changes:
            raise refusal(where, changes)

    def hold_cells(self) -> None:
        """Before a recipe is built: the solution cells changed nothing (their functions once; later
        builds hold the settings only: the previous run's steps may have patched torch)."""
        _intact()
        state = _state(self)
        cells, state["cells"] = state["cells"], None
        self.hold("solution cells" if cells is not None else "code", since=cells)

    def around(self, where: str, call, *args):
        """``call(*args)`` held: a setting moved before it (code running between the pipeline's
        calls: a thread, a hook) or during it, or a torch function replaced during it, refuses."""
        _intact()
        self.hold("code")
        before = functions()
        try:
            return call(*args)
        finally:
            self.hold(where, since=before)

    # A guard is callable so that the worker's tamper check, which records every callable a grader
    # module binds, reports ``runtime.GUARD`` rebound (to a guard never started, or anything else).
    __call__ = around

    def wrap(self, inner_cls):
        """``inner_cls`` (the learner's pipeline) with every call into it held, and each batch
        checked (``batch_problem``): the grader's ``EpochAudit`` wraps this in turn."""
        _intact()
        guard, declared = self, self.channels_last

        class HeldPipeline:
            def __init__(self, dataset, batch_size, device, seed):
                guard.rebase()  # the settings as the recipe's build left them so far
                self.inner = guard.around(
                    "pipeline's __init__", inner_cls, dataset, batch_size, device, seed
                )

            def __len__(self) -> int:
                return guard.around("pipeline's __len__", len, self.inner)

            def __iter__(self):
                it = guard.around("pipeline's __iter__", iter, self.inner)
                while True:
                    try:
                        batch = guard.around("pipeline's batches", next, it)
                    except StopIteration:
                        return
                    if why := batch_problem(batch, declared):
                        raise SettingsChanged(why)
                    yield batch

        HeldPipeline.__name__ = getattr(inner_cls, "__name__", "Pipeline")
        return HeldPipeline


GUARD = Guard()
_seal(sys.modules[__name__], Guard)  # the last line: every binding of this module as imported
