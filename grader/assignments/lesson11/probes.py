"""Lesson 11, worker side: this worker is one rank running the learner's code.

Part (a) ranks talk only through the grader's relay; part (b) runs gloo on a shared loopback.
Nothing is judged here and everything returned is a claim. ``num_workers`` must be 0: other
processes would serve data unrecorded.
"""

from __future__ import annotations

import ctypes
import datetime
import gc
import traceback

import torch._dynamo  # noqa: F401  (DDP's constructor imports it: seconds, paid before the call)

from grader.assignments.lesson11 import ddp_task, memory_task
from grader.kit.worker import (
    probe_quiz,  # noqa: F401  (the worker finds probes by name)
    relay,
)


class RecordingDataset:
    """A map-style dataset of ``(x[i], y[i])`` that notes every index it serves, in order."""

    def __init__(self, x, y):
        self.x, self.y, self.served = x, y, []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        i = int(i)
        self.served.append(i)
        return self.x[i], self.y[i]


def _failed(claims: dict, rank: int, err: BaseException) -> None:
    """A rank's failure, said as a claim the parent reports (never a verdict)."""
    claims["error"] = f"rank {rank}: {type(err).__name__}: {str(err)[:300]}"
    claims["traceback"] = "".join(traceback.format_exception(type(err), err, err.__traceback__))[
        -1500:
    ]


def probe_train(worker, rank: int, data_seed: int, init_seed: int, config: dict):
    """Part (a): this worker *is* rank ``rank``, a sandbox of its own in a network namespace of its
    own. Its default process group is the grader's relay (:mod:`grader.sandbox.relay`): every collective is a
    request to the parent, which performs it and records what each rank sent. It runs ``train_ddp``
    and returns its claims (the indices served, JSON) and its weights as raw float64 bytes."""
    import torch
    import torch.distributed as dist

    claims: dict = {"served": [], "error": ""}
    weights = b""
    try:
        torch.set_num_threads(1)
        relay.install(rank, ddp_task.WORLD, lambda msg, blobs: _ask(worker, msg, blobs))
        x, y = ddp_task.data(data_seed)
        dataset = RecordingDataset(x, y)
        model = ddp_task.model(init_seed + rank)
        fn = worker.ns.get("train_ddp")
        if not callable(fn):
            raise NameError("your solution cells define no function 'train_ddp'")
        out = fn(rank, ddp_task.WORLD, model, dataset, dict(config))
        out = model if out is None else getattr(out, "module", out)  # a DDP wrapper: its module
        if not isinstance(out, torch.nn.Module):
            raise TypeError(f"train_ddp returned a {type(out).__name__}, not the model (or None)")
        state = out.state_dict()
        missing = [
            k
            for k in ddp_task.shapes()
            if k not in state or tuple(state[k].shape) != ddp_task.shapes()[k]
        ]
        if missing:
            raise KeyError(
                f"the returned model has no parameter {missing[0]} of shape {ddp_task.shapes()[missing[0]]}"
            )
        weights = ddp_task.to_bytes(state)
        claims.update(served=[int(i) for i in dataset.served][:10_000])
    except BaseException as err:  # noqa: BLE001  (the rank's failure is reported, as a claim)
        _failed(claims, rank, err)
    if dist.is_initialized():
        dist.destroy_process_group()
    return claims, [weights]


def _ask(worker, msg: dict, blobs: list) -> dict | None:
    """One request to the parent on the worker's channel, and its answer."""
    worker.chan.send(msg, blobs)
    return worker.chan.receive()


def _full_state(module, arch: dict) -> dict:
    """The module's parameters as plain full tensors: FSDP2's DTensor shards gathered one at a time
    (a collective: every rank walks the same keys in the same order)."""
    from torch.distributed.tensor import DTensor

    state, out = module.state_dict(), {}
    for key in memory_task.shapes(arch):
        value = state.get(key)
        if not hasattr(value, "shape"):
            raise KeyError(f"the returned model has no parameter {key}")
        out[key] = value.full_tensor() if isinstance(value, DTensor) else value.detach()
    return out


def probe_train_rank(
    worker, rank: int, port: int, data_seed: int, init_seed: int, form_seed: int, arch: dict
):
    """Part (b): this worker *is* rank ``rank`` (each rank a sandbox and a memory cgroup of its own,
    sharing one network namespace, like ``torchrun``'s processes), training the model of the
    architecture ``arch`` the parent drew for this grading. It joins the process group
    (a ``TCPStore`` on the namespace's loopback, rank 0 hosting it), runs the learner's
    ``train_sharded`` and sends back only its weights' fingerprint. Its memory is the kernel's count,
    read by the parent; nothing is measured here."""
    import torch
    import torch.distributed as dist

    # a fixed mmap threshold: freed tensors go back to the kernel, so the charge follows live ones
    # (glibc's dynamic threshold would keep every transient buffer's pages: see memory_task)
    ctypes.CDLL("libc.so.6").mallopt(-3, 64 << 10)  # M_MMAP_THRESHOLD
    claims: dict = {"error": ""}
    try:
        torch.set_num_threads(1)
        store = dist.TCPStore(
            "127.0.0.1",
            port,
            memory_task.WORLD,
            is_master=rank == 0,
            timeout=datetime.timedelta(seconds=ddp_task.RANK_SECONDS),
        )
        dist.init_process_group(
            "gloo",
            store=store,
            rank=rank,
            world_size=memory_task.WORLD,
            timeout=datetime.timedelta(seconds=ddp_task.RANK_SECONDS),
        )
        model = memory_task.model(init_seed, arch)
        batches = memory_task.batches(data_seed, rank)
        fn = worker.ns.get("train_sharded")
        if not callable(fn):
            raise NameError("your solution cells define no function 'train_sharded'")
        out = fn(rank, memory_task.WORLD, model, batches, dict(memory_task.CONFIG))
        out = model if out is None else getattr(out, "module", out)
        if not hasattr(out, "state_dict"):
            raise TypeError(
                f"train_sharded returned a {type(out).__name__}, not the model (or None)"
            )
        del batches, fn
        gc.collect()  # the optimizer's state goes with train_sharded's frame, before the weights are gathered
        state = _full_state(out, arch)
        bad = [k for k, s in memory_task.shapes(arch).items() if tuple(state[k].shape) != s]
        if bad:
            raise KeyError(f"the returned model's {bad[0]} has shape {tuple(state[bad[0]].shape)}")
        claims["forms"] = memory_task.fingerprint(state, form_seed, arch)
    except BaseException as err:  # noqa: BLE001  (the rank's failure is reported, as a claim)
        _failed(claims, rank, err)
    if dist.is_initialized():
        dist.destroy_process_group()
    return claims, []
