"""Checkpoint and resume: a killed run continues as if it had never stopped.

`save_checkpoint` writes atomically (temp file, fsync, ``os.replace``) everything the run's future depends
on: model, optimizer, scheduler, scaler, early stopping, every RNG and the position in the data;
`load_checkpoint` restores it (``weights_only=True``: keep ``extra`` to plain values) and `CheckpointManager`
keeps ``last.pt`` and ``best.pt``. Bit-exact resume also needs `ResumableRandomSampler` and a DataLoader
``generator``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from effkit.sampler import ResumableRandomSampler  # re-exported: resume needs it
from effkit.seed import rng_state, set_rng_state

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "CheckpointNotFoundError",
    "Progress",
    "ResumableRandomSampler",
    "load_checkpoint",
    "model_fingerprint",
    "save_checkpoint",
]

FORMAT_TAG = "effkit-checkpoint"
FORMAT_VERSION = 1
_TMP_SUFFIX = ".effkit-tmp"


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, unreadable, not ours, or for another model."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint file does not exist."""


@dataclass
class Progress:
    """Where training stands. ``epoch``/``batch_in_epoch`` name the *next* batch to run."""

    epoch: int = 0
    step: int = 0  # optimizer steps done so far
    batch_in_epoch: int = 0
    metric: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    path: str | None = None  # file it was loaded from (not saved)


def _unwrap(model: nn.Module) -> nn.Module:
    # Save the bare model: DDP adds "module." and torch.compile "_orig_mod." to every key,
    # which would make checkpoints depend on how the run was launched.
    model = getattr(model, "_orig_mod", model)
    if isinstance(model, nn.parallel.DistributedDataParallel | nn.DataParallel):
        model = model.module
    return model


def _shapes(model: nn.Module) -> dict[str, list[int]]:
    return {name: list(t.shape) for name, t in _unwrap(model).state_dict().items()}


