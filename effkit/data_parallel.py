"""Data parallelism on one machine: launch N ranks, predict the all-reduce, size ZeRO's shards.

`run_ranks` forks ``world_size`` ranks with the default process group up (gloo on CPU, nccl with a GPU per
rank) and tears all down if one fails; `ring_allreduce_seconds` / `time_allreduce` model and measure the
ring all-reduce; `zero_bytes_per_rank` is ZeRO's memory arithmetic; `optimizer_state_bytes`, `param_bytes`
and `rss_mb` measure a rank; `count_collectives` counts the all-gathers and reduce-scatters a rank starts. Build no process group in the parent: fork copies it.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import inspect
import multiprocessing as mp
import os
import pickle
import resource
import socket
import sys
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist

__all__ = [
    "count_collectives",
    "free_port",
    "optimizer_state_bytes",
    "param_bytes",
    "ring_allreduce_seconds",
    "rss_mb",
    "run_ranks",
    "time_allreduce",
    "zero_bytes_per_rank",
    "ZERO_STAGES",
]


def free_port() -> int:
    """A TCP port nobody listens on right now (the rendezvous port; a race is possible but rare)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn, rank, world_size, args, backend, port, timeout_s, queue, threads) -> None:
    # Before any op: a child forked from a parent whose OpenMP pool ran hangs in its first parallel
    # region; one thread per rank never enters one (and N ranks on N cores want one each anyway).
    torch.set_num_threads(threads)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )  # what torchrun sets
    with contextlib.suppress(
        AttributeError, ValueError, OSError
    ):  # a stuck rank shows where, on the
        faulthandler.dump_traceback_later(
            max(1.0, timeout_s - 2), file=sys.__stderr__
        )  # real stderr (not Jupyter's)
    try:
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s)
        )
        out = fn(rank, world_size, *args)
        # plain pickle: the queue's own pickler would send tensors as shared-memory handles, which
        # need this process alive until the parent reads them (it is about to exit)
        queue.put((rank, True, pickle.dumps(out)))
    except BaseException as err:  # noqa: BLE001  (reported to the parent, which stops every rank)
        queue.put(
            (
                rank,
                False,
                "".join(traceback.format_exception(type(err), err, err.__traceback__))[-3000:],
            )
        )
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(
    fn: Callable,
    world_size: int = 2,
    args: tuple = (),
    backend: str = "gloo",
    timeout_s: float = 120.0,
    start_method: str = "fork",
    threads: int = 1,
) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes with the default process
    group up; return the ranks' return values in rank order. A rank that raises, or a run longer
    than ``timeout_s``, stops every rank and raises ``RuntimeError`` with the rank's traceback;
    a stuck rank also prints its stack on stderr. Each rank uses ``threads`` intra-op threads."""
    if (
        start_method == "fork"
    ):  # DDP's constructor imports torch._dynamo (seconds): once here, shared
        import torch._dynamo  # noqa: F401  by every forked rank instead of paid by each
    ctx = mp.get_context(start_method)
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(fn, r, world_size, args, backend, port, timeout_s, queue, threads),
            daemon=True,
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < world_size:
            try:
                rank, ok, out = queue.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except Exception:  # noqa: BLE001  (queue.Empty: check the clock and the ranks)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ranks did not finish within {timeout_s:.0f} s") from None
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and queue.empty():
                    raise RuntimeError(
                        f"rank {procs.index(dead[0])} died (exit code {dead[0].exitcode})"
                    ) from None
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} raised:\n{out}")
            results[rank] = pickle.loads(out)  # noqa: S301  (our own ranks' return values)
    finally:
        for p in procs:
            p.join(timeout=5 if len(results) == world_size else 0.1)
            if p.is_alive():  # a rank stuck in a collective its failed peer never joins
                p.kill()
                p.join()
    return [results[r] for r in range(world_size)]


def ring_allreduce_seconds(
    nbytes: float, world_size: int, bandwidth_bytes_s: float, latency_s: float = 0.0
) -> float:
    """Ring all-reduce time: each rank sends (and receives) ``2 (N-1)/N * nbytes`` and waits
    ``2 (N-1)`` message latencies (reduce-scatter then all-gather). 0 for one rank."""
    if world_size <= 1:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps / world_size * nbytes / bandwidth_bytes_s + steps * latency_s


def time_allreduce(
    nbytes: int, repeats: int = 10, dtype: torch.dtype = torch.float32
) -> list[float]:
    """Inside a rank: seconds per ``all_reduce`` of an ``nbytes`` buffer, ``repeats`` times (one
    warm-up first; a barrier before each so every rank starts together)."""
    x = torch.ones(max(1, nbytes // torch.tensor([], dtype=dtype).element_size()), dtype=dtype)
    dist.all_reduce(x)
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
    return times


# ZeRO stage -> which of (parameters, gradients, optimizer state) are sharded over the ranks.
ZERO_STAGES = {
    0: (False, False, False),
    1: (False, False, True),
    2: (False, True, True),
    3: (True, True, True),
}


def zero_bytes_per_rank(
    n_params: int,
    world_size: int,
    stage: int,
    param_bytes: float = 2,
    grad_bytes: float = 2,
    optim_bytes: float = 12,
) -> dict[str, float]:
    """Model-state bytes each rank holds under ZeRO ``stage`` (0 = plain DDP). Defaults are the
    paper's mixed-precision Adam: 2 (fp16 weights) + 2 (fp16 grads) + 12 (fp32 master weights, m, v)
    bytes per parameter. Activations, buffers and fragmentation come on top."""
    shard_p, shard_g, shard_o = ZERO_STAGES[stage]
    out = {
        "params": n_params * param_bytes / (world_size if shard_p else 1),
        "grads": n_params * grad_bytes / (world_size if shard_g else 1),
        "optimizer": n_params * optim_bytes / (world_size if shard_o else 1),
    }
    out["total"] = sum(out.values())
    return out


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of tensors in ``optimizer.state`` on this rank (Adam: exp_avg, exp_avg_sq, step).
    ``ZeroRedundancyOptimizer`` keeps only its shard's state in its local optimizer; it assigns
    *whole* parameter tensors to ranks, so one dominant layer leaves the shards uneven."""
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer wraps a local one
    local = [
        t.to_local() if hasattr(t, "to_local") else t  # FSDP2's state is DTensors: the local shard
        for state in inner.state.values()
        for t in state.values()
        if torch.is_tensor(t)
    ]
    return sum(t.numel() * t.element_size() for t in local)


