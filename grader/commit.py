"""What a timed worker commits at the end of every timed chunk, and how the parent reads it back.

The worker side of :mod:`grader.replay` (which the learner's worker cannot see: its thresholds and
checks are the parent's, :mod:`grader.learner_view`). A state is ``torch.save`` bytes of plain tensors,
read with ``weights_only=True``: no pickle code crosses.
"""

from __future__ import annotations

import io

import torch


def training_state(trainer) -> bytes:
    """What a worker commits: its model's state and its optimizer's per-parameter state."""
    state = {"model": {k: v.detach().cpu() for k, v in trainer.model.state_dict().items()},
             "optimizer": _cpu(trainer.optimizer.state_dict()["state"])}  # fmt: skip
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _cpu(obj):
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    return obj


def load_state(blob_or_path) -> dict:
    """A committed state, refused unless it is ``{"model": {name: tensor}, "optimizer": {...}}``."""
    src = io.BytesIO(blob_or_path) if isinstance(blob_or_path, bytes | bytearray) else blob_or_path
    state = torch.load(src, map_location="cpu", weights_only=True)
    if not (isinstance(state, dict) and isinstance(state.get("model"), dict) and isinstance(state.get("optimizer"), dict)
            and all(torch.is_tensor(v) for v in state["model"].values())):  # fmt: skip
        raise ValueError("not a training state")
    return state