def model_fingerprint(model: nn.Module) -> str:
    """Short hash of state_dict names and shapes (not values, not dtypes)."""
    text = ";".join(f"{name}:{shape}" for name, shape in sorted(_shapes(model).items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; not possible (nor needed) on Windows.
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write via a temp file in the same directory, then ``os.replace`` it onto ``path``.

    Same directory: ``os.replace`` is only atomic within one file system. fsync before the
    rename: otherwise a power loss can leave a renamed but empty file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}{_TMP_SUFFIX}")
    try:
        with open(tmp, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_directory(path.parent)


def _state(obj: Any) -> Any:
    return None if obj is None else obj.state_dict()


def _build_payload(model: nn.Module, progress: Progress, **components: Any) -> dict[str, Any]:
    return {
        "format": FORMAT_TAG,
        "version": FORMAT_VERSION,
        "fingerprint": model_fingerprint(model),
        "model_shapes": _shapes(model),
        "torch_version": str(torch.__version__),  # TorchVersion is not weights_only-safe
        "saved_at": time.time(),
        "model": _unwrap(model).state_dict(),
        **{name: _state(obj) for name, obj in components.items()},
        "rng": rng_state(),
        "progress": {
            "epoch": progress.epoch,
            "step": progress.step,
            "batch_in_epoch": progress.batch_in_epoch,
            "metric": None if progress.metric is None else float(progress.metric),
            "extra": dict(progress.extra),
        },
    }


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    scaler: torch.amp.GradScaler | None = None,
    early_stopping: Any = None,
    epoch: int = 0,
    step: int = 0,
    batch_in_epoch: int = 0,
    metric: float | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Atomically save a full training checkpoint to ``path``; returns the path.

    ``epoch``/``batch_in_epoch`` are the position of the *next* batch to run (after finishing
    epoch ``e``, save ``epoch=e + 1, batch_in_epoch=0``).
    """
    progress = Progress(epoch, step, batch_in_epoch, metric, extra or {})
    payload = _build_payload(
        model,
        progress,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        early_stopping=early_stopping,
    )
    path = Path(path)
    _atomic_write(path, lambda file: torch.save(payload, file))
    return path


def _read_payload(path: Path, map_location: Any, weights_only: bool) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointNotFoundError(f"checkpoint file '{path}' does not exist")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=weights_only)
    except Exception as error:
        # torch's message is long; keep its specific part ("Unsupported global: ...").
        detail = str(error).partition("WeightsUnpickler error:")[2].strip() or str(error)
        detail = " ".join(detail.split())[:240]
        if "Unsupported global" in detail:  # a readable file, with non-allowlisted objects
            raise CheckpointError(
                f"checkpoint file '{path}' contains Python objects that are not allowed with "
                f"weights_only=True; pass weights_only=False only if you trust the file "
                f"(unpickling can run arbitrary code). Details: {detail}"
            ) from error
        raise CheckpointError(
            f"checkpoint file '{path}' is truncated or corrupt (torch.load could not read it: "
            f"{type(error).__name__}: {detail})"
        ) from error
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_TAG:
        hint = ""
        if (
            isinstance(payload, dict)
            and payload
            and all(isinstance(v, torch.Tensor) for v in payload.values())
        ):
            hint = " It looks like a bare state_dict: load it with model.load_state_dict()."
        raise CheckpointError(
            f"'{path}' is not an effkit checkpoint (no format tag {FORMAT_TAG!r}).{hint}"
        )
    if payload.get("version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"'{path}' has checkpoint format version {payload['version']}, newer than this "
            f"effkit supports ({FORMAT_VERSION}): upgrade effkit"
        )
    return payload


def _check_same_model(path: Path, payload: dict[str, Any], model: nn.Module) -> None:
    saved, current = payload["model_shapes"], _shapes(model)
    if saved == current:
        return
    problems = [f"missing in checkpoint: {k}" for k in current if k not in saved]
    problems += [f"not in model: {k}" for k in saved if k not in current]
    problems += [
        f"{k}: checkpoint {tuple(saved[k])} vs model {tuple(current[k])}"
        for k in current
        if k in saved and saved[k] != current[k]
    ]
    raise CheckpointError(
        f"checkpoint '{path}' is from another model (fingerprint {payload['fingerprint']} vs "
        f"{model_fingerprint(model)}); {len(problems)} mismatching key(s), e.g.: "
        + "; ".join(problems[:5])
    )


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    scaler: torch.amp.GradScaler | None = None,
    early_stopping: Any = None,
    restore_rng: bool = True,
    map_location: Any = "cpu",
    weights_only: bool = True,
) -> Progress:
    """Restore what :func:`save_checkpoint` saved into the given objects; returns progress.

    Raises :class:`CheckpointError` naming the file if it is missing, truncated/corrupt, not
    an effkit checkpoint, from a model with other parameter names/shapes, or lacks the state
    of a component you passed.
    """
    path = Path(path)
    payload = _read_payload(path, map_location, weights_only)
    _check_same_model(path, payload, model)
    components = {
        "optimizer": optimizer,
        "scheduler": scheduler,
        "scaler": scaler,
        "early_stopping": early_stopping,
    }
    # Check everything before changing anything: a failed load leaves the objects untouched.
    for name, obj in components.items():
        if obj is not None and payload.get(name) is None:
            raise CheckpointError(f"checkpoint '{path}' has no {name} state to restore")
    _unwrap(model).load_state_dict(payload["model"])
    for name, obj in components.items():
        if obj is not None:
            obj.load_state_dict(payload[name])
    if restore_rng:
        set_rng_state(payload["rng"])
    return Progress(**payload["progress"], path=str(path))


class CheckpointManager:
    """Keep ``last.pt`` (periodic) and ``best.pt`` (best metric) in one directory.

    Example::

        manager = CheckpointManager("runs/exp1", every_steps=200, metric_mode="max")
        progress = manager.resume(model, optimizer=opt, scheduler=sched)  # fresh if no file
        ...
        if manager.should_save(step):
            manager.save(model, optimizer=opt, scheduler=sched, epoch=epoch, step=step,
                         batch_in_epoch=batch + 1)
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        every_steps: int | None = None,
        every_minutes: float | None = None,
        keep_best: bool = True,
        metric_mode: str = "max",
    ) -> None:
        if every_steps is not None and (not isinstance(every_steps, int) or every_steps < 1):
            raise ValueError(f"every_steps must be an integer >= 1 or None, got {every_steps!r}")
        if every_minutes is not None and not every_minutes > 0:
            raise ValueError(f"every_minutes must be > 0 or None, got {every_minutes!r}")
        if metric_mode not in ("max", "min"):
            raise ValueError(f"metric_mode must be 'max' or 'min', got {metric_mode!r}")
        self.directory = Path(directory)
        self.every_steps = every_steps
        self.every_minutes = every_minutes
        self.keep_best = keep_best
        self.metric_mode = metric_mode
        self.best_metric: float | None = None
        self._last_save_time = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        # Left behind by a save that was killed half-way; never a valid checkpoint.
        for stale in self.directory.glob(f".*{_TMP_SUFFIX}"):
            stale.unlink(missing_ok=True)

    @property
    def last_path(self) -> Path:
        return self.directory / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.directory / "best.pt"

    def should_save(self, step: int) -> bool:
        """True every ``every_steps`` optimizer steps and/or after ``every_minutes``."""
        if self.every_steps is not None and step > 0 and step % self.every_steps == 0:
            return True
        elapsed = time.monotonic() - self._last_save_time
        return self.every_minutes is not None and elapsed >= 60 * self.every_minutes

    def _is_better(self, metric: float | None) -> bool:
        if metric is None or metric != metric:  # None or NaN
            return False
        if self.best_metric is None:
            return True
        if self.metric_mode == "max":
            return metric > self.best_metric
        return metric < self.best_metric

    def save(self, model: nn.Module, *, metric: float | None = None, **kwargs: Any) -> bool:
        """Write ``last.pt``; also ``best.pt`` if ``metric`` is the best so far.

        ``kwargs`` are those of :func:`save_checkpoint`. Returns whether best.pt was updated.
        """
        is_best = self.keep_best and self._is_better(metric)
        if is_best:
            self.best_metric = float(metric)
        extra = dict(kwargs.pop("extra", None) or {})
        # The best metric so far travels in the checkpoint, so a resumed run does not
        # overwrite best.pt with a worse model.
        extra["_effkit_best_metric"] = self.best_metric
        save_checkpoint(self.last_path, model, metric=metric, extra=extra, **kwargs)
        if is_best:
            # Copy bytes rather than re-serialise: same content, and atomic as well.
            with open(self.last_path, "rb") as source:
                _atomic_write(self.best_path, lambda file: shutil.copyfileobj(source, file))
        self._last_save_time = time.monotonic()
        return is_best

    def restore_best(self, model: nn.Module, **kwargs: Any) -> Progress:
        """Load ``best.pt``'s weights into ``model`` (e.g. when early stopping fires).

        RNG states are left alone (``restore_rng=False``): the run is over, and its random
        streams belong to the last step, not the best one. Raises :class:`CheckpointError` if
        there is no best checkpoint (``keep_best=False``, or no metric was ever passed).
        """
        kwargs.setdefault("restore_rng", False)
        return load_checkpoint(self.best_path, model, **kwargs)

    def resume(self, model: nn.Module, **kwargs: Any) -> Progress:
        """Load ``last.pt`` if it exists (see :func:`load_checkpoint`), else a fresh Progress."""
        if not self.last_path.exists():
            return Progress()
        progress = load_checkpoint(self.last_path, model, **kwargs)
        self.best_metric = progress.extra.pop("_effkit_best_metric", None)
        self._last_save_time = time.monotonic()
        return progress
