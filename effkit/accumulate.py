"""Gradient accumulation that gives exactly the big-batch gradient.

**What it does.** Splits one optimizer step over several micro-batches (an *accumulation
window*) so that a large effective batch fits in memory. Each micro-batch contributes
``loss_sum / window_count`` where ``loss_sum`` is the *sum* of its per-sample (or per-token)
losses and ``window_count`` is the number of samples (or tokens) in the *whole window*. The
accumulated gradient is then bit-for-bit the gradient of the mean loss over the window, as if
the window had been one batch. On DDP, gradient all-reduce is skipped on every micro-step but
the last (``model.no_sync()``), and the step unscales (AMP) *before* clipping.

**When to use it.** The batch size you want does not fit in memory, or you want to keep the
effective batch size fixed while moving to a smaller GPU / more GPUs.

**Expected gain.** Memory: activations of one micro-batch instead of the full batch
(roughly ``accum_steps`` times less activation memory). Speed: none by itself; each micro-step
is a smaller, less efficient kernel launch, and with DDP ``no_sync`` saves
``accum_steps - 1`` all-reduces per step.

**Pitfalls / trade-offs.**

* The classic bug: ``loss.mean() / accum_steps`` per micro-batch. That is only correct if every
  micro-batch has the same number of samples/tokens; with padding masks or a short last batch it
  silently over-weights small micro-batches. Always normalise by the window total.
* BatchNorm statistics are per micro-batch, so accumulation is *not* equivalent for BN models.
* The last window of an epoch may be shorter than ``accum_steps``: :func:`iter_windows` yields
  it, and normalising by its own total keeps its gradient exact (its step is just noisier).
* Under DDP, gradients are *averaged* over ranks. If ranks see different token counts, pass
  :func:`global_window_count` of your local count so the result is the global mean.
* Learning-rate schedules count optimizer steps, not micro-steps.

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
