# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 11 — Data parallelism: exercise
#
# Turn a single-process training loop into a correct **data-parallel** one. Write
# `train_ddp(rank, world_size, model, dataset, config)`. The grader runs it on **2 ranks** (2
# processes on a CPU, the default process group already up, as `torchrun` plus
# `dist.init_process_group(...)` would leave it) and hands each rank:
#
# * `model`: an MLP (float64). **Each rank gets different initial weights**: make every rank start
#   from rank 0's (DDP does that when it wraps the model);
# * `dataset`: a map-style dataset of `(features, label)` pairs, the same on every rank (128 rows);
# * `config`: `{"epochs": 2, "batch_size": 8, "accumulation": 3, "lr": 0.05, "momentum": 0.9}`;
#   `batch_size` is **per rank**.
#
# Train with `torch.optim.SGD(lr, momentum)` on `F.cross_entropy` (mean over the batch), for
# `config["epochs"]` epochs, stepping the optimizer once every `accumulation` micro-batches of each
# rank. Each rank sees 8 micro-batches per epoch, which 3 does not divide: the epoch's **last window
# is shorter** (3, 3, then 2) and **steps too**, at the end of its epoch, as Hugging Face Accelerate
# does at the end of a dataloader; nothing carries into the next epoch. Requirements:
#
# * each rank reads only **its shard**, every sample once per epoch across the ranks, **reshuffled
#   every epoch** (a `DistributedSampler` with `shuffle=True`, and `set_epoch`); keep the
#   `DataLoader`'s `num_workers=0` (the grader records what the dataset serves);
# * the gradients are averaged across the ranks by **`DistributedDataParallel`**, and **only once per
#   optimizer step** (`no_sync()` on the other micro-batches);
# * the accumulated gradient must equal the gradient of the mean loss over the whole window (the
#   shorter window's too: the mean over its own micro-batches);
# * return the trained model (or `None`: the grader then reads the `model` it passed).
#
# **How it is graded.** Outside your notebook, on data and initial weights the grader draws. Each
# rank is a process of its own that shares nothing with the other, and its default process group
# is the **grader's**: every collective (DDP's all-reduces and broadcasts, or yours) is performed by
# the grader, which records what each rank sent. Each rank sends back the indices its dataset served
# and its final weights (raw bytes). The grader then trains **one process** itself over the same
# global batches (each step's micro-batches = what both ranks served for it, rank 0's initial
# weights) and compares:
#
# * `test_weights` (4 points): every rank's weights equal that one-process run (max difference
#   1e-8), having served its share of the data and all-reduced at least one whole gradient (213 KB)
#   per optimizer step;
# * `test_sampler` (3 points): every epoch, each sample served exactly once across the ranks, in a
#   new order each epoch;
# * `test_no_sync` (2 points): on a run that passes `test_weights`, exactly one gradient all-reduce
#   per optimizer step (every all-reduce counts, inside DDP or not; 6 for 16 micro-batches), in which
#   each rank sent **its own gradient accumulated over the step's micro-batches** (the grader
#   recomputes it from the samples that rank served).
#
# To try it yourself: `from effkit.data_parallel import run_ranks` runs a function on 2 gloo ranks
# from this notebook (see the lesson).

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

# %% nbgrader={"grade": false, "grade_id": "train_ddp", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_ddp(rank, world_size, model, dataset, config):
    """Trains `model` on this rank's shard of `dataset`, gradients averaged by DDP; returns it."""
    ### BEGIN SOLUTION
    ddp = DDP(model)  # broadcasts rank 0's weights, then all-reduces gradients in buckets during backward
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=config["batch_size"], sampler=sampler)
    opt = torch.optim.SGD(ddp.parameters(), lr=config["lr"], momentum=config["momentum"])
    acc, n = config["accumulation"], len(loader)  # n micro-batches per epoch
    for epoch in range(config["epochs"]):
        sampler.set_epoch(epoch)  # a new permutation each epoch, the same on every rank
        for i, (x, y) in enumerate(loader):
            window = min(acc, n - i // acc * acc)  # the epoch's last window is shorter when acc does not divide n
            last = (i + 1) % acc == 0 or i + 1 == n
            with contextlib.nullcontext() if last else ddp.no_sync():  # all-reduce on the window's last only
                (F.cross_entropy(ddp(x), y) / window).backward()  # the window's mean loss
            if last:
                opt.step()
                opt.zero_grad()
    return model
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_weights", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_weights", "lesson11.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_sampler", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_sampler", "lesson11.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_no_sync", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_no_sync", "lesson11.ipynb")

