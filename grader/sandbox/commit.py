"""What a timed worker commits at the end of every timed chunk, and how the parent reads it back.

The worker side of :mod:`grader.timed.replay` (which the learner's worker cannot see: its thresholds and
checks are the parent's, :mod:`grader.sandbox.learner_view`). A state is safetensors bytes (a JSON header
and raw tensor bytes, keys ``model/<name>``, ``optimizer/<id>/<field>``, ``rng/<device>``, ``kept/<field>``):
the parent parses it and unpickles nothing, not even with ``weights_only``. With a freezer the state goes into a sealed
memfd (``to_memfd``): writing it is memory speed, on the clock; the parent copies it out while the
worker is frozen, off the clock (a bert-base state with Adam is ~1.3 GB: seconds through a pipe).
"""

from __future__ import annotations

import fcntl
import os

import torch

SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW  # what the parent requires


def training_state(trainer, kept: dict | None = None) -> bytes:
    """What a worker commits: its model's state and its optimizer's per-parameter state (and what
    its audit kept of the chunk: lesson 2's batches, lesson 3's step losses; ``take_kept``)."""
    return encode(_state(trainer, kept))


def encode(state: dict) -> bytes:
    """A state (``model``, ``optimizer``, optional ``rng`` and ``kept``) as safetensors bytes."""
    from safetensors.torch import save

    flat = {f"model/{k}": v for k, v in state["model"].items()}
    for pid, fields in state["optimizer"].items():
        for field, v in fields.items():
            if v is not None:  # a number (an old optimizer's step) as a float64 scalar
                flat[f"optimizer/{pid}/{field}"] = (
                    v if torch.is_tensor(v) else torch.tensor(v, dtype=torch.float64)
                )
    for part in ("rng", "kept"):
        flat |= {f"{part}/{k}": v for k, v in (state.get(part) or {}).items()}
    out, storages = {}, set()
    for key, v in flat.items():
        v = v.detach().cpu().contiguous()
        where = v.untyped_storage().data_ptr()
        if v.numel() and where in storages:  # tied weights: safetensors stores each storage once
            v = v.clone()
        storages.add(v.untyped_storage().data_ptr())
        out[key] = v
    return save(out)


def decode(blob: bytes) -> dict:
    """Safetensors bytes back to a state's nested dicts; an unknown key is refused."""
    from safetensors.torch import load

    state: dict = {"model": {}, "optimizer": {}}
    for key, v in load(bytes(blob)).items():
        part, _, rest = key.partition("/")
        if part == "model" and rest:
            state["model"][rest] = v
        elif part == "optimizer" and rest.partition("/")[0].isdigit() and rest.partition("/")[2]:
            pid, _, field = rest.partition("/")
            state["optimizer"].setdefault(int(pid), {})[field] = v
        elif part in ("rng", "kept") and rest:
            state.setdefault(part, {})[rest] = v
        else:
            raise ValueError(f"not a training state (key {key[:60]!r})")
    return state


def _state(trainer, kept: dict | None = None) -> dict:
    # The random generators' states too: a replay of the next chunk draws the same dropout masks.
    rng = {"cpu": torch.get_rng_state()}
    if getattr(trainer, "device", torch.device("cpu")).type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(trainer.device)
    state = {
        "model": {k: v.detach().cpu() for k, v in trainer.model.state_dict().items()},
        "optimizer": _cpu(trainer.optimizer.state_dict()["state"]),
        "rng": rng,
    }
    if kept is not None:
        state["kept"] = kept
    return state


def set_rng(state: dict, device) -> None:
    """Restore the generators a committed state carries (a replay starts where the chunk did)."""
    rng = state.get("rng") or {}
    if "cpu" in rng:
        torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.device(device).type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], torch.device(device))


def to_memfd(trainer, kept: dict | None = None) -> tuple[int, int]:
    """The training state in a new memfd sealed against any change: (its fd, its size)."""
    fd = os.memfd_create("effkit-commit", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    with open(fd, "wb", closefd=False) as f:
        f.write(training_state(trainer, kept))
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
    return fd, os.fstat(fd).st_size


def _cpu(obj):
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    return obj


def load_state(blob_or_path) -> dict:
    """A committed state, refused unless it is ``{"model": {name: tensor}, "optimizer": {...}}`` with,
    optionally, ``"rng"``: generator states of the sizes this torch uses (a replay loads them)."""
    blob = blob_or_path
    if not isinstance(blob, bytes | bytearray):
        with open(blob, "rb") as f:
            blob = f.read()
    from safetensors import SafetensorError

    try:
        state = decode(blob)
    except SafetensorError as err:  # a malformed header or sizes: refused by the parser itself
        raise ValueError(f"not a training state ({err})") from err
    if not (
        isinstance(state, dict)
        and isinstance(state.get("model"), dict)
        and isinstance(state.get("optimizer"), dict)
        and all(torch.is_tensor(v) for v in state["model"].values())
    ):
        raise ValueError("not a training state")
    rng = state.get("rng", {})
    sizes = {
        "cpu": (torch.get_rng_state().numel(),) * 2,
        "cuda": (8, 64),
    }  # CUDA's Philox: seed, offset
    if not (
        isinstance(rng, dict)
        and set(rng) <= set(sizes)
        and all(
            torch.is_tensor(v)
            and v.dtype == torch.uint8
            and v.dim() == 1
            and sizes[k][0] <= v.numel() <= sizes[k][1]
            for k, v in rng.items()
        )
    ):
        raise ValueError("not a training state (its generator states)")
    if "kept" in state and not (_kept_batches(state["kept"]) or _kept_losses(state["kept"])):
        raise ValueError("not a training state (what it kept of the chunk)")
    return state


def _kept_losses(kept) -> bool:
    """``{"losses": float64, one per step}``."""
    if not (isinstance(kept, dict) and set(kept) == {"losses"}):
        return False
    losses = kept["losses"]
    return torch.is_tensor(losses) and losses.dtype == torch.float64 and losses.dim() == 1


def _kept_batches(kept) -> bool:
    """``{"x": float32 N x 3 x 32 x 32, "y": int64 N, "sizes": int64 steps summing to N}``."""
    if not (isinstance(kept, dict) and set(kept) == {"x", "y", "sizes"}):
        return False
    x, y, sizes = kept["x"], kept["y"], kept["sizes"]
    return (
        all(torch.is_tensor(t) for t in (x, y, sizes))
        and x.dtype == torch.float32
        and x.dim() == 4
        and tuple(x.shape[1:]) == (3, 32, 32)
        and y.dtype == torch.int64 == sizes.dtype
        and y.dim() == 1 == sizes.dim()
        and len(y) == len(x) == int(sizes.sum())
        and bool((sizes > 0).all())
    )
