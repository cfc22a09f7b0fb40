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

from grader.assignments.lesson11 import ddp_task
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


def probe_train(worker, data_seed: int, init_seed: int, config: dict):
    folder = tempfile.mkdtemp(prefix="ddp-", dir=os.getcwd())
    pids = []
    try:
        for rank in range(ddp_task.WORLD):
            pid = os.fork()
            if pid == 0:  # the rank: never returns into the worker's loop
                code = 0
                try:
                    _rank(worker, rank, folder, data_seed, init_seed, config)
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
        return {"ranks": ranks}, blobs
    finally:
        shutil.rmtree(folder, ignore_errors=True)
