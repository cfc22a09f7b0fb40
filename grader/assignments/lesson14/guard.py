"""Lesson 14's learner worker: what a pipeline may not change besides its batches (attack class D).

The recipe's changes are declared (``recipe.read``) and built by the grader; a pipeline is input
work. A pipeline that also flips a torch switch (``torch.backends.mkldnn.enabled``, the float32
matmul precision, the thread count, flush-denormal, autocast, a global module hook, a torch
function replaced ...) or yields batches in a layout the recipe did not declare (channels-last)
would change the recipe by the back door, and move its "pipeline alone" timing. Here, in the
learner's worker (the baseline's too, as a check of the guard), every process-global setting that
changes speed or numerics is read before learner code runs and again after every call into it
(the cells, the pipeline's ``__init__``, ``__len__``, ``__iter__``, each batch) and after every
chunk; any change refuses the run with a sentence naming it. Each batch's layout and dtype are
held to what the declared recipe implies.

Worker side, in the process that runs learner code: a tripwire, not proof. Its getters are bound
when this module is imported, before any learner code (a later ``torch._C`` attribute swap does
not reach them); replacing its functions is seen by the worker's tamper check (a flag), and the
parent refuses a cell whose text imports the grader or walks to its objects
(``capstone._reaches_grader``); what remains is said in the lesson's README.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F  # noqa: N812
import torch.nn.modules.module as _module

_C = torch._C


def _getter(name: str):
    """``torch._C``'s getter ``name``, bound now (None where this torch has none)."""
    return getattr(_C, name, None)


def _fp32_precision(backend: str, op: str):
    get = _getter("_get_fp32_precision_getter")
    return None if get is None else lambda: get(backend, op)


_TINY = torch.tensor([1e-39])  # a float32 denormal, made before any learner code


def _flushes_denormals() -> bool:
    """``torch.set_flush_denormal`` has no getter: a denormal multiplied by one tells."""
    return float((_TINY * 1.0).item()) == 0.0


def _hooks(name: str):
    hooks = getattr(_module, name, None)
    return None if hooks is None else lambda: len(hooks)


