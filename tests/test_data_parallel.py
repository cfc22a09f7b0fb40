"""effkit.data_parallel on 2 gloo ranks: the launcher, DDP's arithmetic, ZeRO's shards, DCP (CPU, float64)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from effkit import data_parallel as dp

EXACT = {"atol": 1e-12, "rtol": 1e-10}


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).double()


def _data(n=64):
    g = torch.Generator().manual_seed(5)
    return torch.randn(n, 6, generator=g, dtype=torch.float64), torch.randint(3, (n,), generator=g)


def _allreduce_sum(rank, world):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "sum": t.item(),
        "env": os.environ["RANK"],
    }


def test_run_ranks_gives_every_rank_the_group_and_returns_in_rank_order():
    out = dp.run_ranks(_allreduce_sum, 2)
    assert [o["rank"] for o in out] == [0, 1] and [o["env"] for o in out] == ["0", "1"]
    assert all(o["world"] == 2 and o["sum"] == 3.0 for o in out)


def _rank1_raises(rank, world):
    if rank == 1:
        raise ValueError("boom on rank 1")
    dist.barrier()  # rank 0 would wait here for ever: run_ranks must stop it
    return rank


def test_a_failing_rank_stops_every_rank_and_says_which():
    import multiprocessing as mp

    with pytest.raises(RuntimeError, match="(?s)rank 1 raised.*boom on rank 1"):
        dp.run_ranks(_rank1_raises, 2, timeout_s=30)
    assert mp.active_children() == []  # no rank left behind


def _ddp_train(rank, world, accumulation, use_no_sync):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    x, y = _data()
    model = DDP(_mlp(seed=rank))  # different inits: DDP broadcasts rank 0's
    calls = [0]

    def count(state, bucket):
        calls[0] += bucket.is_last()
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        return allreduce_hook(None, bucket)

    model.register_comm_hook(None, count)
    sampler = DistributedSampler(
        TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=True, seed=3
    )
    loader = DataLoader(TensorDataset(x, y), batch_size=4, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    order = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        order.append(list(sampler))
        for i, (xb, yb) in enumerate(loader):
            last = (i + 1) % accumulation == 0
            sync = not use_no_sync or last
            with model.no_sync() if not sync else torch.enable_grad():
                (F.cross_entropy(model(xb), yb) / accumulation).backward()
            if last:
                opt.step()
                opt.zero_grad()
    return {
        "state": {k: v.clone() for k, v in model.module.state_dict().items()},
        "order": order,
        "syncs": calls[0],
    }


def _single_process(orders, accumulation, per_rank=4):
    x, y = _data()
    model = _mlp(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(2):
        steps = len(orders[0][epoch]) // per_rank
        for i in range(steps):
            idx = [j for o in orders for j in o[epoch][i * per_rank : (i + 1) * per_rank]]
            (F.cross_entropy(model(x[idx]), y[idx]) / accumulation).backward()
            if (i + 1) % accumulation == 0:
                opt.step()
                opt.zero_grad()
    return model.state_dict()


@pytest.fixture(scope="module")
def ddp_runs():
    return {no_sync: dp.run_ranks(_ddp_train, 2, args=(2, no_sync)) for no_sync in (True, False)}


def test_ddp_equals_one_process_over_the_global_batch_and_ranks_agree(ddp_runs):
    runs = ddp_runs[True]
    ref = _single_process([r["order"] for r in runs], accumulation=2)
    for r in runs:
        for k, v in ref.items():
            torch.testing.assert_close(r["state"][k], v, **EXACT)
    o0, o1 = runs[0]["order"], runs[1]["order"]
    for e in range(2):  # the sampler: disjoint shards covering the data, reshuffled by set_epoch
        assert sorted(o0[e] + o1[e]) == list(range(64))
    assert o0[0] != o0[1]


def test_no_sync_leaves_one_allreduce_per_optimizer_step_and_the_same_weights(ddp_runs):
    with_no_sync, without = ddp_runs[True], ddp_runs[False]
    steps = 2 * 32 // 4 // 2  # epochs x per-rank batches / accumulation
    assert [r["syncs"] for r in with_no_sync] == [steps, steps]
    assert [r["syncs"] for r in without] == [2 * steps, 2 * steps]  # one per micro-batch
    for k, v in with_no_sync[0]["state"].items():
        torch.testing.assert_close(without[0]["state"][k], v, **EXACT)


def test_ring_cost_model():
    assert dp.ring_allreduce_seconds(1e9, 1, 1e9) == 0.0
    assert dp.ring_allreduce_seconds(1e9, 2, 1e9) == pytest.approx(1.0)  # 2 (N-1)/N = 1
    assert dp.ring_allreduce_seconds(1e9, 8, 1e9, latency_s=1e-3) == pytest.approx(1.75 + 0.014)
    # the bandwidth term tends to 2x the buffer: adding ranks barely costs more per rank
    assert dp.ring_allreduce_seconds(1e9, 1024, 1e9) < 2.0


def test_zero_arithmetic_matches_the_paper():
    psi, n = 7.5e9, 64  # ZeRO paper fig. 1: 7.5B parameters, 64 GPUs, K = 12
    gb = {s: dp.zero_bytes_per_rank(psi, n, s)["total"] / 1e9 for s in range(4)}
    assert gb[0] == pytest.approx(120) and gb[1] == pytest.approx(31.4, abs=0.1)
    assert gb[2] == pytest.approx(16.6, abs=0.1) and gb[3] == pytest.approx(1.9, abs=0.05)


def _zero_vs_adam(rank, world):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    x, y = _data()
    shard = slice(rank * 32, (rank + 1) * 32)
    out = {}
    for name in ("adam", "zero"):
        model = DDP(_mlp(seed=0))
        opt = (
            ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-2)
            if name == "zero"
            else torch.optim.Adam(model.parameters(), lr=1e-2)
        )
        for _ in range(3):
            F.cross_entropy(model(x[shard]), y[shard]).backward()
            opt.step()
            opt.zero_grad()
        out[name] = {
            "state_bytes": dp.optimizer_state_bytes(opt),
            "weights": {k: v.clone() for k, v in model.module.state_dict().items()},
        }
    return out


def test_zero_redundancy_optimizer_halves_adam_state_and_changes_no_weight():
    runs = dp.run_ranks(_zero_vs_adam, 2)
    full = runs[0]["adam"]["state_bytes"]
    n_params = sum(p.numel() for p in _mlp(0).parameters())
    assert full >= 2 * 8 * n_params  # exp_avg + exp_avg_sq in float64
    shards = [r["zero"]["state_bytes"] for r in runs]
    assert sum(shards) == pytest.approx(full, rel=0.05) and max(shards) < 0.8 * full
    for r in runs:
        for k, v in runs[0]["adam"]["weights"].items():
            torch.testing.assert_close(r["zero"]["weights"][k], v, **EXACT)


def _fsdp2(rank, world):
    from torch.distributed.fsdp import fully_shard

    x, y = _data()
    model = _mlp(seed=0)
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    shard = slice(rank * 32, (rank + 1) * 32)
    F.cross_entropy(model(x[shard]), y[shard]).backward()
    opt.step()
    full = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    return {"local": dp.param_bytes(model), "weights": full}


def test_fsdp2_shards_parameters_on_gloo_and_matches_one_process():
    runs = dp.run_ranks(_fsdp2, 2)
    x, y = _data()
    ref = _mlp(seed=0)
    F.cross_entropy(ref(x), y).backward()
    torch.optim.SGD(ref.parameters(), lr=0.1).step()
    total = sum(p.numel() * p.element_size() for p in ref.parameters())
    assert sum(r["local"] for r in runs) == total and max(r["local"] for r in runs) < 0.8 * total
    for r in runs:
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(r["weights"][k], v, **EXACT)


def _dcp_round_trip(rank, world, folder):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard

    model = _mlp(seed=0)
    fully_shard(model)
    dcp.save({"model": model.state_dict()}, checkpoint_id=folder)
    fresh = _mlp(seed=1)
    fully_shard(fresh)
    state = {"model": fresh.state_dict()}
    dcp.load(state, checkpoint_id=folder)
    fresh.load_state_dict(state["model"])
    return {k: v.full_tensor().clone() for k, v in fresh.state_dict().items()}


def test_dcp_saves_each_rank_shard_and_loads_it_back(tmp_path):
    runs = dp.run_ranks(_dcp_round_trip, 2, args=(str(tmp_path / "ckpt"),))
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert (
        sum(f.endswith(".distcp") for f in files) == 2 and ".metadata" in files
    )  # one file per rank
    for k, v in _mlp(seed=0).state_dict().items():
        torch.testing.assert_close(runs[1][k], v, **EXACT)