def param_bytes(module: torch.nn.Module) -> int:
    """Bytes of the parameters this rank stores locally (an FSDP2 DTensor counts its local shard)."""
    total = 0
    for p in module.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total


def rss_mb(peak: bool = False) -> float:
    """This process's resident memory now (``/proc/self/statm``), or its peak (``ru_maxrss``). After
    a fork the peak includes pages inherited from the parent: compare differences, not levels."""
    if peak:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# torch.distributed functions FSDP2 calls (as ``dist.<name>``: the newer and the older spelling),
# and which argument holds this rank's shard: an all-gather's input, a reduce-scatter's output.
_SHARD_ARGUMENT = {
    "all_gather_single": ("all_gather", "input_tensor"),
    "all_gather_into_tensor": ("all_gather", "input_tensor"),
    "reduce_scatter_single": ("reduce_scatter", "output"),
    "reduce_scatter_tensor": ("reduce_scatter", "output"),
}


@contextlib.contextmanager
def count_collectives():
    """Inside a rank: count the all-gathers and reduce-scatters started through ``torch.distributed``
    while the block runs, and the bytes of this rank's shard in each (the all-gather's input, the
    reduce-scatter's output). Yields ``{"all_gather": [calls, bytes], "reduce_scatter": [calls,
    bytes]}``. It wraps the module's functions, so it sees callers that look them up there (FSDP2
    does), not calls from inside ``distributed_c10d`` itself."""
    counts = {"all_gather": [0, 0], "reduce_scatter": [0, 0]}
    originals = {name: getattr(dist, name) for name in _SHARD_ARGUMENT if hasattr(dist, name)}

    def counted(name, fn):
        kind, argument = _SHARD_ARGUMENT[name]
        signature = inspect.signature(fn)

        def wrapper(*args, **kwargs):
            shard = signature.bind(*args, **kwargs).arguments[argument]
            counts[kind][0] += 1
            counts[kind][1] += shard.numel() * shard.element_size()
            return fn(*args, **kwargs)

        return wrapper

    try:
        for name, fn in originals.items():
            setattr(dist, name, counted(name, fn))
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