# Every process-global (or thread-global, in the thread that runs the steps) setting that changes
# a recipe's speed or numerics: (what the learner would call it, a getter bound here). One list.
SETTINGS: tuple[tuple[str, object], ...] = tuple(
    (name, get)
    for name, get in (
        # the public switches first: one of them moves several backend flags below it
        ("torch.get_float32_matmul_precision()", _getter("_get_float32_matmul_precision")),
        ("torch.backends.mkldnn.enabled", _getter("_get_mkldnn_enabled")),
        ("torch.backends.mkldnn.deterministic", _getter("_get_mkldnn_deterministic")),
        ("torch.backends.mkldnn.allow_tf32", _getter("_get_onednn_allow_tf32")),
        ("torch.backends.mkldnn.fp32_precision", _fp32_precision("mkldnn", "all")),
        ("torch.backends.mkldnn.matmul.fp32_precision", _fp32_precision("mkldnn", "matmul")),
        ("torch.backends.mkldnn.conv.fp32_precision", _fp32_precision("mkldnn", "conv")),
        ("torch.backends.nnpack.enabled", _getter("_get_nnpack_enabled")),
        ("torch.backends.cudnn.enabled", _getter("_get_cudnn_enabled")),
        ("torch.backends.cudnn.benchmark", _getter("_get_cudnn_benchmark")),
        ("torch.backends.cudnn.deterministic", _getter("_get_cudnn_deterministic")),
        ("torch.backends.cudnn.allow_tf32", _getter("_get_cudnn_allow_tf32")),
        ("torch.backends.cudnn.conv.fp32_precision", _fp32_precision("cuda", "conv")),
        ("torch.backends.cuda.matmul.allow_tf32", _getter("_get_cublas_allow_tf32")),
        ("torch.backends.cuda.matmul.fp32_precision", _fp32_precision("cuda", "matmul")),
        (
            "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
            _getter("_get_cublas_allow_fp16_reduced_precision_reduction"),
        ),
        (
            "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
            _getter("_get_cublas_allow_bf16_reduced_precision_reduction"),
        ),
        (
            "torch.backends.cuda.matmul.allow_fp16_accumulation",
            _getter("_get_cublas_allow_fp16_accumulation"),
        ),
        ("torch.backends.cuda.flash_sdp_enabled()", _getter("_get_flash_sdp_enabled")),
        (
            "torch.backends.cuda.mem_efficient_sdp_enabled()",
            _getter("_get_mem_efficient_sdp_enabled"),
        ),
        ("torch.backends.cuda.math_sdp_enabled()", _getter("_get_math_sdp_enabled")),
        ("torch.backends.cuda.cudnn_sdp_enabled()", _getter("_get_cudnn_sdp_enabled")),
        ("torch.backends.cuda.preferred_blas_library()", _getter("_get_blas_preferred_backend")),
        (
            "torch.backends.cuda.preferred_linalg_library()",
            _getter("_get_linalg_preferred_backend"),
        ),
        ("torch.get_num_threads()", torch.get_num_threads),
        ("torch.get_num_interop_threads()", torch.get_num_interop_threads),
        ("torch.set_flush_denormal", _flushes_denormals),
        (
            "torch.are_deterministic_algorithms_enabled()",
            torch.are_deterministic_algorithms_enabled,
        ),
        (
            "torch.is_deterministic_algorithms_warn_only_enabled()",
            torch.is_deterministic_algorithms_warn_only_enabled,
        ),
        ("torch.get_default_dtype()", torch.get_default_dtype),
        ("torch.get_default_device()", getattr(torch, "get_default_device", None)),
        ("torch.is_autocast_enabled('cpu')", lambda: torch.is_autocast_enabled("cpu")),
        ("torch.is_autocast_enabled('cuda')", lambda: torch.is_autocast_enabled("cuda")),
        ("torch.get_autocast_dtype('cpu')", lambda: torch.get_autocast_dtype("cpu")),
        ("torch.get_autocast_dtype('cuda')", lambda: torch.get_autocast_dtype("cuda")),
        ("torch.is_autocast_cache_enabled()", torch.is_autocast_cache_enabled),
        ("torch.is_grad_enabled()", torch.is_grad_enabled),
        ("torch.is_inference_mode_enabled()", torch.is_inference_mode_enabled),
        ("torch.is_anomaly_enabled()", torch.is_anomaly_enabled),
        ("torch.backends.mha.get_fastpath_enabled()", torch.backends.mha.get_fastpath_enabled),
        ("a TorchFunctionMode entered (torch.overrides)", _getter("_len_torch_function_stack")),
        (
            "a TorchDispatchMode entered (torch.utils._python_dispatch)",
            _getter("_len_torch_dispatch_stack"),
        ),
        *(
            (f"the global module hooks torch.nn.modules.module.{h}", _hooks(h))
            for h in (
                "_global_forward_pre_hooks",
                "_global_forward_hooks",
                "_global_backward_pre_hooks",
                "_global_backward_hooks",
                "_global_buffer_registration_hooks",
                "_global_module_registration_hooks",
                "_global_parameter_registration_hooks",
            )
        ),
        ("sys.settrace", sys.gettrace),
        ("sys.setprofile", sys.getprofile),
    )
    if get is not None
)

# The torch namespaces the naive recipe's step goes through: a function or method replaced in them
# (``torch.Tensor.contiguous``, ``F.conv2d``, ``torch.nn.Conv2d.forward``) changes the recipe's step
# as surely as a switch. Compared by identity; names added later (lazy submodules) do not count.
NAMESPACES: tuple[tuple[str, object], ...] = (
    ("torch", torch),
    ("torch.Tensor", torch.Tensor),
    ("torch.nn.functional", F),
    ("torch.nn.Module", torch.nn.Module),
    ("torch.nn.Conv2d", torch.nn.Conv2d),
    ("torch.nn.modules.conv._ConvNd", torch.nn.modules.conv._ConvNd),
    ("torch.nn.BatchNorm2d", torch.nn.BatchNorm2d),
    ("torch.nn.modules.batchnorm._BatchNorm", torch.nn.modules.batchnorm._BatchNorm),
    ("torch.nn.Linear", torch.nn.Linear),
    ("torch.nn.ReLU", torch.nn.ReLU),
    ("torch.nn.MaxPool2d", torch.nn.MaxPool2d),
    ("torch.nn.AdaptiveAvgPool2d", torch.nn.AdaptiveAvgPool2d),
    ("torch.nn.Sequential", torch.nn.Sequential),
    ("torch.nn.CrossEntropyLoss", torch.nn.CrossEntropyLoss),
    ("torch.autograd", torch.autograd),
)

