"""Gradient accumulation that gives exactly the big-batch gradient.

Each micro-batch contributes ``loss_sum / window_count`` (the *sum* of its losses over the samples or tokens of
the whole window), so the accumulated gradient is the window's mean-loss gradient even with padding or a short
last window; under DDP all-reduce runs on the last micro-step only, and AMP unscales before clipping.
Never use ``loss.mean() / accum_steps``: it over-weights small micro-batches. BatchNorm models are not exact.

Example::

    acc = GradAccumulator(model, optimizer, accum_steps=4, scaler=scaler, max_grad_norm=1.0)
    for window in iter_windows(loader, acc.accum_steps):
        total = sum(int((y != -100).sum()) for _, y in window)  # tokens in the window
        for i, (x, y) in enumerate(window):
            with acc.micro_step(is_last=i == len(window) - 1):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = model(x)
                loss_sum = F.cross_entropy(
                    logits.flatten(0, 1), y.flatten(), reduction="sum", ignore_index=-100
                )
                acc.backward(loss_sum, total)
        grad_norm = acc.step()
        scheduler.step()
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["GradAccumulator", "global_window_count", "iter_windows", "window_counts"]

T = TypeVar("T")


def _check_accum_steps(accum_steps: object) -> int:
    # bool is an int subclass; `accum_steps=True` is almost certainly a bug.
    if isinstance(accum_steps, bool) or not isinstance(accum_steps, int) or accum_steps < 1:
        raise ValueError(
            f"accum_steps must be an integer >= 1 (number of micro-batches per optimizer "
            f"step), got {accum_steps!r}"
        )
    return accum_steps


def iter_windows(iterable: Iterable[T], accum_steps: int) -> Iterator[list[T]]:
    """Group micro-batches into windows of ``accum_steps``; the last one may be shorter.

    The short last window is yielded (not dropped) so no sample is skipped; normalising by its
    own total count keeps its gradient exact.
    """
    accum_steps = _check_accum_steps(accum_steps)
    iterator = iter(iterable)
    while window := list(itertools.islice(iterator, accum_steps)):
        yield window


def window_counts(counts: Sequence[int], accum_steps: int) -> list[int]:
    """Total count of each window, given per-micro-batch counts (last window may be short).

    >>> window_counts([3, 5, 2, 4, 1], accum_steps=2)
    [8, 6, 1]
    """
    accum_steps = _check_accum_steps(accum_steps)
    return [sum(counts[i : i + accum_steps]) for i in range(0, len(counts), accum_steps)]


def global_window_count(local_count: float, group=None) -> float:
    """The count to pass to :meth:`GradAccumulator.backward` under DDP.

    DDP *averages* gradients over ``world_size`` ranks. Dividing each rank's loss sum by
    ``global_count / world_size`` makes that average equal to ``sum(all losses) / global_count``
    even when ranks hold different numbers of tokens. Without a process group it returns
    ``local_count`` unchanged.
    """
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return float(local_count)
    # float64 keeps token counts exact; gloo needs CPU tensors, NCCL needs CUDA ones.
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    total = torch.tensor(float(local_count), dtype=torch.float64, device=device)
    dist.all_reduce(total, group=group)
    return total.item() / dist.get_world_size(group)


class GradAccumulator:
    """Accumulate exact big-batch gradients over micro-batches, then step once per window."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        accum_steps: int,
        scaler: torch.amp.GradScaler | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        self.accum_steps = _check_accum_steps(accum_steps)
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0 or None, got {max_grad_norm!r}")
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        self.max_grad_norm = max_grad_norm
        self._is_ddp = isinstance(model, DistributedDataParallel)
        self._in_no_sync = False
        self._reset_window()

    def _reset_window(self) -> None:
        self.micro_steps_done = 0
        self._window_count: float | None = None
        self._last_backward_synced = True

    def windows(self, iterable: Iterable[T]) -> Iterator[list[T]]:
        """Shorthand for ``iter_windows(iterable, self.accum_steps)``."""
        return iter_windows(iterable, self.accum_steps)

    @contextlib.contextmanager
    def micro_step(self, is_last: bool) -> Iterator[None]:
        """Context for one micro-batch's forward+backward.

        On DDP, non-final micro-steps run under ``model.no_sync()``: their gradients stay
        local and are all-reduced together with the final micro-step's backward (one
        all-reduce per window instead of ``accum_steps``). Run the forward *and* the
        backward inside it: DDP decides during forward whether the next backward syncs.
        Outside DDP this is a no-op.
        """
        if is_last or not self._is_ddp:
            yield
            return
        self._in_no_sync = True
        try:
            with self.model.no_sync():
                yield
        finally:
            self._in_no_sync = False

    def backward(self, loss_sum: torch.Tensor, window_count: float) -> torch.Tensor:
        """Backpropagate ``loss_sum / window_count`` (scaled by the GradScaler if any).

        ``loss_sum``: the *sum* of per-sample/per-token losses of this micro-batch
        (e.g. ``reduction="sum"``). ``window_count``: samples/tokens in the *whole window*,
        identical for every micro-step of the window. Returns the normalised loss (detached),
        so summing the returned values over a window gives the window's mean loss.
        """
        if self.micro_steps_done >= self.accum_steps:
            raise RuntimeError(
                f"backward() called {self.micro_steps_done + 1} times in one window but "
                f"accum_steps={self.accum_steps}: call step() at the end of each window"
            )
        count = float(window_count)
        if not count > 0:
            raise ValueError(
                f"window_count must be > 0 (samples/tokens in the window), got {window_count!r}"
            )
        if self._window_count is not None and count != self._window_count:
            # The usual cause is passing this micro-batch's count instead of the window's.
            raise ValueError(
                f"window_count changed within a window ({self._window_count:g} then {count:g}): "
                f"pass the total count of the whole window to every backward() of the window"
            )
        self._window_count = count
        loss = loss_sum / count
        scaled = self.scaler.scale(loss) if self.scaler is not None else loss
        scaled.backward()
        self.micro_steps_done += 1
        self._last_backward_synced = not self._in_no_sync
        return loss.detach()

    def step(self) -> torch.Tensor | None:
        """End the window: unscale, clip, optimizer step, zero grads.

        Returns the total gradient norm (before clipping) when ``max_grad_norm`` is set,
        else ``None``. With a GradScaler the norm can be inf/nan on an overflow step; the
        scaler then skips the update and lowers its scale, which is expected.
        """
        if self.micro_steps_done == 0:
            raise RuntimeError("step() called before any backward() in this window")
        if self._is_ddp and not self._last_backward_synced:
            raise RuntimeError(
                "the last micro-step of the window ran under no_sync(), so gradients were "
                "never all-reduced across ranks: pass is_last=True for the final micro-step"
            )
        grad_norm = None
        if self.max_grad_norm is not None:
            if self.scaler is not None:
                # Gradients are still multiplied by the loss scale: clipping them now would
                # compare a scaled norm with max_grad_norm. Unscale in place first (the
                # scaler remembers it and will not unscale again in scaler.step).
                self.scaler.unscale_(self.optimizer)
            grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        # set_to_none frees gradient memory between windows and makes the next backward
        # write instead of add (slightly faster).
        self.optimizer.zero_grad(set_to_none=True)
        self._reset_window()
        return grad_norm
