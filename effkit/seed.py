"""Seeding and determinism.

`seed_everything` seeds Python, NumPy and torch and, on request, turns on deterministic algorithms (keep
that out of benchmarks); `rng_state` / `set_rng_state` capture and restore every generator for resume.
DataLoader workers need a seeded ``generator`` too.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool = False) -> torch.Generator:
    """Seed every RNG we know of and return a seeded ``torch.Generator`` for DataLoaders."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        # cuBLAS needs a fixed workspace to be deterministic; must be set before the first matmul.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    else:
        torch.use_deterministic_algorithms(False)
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def rng_state() -> dict:
    """Capture Python, NumPy, torch-CPU and CUDA RNG states as plain, picklable objects."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        # Stored as plain lists/ints so checkpoints load with torch.load(weights_only=True).
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state(),
    }
    # A process forked after CUDA started cannot touch CUDA at all (not even to read its RNG):
    # it has no CUDA RNG to save, so it saves the host RNGs only.
    if torch.cuda.is_available() and not torch.cuda._is_in_bad_fork():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` captured."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