# %% [markdown]
# ## Part (b) — fit a per-rank memory budget
#
# Write `train_sharded(rank, world_size, model, batches, config)`. The grader runs it on 2 ranks
# with the default `gloo` process group up (`torchrun` plus `dist.init_process_group("gloo")`) and
# hands each rank:
#
# * `model`: an MLP, **float32**, **drawn per grading** (17-19 M parameters), the **same initial
#   weights** on every rank. It is not the lesson's flat `nn.Sequential`: an input `Linear`, then two
#   *stages* (each an `nn.Sequential`) of 12-16 blocks in all, each block `Linear(512, h) -> ReLU ->
#   Linear(h, 512) -> ReLU` with its own `h` (384 to 1792: uneven blocks), then an output `Linear`.
#   Print one in your own tries: `from grader.assignments.lesson11 import memory_task as m`, then
#   `print(m.model(0, m.draw(random.Random(1))))`;
# * `batches`: this rank's list of `(x, y)` micro-batches, one per optimizer step (16 rows each);
# * `config`: `{"steps": 3, "lr": 0.001}`.
#
# Train with `torch.optim.Adam(lr=config["lr"])` (its other defaults) on `F.cross_entropy` (mean
# over the batch): one optimizer step per micro-batch, the gradients averaged across the ranks, so
# that every rank ends with the weights **one process** would reach on the global batch (both
# ranks' `k`-th micro-batches together). Return the model (or `None`).
#
# **The budget: 11.5 bytes per parameter on each rank**, at the peak, as the kernel charges memory
# (about 1 byte of it goes to fixed costs: gloo's buffers, the inputs, the allocator). Do the
# arithmetic first (the lesson's section 4, "ZeRO: shard what every rank holds"): what does each
# recipe hold per parameter on each rank, and which copies does sharding remove? Which tensors does a
# ZeRO-1 rank still hold whole? When FSDP2 runs a unit, what does it hold in full, and which unit is
# the largest *on this model*: the cell you wrote for the lesson's flat model may not be the answer.
#
# **How it is graded.** Outside your notebook, each rank as `torchrun` would start it: a process of
# its own, here a sandboxed worker of its own (its own memory cgroup; the two share one private
# network namespace, so gloo reaches the other rank and nothing else). The grader reads the
# kernel's peak charge of each rank's sandbox above what it held once torch and the setup cell had
# loaded (before any of your cells ran), divided by the parameter count; the larger of the two
# ranks must fit. Each rank sends back a fingerprint of its final weights (bilinear forms `u' W v`
# with random `u`, `v` per tensor), which the grader compares with its own one-process Adam run.
#
# * `test_memory_budget` (3 points): every rank's weights equal the one-process run (tolerance
#   1e-5 in RMS), and each rank's peak is within the budget.
#
# Each rank's freed memory goes back to the kernel (the grader fixes glibc's mmap threshold), so
# the peak follows the tensors alive at the worst moment, not every buffer ever allocated.

# %% nbgrader={"grade": false, "grade_id": "train_sharded", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_sharded(rank, world_size, model, batches, config):
    """Trains `model` with Adam, one step per micro-batch of `batches`, gradients averaged across the ranks,
    within 11.5 bytes per parameter on this rank; returns it."""
    ### BEGIN SOLUTION
    from torch.distributed.device_mesh import init_device_mesh

    cpu = init_device_mesh("cpu", (world_size,))  # the default mesh follows the machine's GPU, the batches don't
    # The arithmetic: any ZeRO-1 keeps whole parameters and gradients (4 + 4) plus half of Adam (4) = 12;
    # FSDP2 holds 8 in shards plus the unit it has gathered (its parameters and their gradients, 8 x its
    # share). This model is nested (two stages of blocks): a unit per block gathers ~1/10 of it at most,
    # a unit per stage over half, the root alone all of it.
    for module in model.modules():
        if module is not model and any(isinstance(c, torch.nn.Linear) for c in module.children()):
            fully_shard(module, mesh=cpu)  # a block: its two Linear layers gathered together, alone
    fully_shard(model, mesh=cpu)  # the root: the input and output layers
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])  # built on the shards: half the moments
    for x, y in batches:
        F.cross_entropy(model(x), y).backward()  # gradients reduce-scattered (averaged) into shards
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_memory_budget", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_memory_budget", "lesson11.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., ..., "q5": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. A ring all-reduce of a B-byte gradient buffer over N ranks: each rank sends about
#    (a) (N - 1) × B, so the time grows linearly with the number of ranks;
#    (b) B / N, so the time shrinks as more ranks share the work;
#    (c) 2 (N - 1) / N × B, so the time barely grows with N.
# 2. A DDP job forgets `sampler.set_epoch(epoch)`. What happens?
#    (a) the ranks read overlapping shards from the second epoch on;
#    (b) every epoch repeats the first epoch's order on every rank;
#    (c) the sampler raises an error when the second epoch starts.
# 3. ZeRO stage 1 (`ZeroRedundancyOptimizer`) on N ranks divides by N
#    (a) the optimizer state only (Adam's moments, any fp32 master weights);
#    (b) the optimizer state and the gradients, each rank keeping its shard;
#    (c) the optimizer state, the gradients and the parameters themselves.
# 4. DDP puts gradients in ~25 MB buckets so that
#    (a) each rank keeps only its own bucket of the gradients, saving memory;
#    (b) a bucket fits the GPU's L2 cache, so its reduction runs entirely from on-chip memory;
#    (c) a bucket's all-reduce starts once its gradients are ready, overlapping backward.
# 5. Which backend for which job?
#    (a) gloo for CPU tensors, NCCL for CUDA tensors (one GPU per rank);
#    (b) NCCL for every job, since it also reduces CPU tensors in shared memory;
#    (c) MPI for CPU tensors and gloo for GPU tensors, since both ship with PyTorch.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "c", "q2": "b", "q3": "a", "q4": "c", "q5": "a"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson11.ipynb")
