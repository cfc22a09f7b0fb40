"""Lesson 11, worker side: the learner's ``train_ddp`` run on 2 gloo ranks, forked from this worker.

**What it does.** ``probe_train`` forks ``WORLD`` rank processes (they stay in this sandbox: same
cgroup, same namespaces, killed with it). Each brings up the default gloo process group (a
``FileStore`` in a private folder, TCP over the namespace's own loopback), builds the rank's model
from ``init_seed + rank`` and a :class:`RecordingDataset` that notes every index it serves, calls
``train_ddp(rank, world_size, model, dataset, config)`` and writes two claims to the folder: the
indices served (JSON) and the trained weights as raw float64 bytes. This process waits for both
ranks (killing them at the deadline) and returns the claims plus one weights blob per rank. Nothing
is judged here, and nothing here counts the communication: the parent reads the kernel's loopback
counters of this sandbox around the call (a count kept in a rank's process could be forged).

**When to use it.** Named as lesson 11's probe module; run in :mod:`grader.probe_worker`.

**Expected gain.** Real DDP over a real process group, graded without trusting any rank.

**Pitfalls.** Everything returned is a claim: a rank runs learner code and can forge its record
and its weights; the parent recomputes the reference from the claimed indices
(:mod:`checks`). ``num_workers > 0`` would serve in other processes, unrecorded: the spec says 0.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
import traceback

import torch._dynamo  # noqa: F401  (DDP's constructor imports it: seconds, paid once here, not per rank)

from grader.assignments.lesson11 import ddp_task, memory_task
from grader.quiz import probe_quiz  # noqa: F401  (the worker finds probes by name)

RANK_SECONDS = 40.0  # both ranks, together; the parent's call timeout is above it


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


def _rank(worker, rank: int, folder: str, data_seed: int, init_seed: int, config: dict) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    claims: dict = {"served": [], "error": ""}
    weights = b""
    try:
        torch.set_num_threads(1)
        store = dist.FileStore(os.path.join(folder, "store"), ddp_task.WORLD)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=ddp_task.WORLD,
                                timeout=datetime.timedelta(seconds=RANK_SECONDS))  # fmt: skip
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
        missing = [k for k in ddp_task.shapes() if k not in state or tuple(state[k].shape) != ddp_task.shapes()[k]]
        if missing:
            raise KeyError(f"the returned model has no parameter {missing[0]} of shape {ddp_task.shapes()[missing[0]]}")
        weights = ddp_task.to_bytes(state)
        claims.update(served=[int(i) for i in dataset.served][:10_000])
    except BaseException as err:  # noqa: BLE001  (the rank's failure is reported, as a claim)
        claims["error"] = f"rank {rank}: {type(err).__name__}: {str(err)[:300]}"
        claims["traceback"] = "".join(traceback.format_exception(type(err), err, err.__traceback__))[-1500:]
    with open(os.path.join(folder, f"rank{rank}.bin"), "wb") as f:
        f.write(weights)
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump(claims, f)


def _fork_ranks(target, folder: str):
    """Fork ``WORLD`` ranks running ``target(rank)``, wait (killing them at the deadline), and
    read back each rank's ``rank{r}.json`` claims and ``rank{r}.bin`` blob."""
    pids = []
    for rank in range(ddp_task.WORLD):
        pid = os.fork()
        if pid == 0:  # the rank: never returns into the worker's loop
            code = 0
            try:
                target(rank)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)
    deadline, alive = time.monotonic() + RANK_SECONDS + 5, set(pids)
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            if os.waitpid(pid, os.WNOHANG)[0]:
                alive.discard(pid)
        time.sleep(0.05)
    late = sorted(pids.index(p) for p in alive)
    for pid in alive:  # a rank stuck in a collective its peer never joined
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    ranks, blobs = [], []
    for rank in range(ddp_task.WORLD):
        try:
            with open(os.path.join(folder, f"rank{rank}.json")) as f:
                claims = json.load(f)
            with open(os.path.join(folder, f"rank{rank}.bin"), "rb") as f:
                blob = f.read(1 << 20)
        except (OSError, ValueError):
            claims, blob = {"error": f"rank {rank} wrote no result"}, b""
        if rank in late:
            claims = {"error": f"rank {rank} did not finish within {RANK_SECONDS:.0f} s and was killed "
                               "(a collective its peer never joined?)"}  # fmt: skip
        ranks.append(claims if isinstance(claims, dict) else {"error": "not a JSON object"})
        blobs.append(blob)
    return ranks, blobs