_ERROR = "<raised>"


def settings() -> dict[str, object]:
    """Every setting of ``SETTINGS`` now (a getter that raises reads as one value)."""
    out = {}
    for name, get in SETTINGS:
        try:
            out[name] = get()
        except Exception:  # noqa: BLE001 - a getter this build lacks (no CUDA): a value too
            out[name] = _ERROR
    return out


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
    """The callables of ``before`` that ``after`` holds another object for (or none), as
    "replaced X"; names added since (a lazy submodule) do not count."""
    out = []
    for (prefix, _), old, new in zip(NAMESPACES, before, after, strict=True):
        for name, value in old.items():
            if new.get(name, _ERROR) is not value and (
                callable(value) or isinstance(value, staticmethod | classmethod | property)
            ):
                out.append(f"replaced {prefix}.{name}")
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


def layout_problem(x, channels_last: bool) -> str:
    """Why a batch's ``x`` is not what the declared recipe takes ('' when it is): float32,
    contiguous NCHW, or channels-last where the recipe declares channels_last (it converts)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        return ""  # the audit names a batch of the wrong kind or shape in its own words
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


class Guard:
    """One worker's guard. ``base``: the settings learner code must leave as it found them.

    Settings are held everywhere, between the pipeline's calls too: grader code changes none after
    the recipe's build. Torch's functions across the cells and across each call into learner code
    only: torch patches some lazily in the grader's own steps (an optimizer's ``step`` when one is
    built, ``nn.Module.__init__`` at a ``torch.compile``'s first call)."""

    def __init__(self):
        self.base: dict | None = None
        self.cells: list[dict] | None = None  # torch's functions before the cells, until held
        self.channels_last = False

    def start(self) -> None:
        """Before any learner code runs (the worker's load): the state learner code must keep."""
        self.base, self.cells = settings(), functions()

    def rebase(self) -> None:
        """The settings as grader code left them (the recipe's build: on a GPU cudnn's benchmark)."""
        self.base = settings()

    def hold(self, where: str, since: list[dict] | None = None) -> None:
        """Raise if a setting moved since ``base`` (nothing is held before the first ``start`` or
        pipeline), or a torch function since ``since``."""
        if self.base is None:
            return
        changes = moved(self.base, settings())
        if since is not None:
            changes += replaced(since, functions())
        if changes:
            raise refusal(where, changes)

    def hold_cells(self) -> None:
        """Before a recipe is built: the solution cells changed nothing (their functions once; later
        builds hold the settings only: the previous run's steps may have patched torch)."""
        cells, self.cells = self.cells, None
        self.hold("solution cells" if cells is not None else "code", since=cells)

    def around(self, where: str, call, *args):
        """``call(*args)`` held: a setting moved before it (code running between the pipeline's
        calls: a thread, a hook) or during it, or a torch function replaced during it, refuses."""
        self.hold("code")
        before = functions()
        try:
            return call(*args)
        finally:
            self.hold(where, since=before)

    def wrap(self, inner_cls):
        """``inner_cls`` (the learner's pipeline) with every call into it held, and each batch's
        layout checked: the grader's ``EpochAudit`` wraps this in turn."""
        guard = self

        class HeldPipeline:
            def __init__(self, dataset, batch_size, device, seed):
                # the settings as the recipe's build left them so far: the cells were held against
                # the state before them (build_trainer)
                guard.rebase()
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
                    if isinstance(batch, tuple | list) and len(batch) == 2:
                        why = layout_problem(batch[0], guard.channels_last)
                        if why:
                            raise SettingsChanged(why)
                    yield batch

        HeldPipeline.__name__ = getattr(inner_cls, "__name__", "Pipeline")
        return HeldPipeline


GUARD = Guard()
