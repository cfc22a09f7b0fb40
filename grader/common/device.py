"""Which device the grader measures on when nobody says: CUDA when there is one, else the CPU."""

from __future__ import annotations


def default_device() -> str:
    import torch  # heavy: only the commands that measure pay for it

    return "cuda" if torch.cuda.is_available() else "cpu"