def probe_train(worker, data_seed: int, init_seed: int, config: dict):
    folder = tempfile.mkdtemp(prefix="ddp-", dir=os.getcwd())
    try:
        ranks, blobs = _fork_ranks(lambda rank: _rank(worker, rank, folder, data_seed, init_seed, config), folder)
        return {"ranks": ranks}, blobs
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _full_state(module) -> dict:
    """The module's parameters as plain full tensors: FSDP2's DTensor shards gathered one at a time
    (a collective: every rank walks the same keys in the same order)."""
    from torch.distributed.tensor import DTensor

    state, out = module.state_dict(), {}
    for key in memory_task.shapes():
        value = state.get(key)
        if not hasattr(value, "shape"):
            raise KeyError(f"the returned model has no parameter {key}")
        out[key] = value.full_tensor() if isinstance(value, DTensor) else value.detach()
    return out


def probe_train_rank(worker, rank: int, port: int, data_seed: int, init_seed: int, form_seed: int):
    """Part (b): this worker *is* rank ``rank`` (each rank a sandbox and a memory cgroup of its own,
    sharing one network namespace, like ``torchrun``'s processes). It joins the process group
    (a ``TCPStore`` on the namespace's loopback, rank 0 hosting it), runs the learner's
    ``train_sharded`` and sends back only its weights' fingerprint. Its memory is the kernel's count,
    read by the parent; nothing is measured here."""
    import ctypes
    import datetime
    import gc

    import torch
    import torch.distributed as dist

    # a fixed mmap threshold: freed tensors go back to the kernel, so the charge follows live ones
    # (glibc's dynamic threshold would keep every transient buffer's pages: see memory_task)
    ctypes.CDLL("libc.so.6").mallopt(-3, 64 << 10)  # M_MMAP_THRESHOLD
    claims: dict = {"error": ""}
    try:
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, memory_task.WORLD, is_master=rank == 0,
                              timeout=datetime.timedelta(seconds=RANK_SECONDS))  # fmt: skip
        dist.init_process_group("gloo", store=store, rank=rank, world_size=memory_task.WORLD,
                                timeout=datetime.timedelta(seconds=RANK_SECONDS))  # fmt: skip
        model = memory_task.model(init_seed)
        batches = memory_task.batches(data_seed, rank)
        fn = worker.ns.get("train_sharded")
        if not callable(fn):
            raise NameError("your solution cells define no function 'train_sharded'")
        out = fn(rank, memory_task.WORLD, model, batches, dict(memory_task.CONFIG))
        out = model if out is None else getattr(out, "module", out)
        if not hasattr(out, "state_dict"):
            raise TypeError(f"train_sharded returned a {type(out).__name__}, not the model (or None)")
        del batches, fn
        gc.collect()  # the optimizer's state goes with train_sharded's frame, before the weights are gathered
        state = _full_state(out)
        bad = [k for k, s in memory_task.shapes().items() if tuple(state[k].shape) != s]
        if bad:
            raise KeyError(f"the returned model's {bad[0]} has shape {tuple(state[bad[0]].shape)}")
        claims["forms"] = memory_task.fingerprint(state, form_seed)
    except BaseException as err:  # noqa: BLE001  (the rank's failure is reported, as a claim)
        claims["error"] = f"rank {rank}: {type(err).__name__}: {str(err)[:300]}"
        claims["traceback"] = "".join(traceback.format_exception(type(err), err, err.__traceback__))[-1500:]
    if dist.is_initialized():
        dist.destroy_process_group()
    return claims, []
