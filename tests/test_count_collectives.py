"""effkit.data_parallel.count_collectives on 2 gloo ranks: FSDP2's all-gathers and reduce-scatters, counted."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from effkit import data_parallel as dp


def _fsdp2_step(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    cpu = init_device_mesh("cpu", (world,))  # the default mesh is CUDA's wherever a GPU exists
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=cpu)
    fully_shard(model, mesh=cpu)
    x, y = torch.randn(8, 6), torch.randint(4, (8,))
    with dp.count_collectives() as counts:
        F.cross_entropy(model(x), y).backward()
        shard = torch.ones(3)
        dist.all_gather_into_tensor(
            torch.empty(3 * world), shard
        )  # the older spelling, counted too
    restored = dist.all_gather_into_tensor.__name__
    return counts, dp.param_bytes(model), restored


def test_counts_each_units_gathers_and_scatters_with_this_ranks_shard_bytes():
    runs = dp.run_ranks(_fsdp2_step, 2)
    for counts, shard_bytes, restored in runs:
        # 2 units, each gathered for forward and again for backward (resharded after forward)
        assert counts["all_gather"] == [2 * 2 + 1, 2 * shard_bytes + 3 * 4]
        assert counts["reduce_scatter"] == [2, shard_bytes]  # fp32 gradient shards, one per unit
        assert restored == "all_gather_into_tensor"
