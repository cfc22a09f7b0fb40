"""Early stopping on a validation metric.

`EarlyStopping` tracks the best value and says stop after ``patience`` epochs without an improvement larger
than ``min_delta`` (NaN is no improvement). It picks when to stop, not which weights to keep: save the best
checkpoint when ``improved``, and save its ``state_dict`` so a resumed run keeps its patience count.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["EarlyStopping"]


class EarlyStopping:
    """Stop after ``patience`` epochs whose metric did not beat the best by ``min_delta``.

    Example::

        stopper = EarlyStopping(patience=3, mode="max")
        for epoch in range(max_epochs):
            train_one_epoch()
            if stopper.step(evaluate()):
                break
    """

    def __init__(self, patience: int, mode: str = "max", min_delta: float = 0.0) -> None:
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(
                f"patience must be an integer >= 0 (epochs without improvement tolerated), "
                f"got {patience!r}"
            )
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        if not (isinstance(min_delta, int | float) and math.isfinite(min_delta)) or min_delta < 0:
            raise ValueError(f"min_delta must be a finite number >= 0, got {min_delta!r}")
        self.patience = patience
        self.mode = mode
        self.min_delta = float(min_delta)
        self.best: float | None = None  # best value seen so far, None before the first step
        self.best_epoch: int | None = None  # index (0-based) of the step that set `best`
        self.bad_epochs = 0  # consecutive steps without improvement
        self.epochs = 0  # steps seen
        self.improved = False  # whether the last step set a new best
        self.should_stop = False

    def _is_improvement(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        if self.mode == "max":
            return value > self.best + self.min_delta
        return value < self.best - self.min_delta

    def step(self, value: float) -> bool:
        """Record one epoch's metric; returns ``True`` when training should stop."""
        value = float(value)  # also accepts 0-dim tensors and numpy scalars
        self.improved = self._is_improvement(value)
        if self.improved:
            self.best = value
            self.best_epoch = self.epochs
            self.bad_epochs = 0
        else:
            self.bad_epochs += 1
        self.epochs += 1
        # `not improved` matters only for patience=0 (stop at the first non-improvement).
        self.should_stop = not self.improved and self.bad_epochs >= self.patience
        return self.should_stop

    def state_dict(self) -> dict[str, Any]:
        """Plain Python values only, so it loads with ``torch.load(weights_only=True)``."""
        return {
            "patience": self.patience,
            "mode": self.mode,
            "min_delta": self.min_delta,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "epochs": self.epochs,
            "improved": self.improved,
            "should_stop": self.should_stop,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters and the best value.

        ``patience`` and ``min_delta`` keep the values given to the constructor (changing
        them when resuming is legitimate); ``mode`` must match, since ``best`` is only
        meaningful in its direction.
        """
        if state["mode"] != self.mode:
            raise ValueError(
                f"EarlyStopping state was saved with mode={state['mode']!r} but this instance "
                f"has mode={self.mode!r}"
            )
        self.best = state["best"]
        self.best_epoch = state["best_epoch"]
        self.bad_epochs = state["bad_epochs"]
        self.epochs = state["epochs"]
        self.improved = state["improved"]
        self.should_stop = state["should_stop"]

    def __repr__(self) -> str:
        return (
            f"EarlyStopping(patience={self.patience}, mode={self.mode!r}, "
            f"min_delta={self.min_delta}, best={self.best}, bad_epochs={self.bad_epochs})"
        )
