"""What each 2-rank data-parallel recipe costs in memory on this CPU, measured by the kernel.

    sudo python grader/assignments/lesson11/calibration/lesson11_rank_memory.py [WIDTH LAYERS]      (default 1024 4: 4.2M parameters)
    sudo MALLOC_MMAP_THRESHOLD_=65536 python grader/assignments/lesson11/calibration/lesson11_rank_memory.py 768 32

glibc's default *dynamic* mmap threshold keeps freed large blocks in the heap, so a rank's memory
tracks the peak of every transient buffer (768 x 32, 18.9M parameters: DDP 21.9, DDP + bucket view
17.8, ZeRO-1 18.2, ZeRO-1 + view 14.1, FSDP2 29.3 B per parameter and rank); with a fixed threshold
(the environment variable above, or ``mallopt`` as lesson 11's grader does) freed tensors go back to
the kernel and the figures follow the arithmetic: 21.1, 17.2, 17.2, 13.3, 10.1 (2026-11-26, AMD EPYC).

For issue 20's lesson 11 (b) ("a per-rank memory budget only sharded optimizer state or FSDP fits"):
before a grader can set such a budget, the budget has to separate the recipes in *process* memory,
not only in the bytes of the tensors the lesson counts. This process (torch imported, like the
grader's worker) joins a fresh cgroup v1 memory group, then for each recipe forks 2 gloo ranks
that build an MLP, wrap it, and train 4 Adam steps; the group's ``memory.max_usage_in_bytes``
(reset before each recipe) minus its usage before the fork is the two ranks' peak growth, printed
per parameter and rank. Needs root and cgroup v1's memory controller.

Recipes: ``ddp`` (DDP + Adam), ``ddp_view`` (``gradient_as_bucket_view=True``), ``zero``
(``ZeroRedundancyOptimizer`` over Adam: ZeRO-1), ``zero_view``, ``fsdp`` (FSDP2 ``fully_shard`` per
Linear, the model built in full on each rank first) and ``fsdp_meta`` (built on the meta device,
then ``to_empty`` + ``reset_parameters``).
"""

from __future__ import annotations

import datetime
import os
import sys
import tempfile
import time

import torch
import torch._dynamo  # noqa: F401  (DDP imports it: paid here, before the fork, as in the grader's worker)
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer

GROUP = "/sys/fs/cgroup/memory/effkit-rank-memory"
RECIPES = ("ddp", "ddp_view", "zero", "zero_view", "fsdp", "fsdp_meta")


def mlp(width: int, layers: int) -> torch.nn.Sequential:
    mods = [torch.nn.Linear(32, width), torch.nn.ReLU()]
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(width, 4))


def _shard(net: torch.nn.Module) -> torch.nn.Module:
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    return fully_shard(net)


def rank(r: int, recipe: str, folder: str, width: int, layers: int) -> None:
    torch.set_num_threads(1)
    store = dist.FileStore(os.path.join(folder, "store"), 2)
    dist.init_process_group(
        "gloo", store=store, rank=r, world_size=2, timeout=datetime.timedelta(seconds=120)
    )
    torch.manual_seed(0)
    if recipe == "fsdp_meta":
        with torch.device("meta"):
            net = mlp(width, layers)
        model = _shard(net)
        model.to_empty(device="cpu")
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                layer.reset_parameters()
    elif recipe == "fsdp":
        model = _shard(mlp(width, layers))
    else:
        model = torch.nn.parallel.DistributedDataParallel(
            mlp(width, layers), gradient_as_bucket_view=recipe.endswith("view")
        )
    if recipe.startswith("zero"):
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam)
    else:
        opt = torch.optim.Adam(model.parameters())
    g = torch.Generator().manual_seed(r)
    for _ in range(4):
        model(torch.randn(16, 32, generator=g)).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()


def _read(name: str) -> int:
    with open(os.path.join(GROUP, name)) as f:
        return int(f.read())


def main(width: int, layers: int) -> None:
    os.makedirs(GROUP, exist_ok=True)
    with open(os.path.join(GROUP, "tasks"), "w") as f:
        f.write(str(os.getpid()))  # this process and every rank it forks are charged here
    params = sum(p.numel() for p in mlp(width, layers).parameters())
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {os.getloadavg()[0]:.2f}; "
        f"MLP width {width} x {layers} layers: {params / 1e6:.2f}M fp32 parameters; 2 gloo ranks, 4 Adam steps"
    )
    # the first run pays one-off costs (gloo, allocator arenas): a warm-up, printed but not a figure
    for i, recipe in enumerate(("ddp", *RECIPES)):
        with open(os.path.join(GROUP, "memory.max_usage_in_bytes"), "w") as f:
            f.write("0")  # v1: resets the peak to the current usage
        before, start, folder, pids = (
            _read("memory.usage_in_bytes"),
            time.perf_counter(),
            tempfile.mkdtemp(),
            [],
        )
        for r in range(2):
            pid = os.fork()
            if pid == 0:
                try:
                    rank(r, recipe, folder, width, layers)
                finally:
                    os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        peak = _read("memory.max_usage_in_bytes") - before
        label = "(warm-up)" if i == 0 else recipe
        print(
            f"{label:10s} peak growth {peak / 2**20:7.1f} MiB = {peak / params / 2:5.1f} bytes per parameter and rank "
            f"({time.perf_counter() - start:.1f} s)",
            flush=True,
        )


if __name__ == "__main__":
    width, layers = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (1024, 4)
    main(width, layers)
