# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 5 — Memory for compute: activation checkpointing
#
# **Goal:** fit training into less memory by keeping fewer activations and recomputing them in
# backward — and pay as little recompute as the memory budget allows. We will:
#
# 1. look at what autograd keeps for backward (`saved_tensors_hooks`);
# 2. take the memory of training apart: parameters, gradients, optimizer state (~16 bytes per
#    parameter for mixed-precision Adam) and activations, which grow with batch × sequence ×
#    layers;
# 3. checkpoint whole blocks (`use_reentrant=False`), measure the bytes saved and the time paid;
# 4. cut a deep stack into √n segments (Chen et al. 2016);
# 5. checkpoint *selectively*: keep the matmuls, recompute the cheap pointwise ops (PyTorch's
#    selective activation checkpointing), and see what dropout's random numbers need;
# 6. see why, on a GPU, checkpointing plus a bigger micro-batch can be a *speed* win.
# 7. trade memory for host-link bandwidth instead: offload the saved activations to host memory
#    (`save_on_cpu`), count the bytes that cross the link and set their copy time against the step's.
#
# **Run time**: about 40 s in `cpu` (36 s recorded on a quiet 2-core Intel Xeon VM with AMX, no GPU, 2026-12-07: the outputs in `docs/recorded/`; 80 s on the same VM an hour earlier: its speed varies); 10 s in `smoke` (a 2-core AMD EPYC VM, nothing
# else running); `gpu`: 70 s on an H100 80GB HBM3 before section 7 was added (its offloading A/B is not timed there).
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one),
# `smoke` (tests only: its numbers show the code runs, not what is true). On a CPU we measure
# memory as the bytes autograd keeps (exact, counted tensor by tensor); GPU memory figures
# (`torch.cuda.max_memory_allocated`) appear only when a GPU exists. You will predict twice and
# plan your own checkpointing in *Your turn*. The quiz and the graded exercise are in
# `exercises/lesson5/`.

# %%
# %matplotlib inline
import copy
import math
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.patches import FancyArrowPatch, Rectangle
from torch import nn
from torch.utils.checkpoint import checkpoint
from tqdm.auto import tqdm

from effkit import lesson
from effkit.act_checkpoint import (
    MATMUL_OPS,
    CountedSaveOnCpu,
    UncountedSaves,
    checkpoint_modules,
    peak_cuda_memory,
    run_segments,
    saved_activation_bytes,
    sqrt_segments,
)
from effkit.checkpoint_plan import CheckpointPlan, apply_plan, plan_bytes, plan_for_budget
from effkit.measure import device_name

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
SIZES = {
    "smoke": dict(dim=64, heads=4, layers=4, batch=4, seq=64, deep=16, pairs=6, steps=1,
                  grid_batch=(1, 2, 4), grid_seq=(32, 64), grid_layers=(2, 4)),
    "cpu": dict(dim=128, heads=4, layers=8, batch=8, seq=256, deep=36, pairs=6, steps=1,
                grid_batch=(1, 2, 4, 8), grid_seq=(64, 128, 256), grid_layers=(2, 4, 8)),
    "gpu": dict(dim=768, heads=12, layers=12, batch=8, seq=1024, deep=64, pairs=8, steps=3,
                grid_batch=(1, 2, 4, 8), grid_seq=(256, 512, 1024), grid_layers=(4, 8, 12)),
}[PROFILE]
print(f"profile {PROFILE!r} on {DEVICE_NAME}")


class Block(nn.Module):
    """A pre-norm transformer layer: causal self-attention, then an MLP (4x wide), residuals."""

    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(attn.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


def stack(layers=SIZES["layers"], dropout=0.1, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(SIZES["dim"], SIZES["heads"], dropout) for _ in range(layers)]).to(DEVICE)


def batch(b=SIZES["batch"], t=SIZES["seq"], seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, SIZES["dim"], generator=gen).to(DEVICE)  # embeddings from below


model, x = stack(), batch()
tokens = x.shape[0] * x.shape[1]
n_params = sum(p.numel() for p in model.parameters())
print(f"{SIZES['layers']} blocks of width {SIZES['dim']}: {n_params / 1e6:.2f} M parameters;"
      f" a batch of {x.shape[0]} x {x.shape[1]} = {tokens:,} tokens")

# %% [markdown]
# ## 1. What autograd keeps
#
# To compute gradients, backward needs some of forward's tensors: a `Linear` needs its input
# (for the weight's gradient), GELU needs its input, LayerNorm its input and statistics,
# dropout its mask. Autograd stores them when forward runs, and they stay alive until backward
# has used them. `torch.autograd.graph.saved_tensors_hooks` lets us see each one as it is saved.

# %%
saved = []


def pack(t):
    saved.append((tuple(t.shape), str(t.dtype).removeprefix("torch."), t.numel() * t.element_size()))
    return t.detach()  # not `t`: a saved output would hold its own graph alive (a leak if no backward)


one_block = stack(layers=1)
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    out = one_block(x)
print(f"one block, input {tuple(x.shape)}: autograd saved {len(saved)} tensors")
for shape, dtype, nbytes in saved[:14]:
    print(f"  {str(shape):24} {dtype:8} {nbytes / 2**10:9.1f} KiB")
print("  ... (parameters and views of them are saved too: they are not activations)")

# %% [markdown]
# Some of those are the weights (a `Linear` saves its weight for the input's gradient) and some
# share storage. `effkit.act_checkpoint.saved_activation_bytes` counts what is really
# *activation* memory: distinct storages, parameters excluded.
#
# **Predict.** How many bytes does one block keep per token, at this width in float32? (A block
# of width *d* computes tensors of width d, 3d and 4d; 4 bytes a number.)

# %%
GUESS_BYTES_PER_TOKEN = None  # your guess, e.g. 5000

# %%
per_block = saved_activation_bytes(lambda: one_block(x).sum())
bytes_per_token = per_block / tokens
lesson.check_guess(GUESS_BYTES_PER_TOKEN, bytes_per_token, "bytes one block keeps per token", "{:,.0f}")
print(f"= {bytes_per_token / 4 / SIZES['dim']:.1f} numbers of width d per token (d = {SIZES['dim']})")

# %% [markdown]
# ## 2. The memory anatomy of training
#
# Four things share the accelerator's memory:
#
# * **parameters** and **gradients**: one number each per parameter;
# * **optimizer state**: Adam keeps two (first and second moments). The ZeRO paper's accounting
#   for mixed precision (Rajbhandari et al., the Apex/Megatron recipe, which keeps 16-bit weights)
#   is 16 bytes per parameter: fp16 weights (2) and gradients (2), an fp32 master copy (4) and fp32
#   moments (4 + 4). PyTorch's autocast is not that recipe: it keeps the weights, gradients and
#   moments in fp32 (4 + 4 + 8 = 16 bytes, as in our fp32 training) and casts copies for each
#   matmul, so under autocast the activations shrink and the cached 16-bit copies of the weights
#   (about 2 bytes per parameter, kept while the autocast region runs) are added;
# * **activations**: what autograd keeps, growing with **batch × sequence × layers**.
#
# Measured, not assumed: one AdamW step on our stack, then every tensor counted.

# %%
opt_model = stack()
opt = torch.optim.AdamW(opt_model.parameters(), lr=1e-3)
opt_model(x).pow(2).mean().backward()
opt.step()


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))


anatomy = {
    "parameters": tensor_bytes(opt_model.parameters()),
    "gradients": tensor_bytes(p.grad for p in opt_model.parameters()),
    "optimizer state": tensor_bytes(v for s in opt.state.values() for v in s.values() if v.dim() > 0),
    "activations": saved_activation_bytes(lambda: opt_model(x).sum()),
}
for name, nbytes in anatomy.items():
    print(f"{name:16} {nbytes / 2**20:9.2f} MiB  ({nbytes / n_params:6.1f} bytes per parameter)")
static = anatomy["parameters"] + anatomy["gradients"] + anatomy["optimizer state"]
print(f"parameters + gradients + Adam: {static / n_params:.1f} bytes per parameter; activations at"
      f" batch {x.shape[0]} x {x.shape[1]}: {anatomy['activations'] / static:.1f}x all of that")
opt_model = opt = None  # free them

# %% [markdown]
# How do activations grow? Measured over a grid of batch sizes, sequence lengths and depths
# (forward passes only: cheap).

# %%
grid = []
cells = [(b, t, n) for b in SIZES["grid_batch"] for t in SIZES["grid_seq"] for n in SIZES["grid_layers"]]
for b, t, n in tqdm(cells, desc="activation grid"):
    net, xb = stack(layers=n), batch(b, t)
    grid.append((b, t, n, saved_activation_bytes(lambda: net(xb).sum())))  # noqa: B023
per_token_layer = [m / (b * t * n) for b, t, n, m in grid]
spread = max(per_token_layer) / min(per_token_layer)

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
for n in SIZES["grid_layers"]:
    pts = sorted((b * t, m / 2**20) for b, t, nn_, m in grid if nn_ == n)
    ax1.plot(*zip(*pts, strict=True), "o-", label=f"{n} layers")
ax1.set(xlabel="tokens per batch (batch x sequence)", ylabel="saved activations (MiB)",
        title=f"Activations grow with batch x seq x layers — {DEVICE_NAME}")
ax1.legend(fontsize=8)
ax2.bar(list(anatomy), [v / 2**20 for v in anatomy.values()],
        color=["tab:blue", "tab:orange", "tab:purple", "tab:red"])
ax2.set(ylabel="MiB", title=f"Training memory, batch {x.shape[0]} x {x.shape[1]}, {SIZES['layers']} layers")
plt.tight_layout()
plt.show()
print(f"bytes per token per layer over the grid: {min(per_token_layer):,.0f} to {max(per_token_layer):,.0f}"
      f" ({spread:.2f}x apart): " + ("linear in batch x sequence x layers" if spread < 1.1 else
                                     "not exactly linear (see which cells differ)"))

# %% [markdown]
# ## 3. Checkpoint the blocks
#
# **Activation checkpointing** keeps only each checkpointed block's *input*; in backward it runs
# the block's forward again to rebuild what it needs, then its backward. Memory: from "every
# intermediate" to "one input" per block. Price: one more forward of each checkpointed block.

# %%
fig, ax = plt.subplots(figsize=(10, 2.8))
for i in range(4):
    ax.add_patch(Rectangle((i * 1.6, 1.6), 1.3, 0.6, color="tab:blue", alpha=0.85))
    ax.text(i * 1.6 + 0.65, 1.9, f"block {i + 1}\nforward", ha="center", va="center", color="white", fontsize=8)
    ax.add_patch(Rectangle((i * 1.6, 1.1), 0.3, 0.35, color="tab:green"))  # the kept input
    ax.add_patch(Rectangle((6.6 - i * 1.6 + 0.2, 0.1), 0.6, 0.6, color="tab:orange", alpha=0.85))
    ax.text(6.6 - i * 1.6 + 0.5, 0.4, "re-\nforward", ha="center", va="center", fontsize=7, color="white")
    ax.add_patch(Rectangle((6.6 - i * 1.6 + 0.85, 0.1), 0.6, 0.6, color="tab:red", alpha=0.85))
    ax.text(6.6 - i * 1.6 + 1.15, 0.4, "back-\nward", ha="center", va="center", fontsize=7, color="white")
ax.add_patch(FancyArrowPatch((0.15, 1.1), (6.8, 0.75), arrowstyle="->", mutation_scale=10, color="tab:green"))
ax.text(0.4, 1.25, "kept: block inputs only", fontsize=8, color="tab:green")
ax.set(xlim=(-0.2, 8.8), ylim=(0, 2.4), title="Checkpointed blocks: forward keeps inputs, backward recomputes one block at a time")
ax.axis("off")
plt.show()

# %%
checkpointed = copy.deepcopy(model)
checkpoint_modules(checkpointed, Block)  # each Block's forward now runs under checkpoint(use_reentrant=False)
plain_bytes = saved_activation_bytes(lambda: model(x).sum())
ckpt_bytes = saved_activation_bytes(lambda: checkpointed(x).sum())


def grads(net, seed=0):
    net.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the same dropout masks for both
    net(x).pow(2).mean().backward()
    return torch.cat([p.grad.reshape(-1) for p in net.parameters()])


grad_gap = float((grads(checkpointed) - grads(model)).abs().max())
print(f"kept for backward: plain {plain_bytes / 2**20:.2f} MiB, every block checkpointed"
      f" {ckpt_bytes / 2**20:.2f} MiB ({plain_bytes / ckpt_bytes:.0f}x less)")
print(f"largest gradient difference, checkpointed vs plain (dropout on, same seed): {grad_gap:.1e}")

# %% [markdown]
# **The `use_reentrant` trap.** The older, *reentrant* checkpoint gives no gradient to a block's
# parameters when none of the block's inputs requires grad — exactly the first block of a model
# fed with data. `use_reentrant=False` (what `effkit` always passes, and PyTorch's recommended
# variant) has no such hole.

# %%
first = stack(layers=2)  # block 0 checkpointed, block 1 plain: backward runs, silently
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first[1](checkpoint(first[0], x, use_reentrant=True)).pow(2).mean().backward()
block0 = list(first[0].parameters())
missing = sum(p.grad is None for p in block0)
print(f"use_reentrant=True, input without requires_grad: {missing} of {len(block0)} parameters of block 0"
      " got no gradient" + (f" (PyTorch warned: {caught[0].message})" if caught else ""))
first.zero_grad(set_to_none=True)
first[1](checkpoint(first[0], x, use_reentrant=False)).pow(2).mean().backward()
print(f"use_reentrant=False: {sum(p.grad is None for p in block0)} without a gradient")

# %% [markdown]
# **Predict.** Checkpointing every block re-runs every block's forward once more. How many
# times slower is a training step (forward + backward) with every block checkpointed? (Backward
# costs about twice a forward.)

# %%
GUESS_SLOWDOWN = None  # your guess, e.g. 1.3


# %%
def step(net, xb=x):
    def run():
        for _ in range(SIZES["steps"]):
            net.zero_grad(set_to_none=True)
            net(xb).pow(2).mean().backward()
        return SIZES["steps"] * xb.shape[0] * xb.shape[1]
    return run


ckpt_ab = lesson.ab("plain vs every block checkpointed", step(model), step(checkpointed),
                    pairs=SIZES["pairs"], a_label="plain", b_label="checkpointed", unit="tokens/s", dev=DEVICE)
lesson.check_guess(GUESS_SLOWDOWN, 1 / ckpt_ab.ratio, "step time, checkpointed / plain", "{:.2f}x")

# %% [markdown]
# ## 4. The √n rule
#
# Checkpointing every block keeps *n* inputs. Chen et al. (2016) go further: cut the *n* layers
# into *k* segments and checkpoint each **segment**. Forward keeps *k* segment inputs; backward
# rebuilds one segment at a time, so for a moment that segment's intermediates live too. If a
# layer keeps *a* bytes and its input is *i* bytes, the peak is ≈ *k·i + (n/k)·a*, smallest at
# *k* = √(n·a/i): **√n** segments when a layer's activations are about its input's size (Chen's
# layers: one op each), all for one extra forward. Measured on a deep MLP (Linear + GELU layers):

# %%
deep = nn.Sequential(*[nn.Sequential(nn.Linear(SIZES["dim"], SIZES["dim"]), nn.GELU())
                       for _ in range(SIZES["deep"])]).to(DEVICE)
n = SIZES["deep"]
segment_peaks = {}
for k in tqdm(range(1, n + 1), desc="segments"):
    segments = sqrt_segments(n, segments=k)
    kept = saved_activation_bytes(lambda: run_segments(deep, x, segments).sum())  # noqa: B023
    longest = max(segments, key=len)
    working = saved_activation_bytes(lambda: deep[longest.start:longest.stop](x).sum())  # noqa: B023
    segment_peaks[k] = (kept, working)
best_k = min(segment_peaks, key=lambda k: sum(segment_peaks[k]))
sqrt_k = len(sqrt_segments(n))
a_over_i = saved_activation_bytes(lambda: deep[0](x).sum()) / (x.numel() * x.element_size())
block_a_over_i = per_block / (x.numel() * x.element_size())  # one transformer block of section 1

# %%
fig, ax = plt.subplots(figsize=(7, 3.6))
ks = list(segment_peaks)
ax.plot(ks, [segment_peaks[k][0] / 2**20 for k in ks], "s--", label="kept after forward (segment inputs)")
ax.plot(ks, [segment_peaks[k][1] / 2**20 for k in ks], "^--", label="one segment rebuilt in backward")
ax.plot(ks, [sum(segment_peaks[k]) / 2**20 for k in ks], "o-", color="black", label="peak ≈ sum")
ax.axvline(math.sqrt(n * a_over_i), color="gray", ls=":", label=f"√(n·a/i) = {math.sqrt(n * a_over_i):.1f}")
ax.set(xlabel="segments k", ylabel="MiB", title=f"{n} layers cut into k checkpointed segments — measured")
ax.legend(fontsize=8)
plt.show()
plain_deep = saved_activation_bytes(lambda: deep(x).sum())
print(f"{n} Linear+GELU layers (a/i = {a_over_i:.1f}): plain keeps {plain_deep / 2**20:.1f} MiB; lowest measured"
      f" peak at k = {best_k} ({sum(segment_peaks[best_k]) / 2**20:.2f} MiB); √n segments (k = {sqrt_k}):"
      f" {sum(segment_peaks[sqrt_k]) / 2**20:.2f} MiB; every layer its own segment (k = {n}):"
      f" {sum(segment_peaks[n]) / 2**20:.2f} MiB")
print(f"A transformer block (section 1) keeps a/i = {block_a_over_i:.1f} inputs' worth: by the formula above,"
      f" √(n·a/i) >= n while n <= {block_a_over_i:.0f} blocks, so for stacks that shallow the formula puts the"
      " lowest peak at one segment per block (not measured here for transformer blocks).")

# %% [markdown]
# ## 5. Selective checkpointing: choose, op by op, what to keep
#
# Not every op costs the same to redo. The matmuls hold nearly all the FLOPs; LayerNorm, GELU,
# dropout and the residual adds are cheap to recompute. PyTorch's *selective activation
# checkpointing* (`torch.utils.checkpoint.create_selective_checkpoint_contexts`) lets a policy
# say, op by op, "save" or "recompute". `checkpoint_modules(..., save_ops=MATMUL_OPS)` keeps the
# outputs of `mm`/`addmm` and of the fused attention, and recomputes everything else.
#
# Korthikanti et al. (2022) chose by bytes per FLOP. In Megatron's attention, the core after the
# query/key/value projection (the scores, softmax, dropout on the softmax, and attention over the
# values) keeps tensors that grow with the sequence length squared, yet costs few FLOPs. They
# recompute that attention core and keep the linear layers' outputs. The blocks here call the
# fused `F.scaled_dot_product_attention`, which keeps no score matrix at all (section 1's list:
# queries, keys, values, the output and one number per row), so that term is already gone. What
# is left is a different trade: here the linear layers' outputs are among the biggest tensors
# (`fc1`'s is 4d wide), so keeping them keeps many bytes. The cell below measures what each policy
# keeps and how fast it runs.

# %%
selective = copy.deepcopy(model)
checkpoint_modules(selective, Block, save_ops=MATMUL_OPS)
backwards = copy.deepcopy(model)  # the wrong way round: keep pointwise outputs, recompute matmuls
checkpoint_modules(backwards, Block, save_ops={"gelu", "native_layer_norm", "add", "native_dropout"})


def kept(net):
    """Bytes kept for backward, or None where this torch (< 2.12) hides what SAC keeps."""
    try:
        return saved_activation_bytes(lambda: net(x).sum())
    except UncountedSaves:
        return None


def mib(nbytes):
    return "not countable on this torch (< 2.12)" if nbytes is None else f"{nbytes / 2**20:8.2f} MiB"


memory = {"plain": plain_bytes, "save matmuls\n(selective)": kept(selective),
          "save pointwise\n(recompute matmuls)": kept(backwards), "checkpoint\neverything": ckpt_bytes}
for name, nbytes in memory.items():
    print(f"{name.replace(chr(10), ' '):36} keeps {mib(nbytes)}")
sel_gap = float((grads(selective) - grads(model)).abs().max())
print(f"selective: largest gradient difference vs plain {sel_gap:.1e}")
sel_ab = lesson.ab("every block checkpointed vs selective (save matmuls)", step(checkpointed), step(selective),
                   pairs=SIZES["pairs"], a_label="checkpoint everything", b_label="selective", unit="tokens/s",
                   dev=DEVICE)
wrong_ab = lesson.ab("save matmuls vs save pointwise (recompute matmuls)", step(selective), step(backwards),
                     pairs=SIZES["pairs"], a_label="save matmuls", b_label="save pointwise", unit="tokens/s",
                     dev=DEVICE)

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
ax1.bar(list(memory), [(v or 0) / 2**20 for v in memory.values()], color=["tab:gray", "tab:green", "tab:red", "tab:blue"])
ax1.set(ylabel="kept for backward (MiB)", title=f"What each policy keeps — {DEVICE_NAME}")
for i, nbytes in enumerate(memory.values()):
    if nbytes is None:
        ax1.text(i, 0, "not countable\non this torch", ha="center", va="bottom", fontsize=7)
ax1.tick_params(axis="x", labelsize=8)
lesson.plot_ab({"checkpointed\n/ plain": ckpt_ab, "selective\n/ checkpointed": sel_ab,
                "save pointwise\n/ save matmuls": wrong_ab}, "Speed ratios (B/A)", ax=ax2)
plt.tight_layout()
plt.show()
print(f"selective vs checkpoint everything: {sel_ab.verdict}")
print(f"save pointwise (recompute the matmuls) vs save matmuls: {wrong_ab.verdict}")

# %% [markdown]
# **What the recorded cpu run measured** (`docs/recorded/`, 8 blocks at batch 8 x 256; the bytes
# are counts and do not move from run to run, the speeds do). Keeping the matmuls' outputs kept
# 88.25 of plain's 144.50 MiB (61%); checkpointing every block keeps 8.00 MiB. Keeping the pointwise
# outputs instead kept less, 65.25 MiB, and was slower than keeping the matmuls (the verdict above):
# it recomputes the matmuls. *Your turn* below, at its default budget of 50%, found another point:
# 5 of the 8 blocks checkpointed whole keep 59.19 MiB, less than the selective policy. How much
# the selective policy compares with checkpointing every block, read from the verdict above, moves
# run by run at these sizes: quiet recordings on the same 2-core Intel Xeon with AMX gave 1.08x
# (0.97-1.16, no clear difference) and 1.20x (1.04-1.22) on 2026-12-06, and 0.93x (0.85-1.00) on
# 2026-12-07; a likely cause, not tested here, is the selective policy's per-op dispatch, a fixed
# cost on every small CPU op in forward and in the recompute. So keeping the matmuls is one point on a
# memory/speed trade-off, not the best of both: measure each plan's bytes and time, and take the
# fastest that fits.
#
# **Dropout on recompute.** The recompute must draw the *same* dropout masks as the forward, or
# backward differentiates a different network. `checkpoint` stashes the RNG state before the
# block and restores it for the recompute (`preserve_rng_state=True`, the default; it costs a
# little time). Turn it off and the gradients are wrong:

# %%
def grads_no_rng(net, seed=0):
    net.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    h = x
    for block in net:
        h = checkpoint(block, h, use_reentrant=False, preserve_rng_state=False)
    h.pow(2).mean().backward()
    return torch.cat([p.grad.reshape(-1) for p in net.parameters()])


reference = grads(model)
rng_gap = float((grads_no_rng(model) - reference).norm() / reference.norm())
print(f"preserve_rng_state=False with dropout 0.1: gradient off by {rng_gap:.0%} (relative norm);"
      f" with the default: {grad_gap:.1e} (largest difference)")

# %% [markdown]
# ## 6. On a GPU: memory measured by the allocator — and can checkpointing be a *speed* win?
#
# On a GPU, `peak_cuda_memory` reads `torch.cuda.max_memory_allocated`: the peak of the tensors
# the caching allocator handed out during the step (forward *and* backward), above what was
# allocated before. So it also shows the recompute's working set. It does not count the pool the
# allocator reserves, nor workspaces allocated outside it. It is not all an out-of-memory error
# depends on: the caching allocator *reserves* more than it hands out
# (`torch.cuda.max_memory_reserved`, fragmentation included), and the CUDA context takes a few
# hundred MiB outside both. Plan against reserved memory plus the context, not allocated memory. The argument for a speed
# win: a GPU that is under-used at the batch that fits runs faster per sample at a bigger one
# (lesson 4), so "checkpoint + a 4x bigger micro-batch" *might* beat "plain + a small micro-batch"
# in tokens/s despite the recompute — but only if the small batch left the GPU idle. Whether it
# does here is a measurement, not a rule: the cell below says which way it went.

# %%
if DEVICE.type == "cuda":
    gpu_peak = {name: peak_cuda_memory(lambda net=net: net(x).pow(2).mean().backward(), DEVICE)
                for name, net in (("plain", model), ("checkpointed", checkpointed))}
    print(", ".join(f"{k}: peak {v / 2**20:,.0f} MiB" for k, v in gpu_peak.items()), f"on {DEVICE_NAME}")
    small, big = x[: max(1, x.shape[0] // 4)], batch(4 * max(1, x.shape[0] // 4))
    big_ab = lesson.ab("plain at batch b vs checkpointed at 4b", step(model, small), step(checkpointed, big),
                       pairs=SIZES["pairs"], a_label=f"plain, batch {small.shape[0]}",
                       b_label=f"checkpointed, batch {big.shape[0]}", unit="tokens/s", dev=DEVICE)
    outcome = {"faster": "here the bigger batch paid for the recompute",
               "slower": "here it did not: the small batch already kept the GPU busy, so the recompute"
                         " is pure cost"}.get(big_ab.verdict.word, "here no difference could be shown")
    gpu_line = f"checkpointed at 4x the batch vs plain: {big_ab.verdict} — {outcome}"
    print(gpu_line)
else:
    gpu_line = "no GPU here: no GPU memory or speed figure (run this lesson with a GPU to see them)"
    print(gpu_line)

# %% [markdown]
# ## 7. Memory for bandwidth: activation offloading
#
# Checkpointing pays for memory with compute. **Offloading** pays with the host link instead: keep
# every saved activation, but in host memory. `torch.autograd.graph.save_on_cpu(pin_memory=...)`
# is a pair of saved-tensor hooks (section 1): in forward its pack hook copies each tensor autograd
# saves to the host, and in backward its unpack hook copies it back to the device when the
# gradient needs it. What stays on the device: the parameters, gradients and optimizer state of
# section 2 (moving the gradients, optimizer state and step to the CPU is ZeRO-Offload's technique,
# the parameters too ZeRO-Infinity's: see the References), the working
# set of the op that is running (its inputs and outputs), and the tensors in flight — in forward
# the activation passed from one layer to the next, in backward the gradients passed back and
# each tensor brought back until its op is done.
#
# It saves device memory only where there is a device. On a CPU, "the host" is where the tensors
# already are: `save_on_cpu(pin_memory=False)` keeps the same tensor (`.cpu()` of a CPU tensor is
# the tensor itself), and `pin_memory=True` makes an ordinary copy (pinning needs CUDA). So the CPU
# rehearsal below saves nothing; it measures what *would* cross the link — the bytes the hooks pack
# in forward and unpack in backward — and whether the gradients change.
#
# **Predict.** `save_on_cpu` packs every tensor autograd saves, one at a time, at its own size.
# `saved_activation_bytes` counts what the same step keeps: distinct storages, parameters left out.
# How many times that many bytes does `save_on_cpu` send to the host? (Section 1's list is a hint.)

# %%
GUESS_OFFLOAD_RATIO = None  # your guess, e.g. 1.0


# %%
def offloaded(net, pin_memory):
    """One step of `grads` (same seed, so the same dropout masks) under a counting save_on_cpu."""
    hooks = CountedSaveOnCpu(pin_memory=pin_memory)
    net.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    with hooks:
        loss = net(x).pow(2).mean()
    loss.backward()  # the unpack hooks run here: they belong to the graph, not to the `with`
    return hooks.count, torch.cat([p.grad.reshape(-1) for p in net.parameters()])


count, offload_grads = offloaded(model, pin_memory=False)
count_pinned, pinned_grads = offloaded(model, pin_memory=True)
step_kept = saved_activation_bytes(lambda: model(x).pow(2).mean())  # the same step's forward
offload_ratio = count.packed_bytes / step_kept
lesson.check_guess(GUESS_OFFLOAD_RATIO, offload_ratio, "bytes save_on_cpu packs / bytes the step keeps", "{:.2f}x")
extra = count.packed_bytes - count.parameter_bytes - step_kept
print(f"save_on_cpu packed {count.tensors} tensors, {count.packed_bytes / 2**20:.2f} MiB:"
      f" {count.parameter_bytes / 2**20:.2f} MiB of parameters (mostly views of the weights the Linears save),"
      f" {step_kept / 2**20:.2f} MiB of distinct activation storage, {extra / 2**20:+.2f} MiB other"
      f" (a storage saved by two ops is packed twice; a view, at its own size);"
      f" back in backward: {count.unpacked_bytes / 2**20:.2f} MiB")
offload_gap = max(float((g - reference).abs().max()) for g in (offload_grads, pinned_grads))
if DEVICE.type == "cpu":
    print(f"on this CPU, pin_memory=False copied {count.copied} of {count.tensors} tensors and pin_memory=True"
          f" {count_pinned.copied} (into ordinary memory): no device memory to save here")
print(f"largest gradient difference, save_on_cpu (both pin_memory settings) vs plain: {offload_gap:.1e}")
ckpt_count, _ = offloaded(checkpointed, pin_memory=False)  # checkpoint's own hooks take the blocks' insides
ckpt_step_kept = saved_activation_bytes(lambda: checkpointed(x).pow(2).mean())
print(f"every block checkpointed, under save_on_cpu: {ckpt_count.packed_bytes / 2**20:.2f} MiB packed;"
      f" the same step keeps {ckpt_step_kept / 2**20:.2f} MiB checkpointed, {step_kept / 2**20:.2f} MiB plain")

# %% [markdown]
# **The cost model.** Offloading sends *B* bytes to the host in forward and brings them back in
# backward: 2*B* over a link of *W* bytes/s, against the step's compute time *T*. *B* is what the
# hooks pack, parameters included: their copies cost link time and save nothing, since the
# parameter itself stays on the device.
#
# * **Copies in stream order**, which is what `save_on_cpu` does: its source (`torch/autograd/graph.py`)
#   issues each copy on the current CUDA stream, at the moment a tensor is saved or needed. Work on
#   one stream runs in order (PyTorch's CUDA semantics notes), so each copy waits for the kernel
#   before it and the next kernel waits for the copy: a step takes about *T* + 2*B*/*W*.
#   `pin_memory=True` packs into pinned host memory and, in this torch (2.14), issues both copies
#   with `non_blocking` (its docstring and source; older releases blocked the host on the copy out):
#   Python goes on queueing work, but the copies still take their turn between the kernels. Each
#   tensor is its own pair of copies (hundreds a step here, many of a few KiB), and each copy has a
#   fixed cost the link rate leaves out, which is why practical offloaders skip small tensors.
# * **Copies overlapped with compute**: pinned memory, a second stream for the copies, and backward's
#   copies started before backward needs them — hooks you write yourself, `save_on_cpu` does none of
#   the last two. Then the copies out hide behind forward while *B*/*W* ≤ the forward's time, and
#   the copies back behind backward while *B*/*W* ≤ the backward's time. With backward about twice a
#   forward (section 3's rule of thumb), forward binds: the copies hide while a step lasts at least
#   3*B*/*W*, that is while it runs at most *W* x tokens / (3*B*) tokens/s. A faster step leaves
#   them exposed.
#
# *W* is an assumption until measured. The PCI-SIG's PCIe 4.0 runs 16 GT/s per lane and PCIe 5.0
# 32 GT/s; with their 128b/130b encoding that is about 31.5 and 63 GB/s each way over 16 lanes.
# Copies get less than the line rate, and how much less depends on the machine: the 25 GB/s below
# is our assumption for PCIe 4.0 x16, not a figure we measured. The GPU cell measures the link.

# %%
HOST_LINK_GB_S = 25.0  # assumption: pinned copies over PCIe 4.0 x16 (line rate ~31.5 GB/s each way)
offload_bytes = count.packed_bytes + count.unpacked_bytes  # out in forward + back in backward
copy_s = offload_bytes / (HOST_LINK_GB_S * 1e9)
hide_tokens_s = HOST_LINK_GB_S * 1e9 * tokens / (3 * count.packed_bytes)
print(f"per step of {tokens:,} tokens: {count.packed_bytes / 2**20:.2f} MiB out + {count.unpacked_bytes / 2**20:.2f}"
      f" MiB back = {copy_s * 1e3:.2f} ms of copies at an assumed {HOST_LINK_GB_S:g} GB/s")
print(f"on a GPU at the assumed link rate, in stream order (save_on_cpu): every step at least {copy_s * 1e3:.2f} ms"
      f" longer (each copy's fixed cost comes on top); overlapped: hidden only while"
      f" a step runs at most {hide_tokens_s:,.0f} tokens/s")


# %%
def offload_step(net, xb=x, pin_memory=True):
    """`step`, with the forward under save_on_cpu."""
    def run():
        for _ in range(SIZES["steps"]):
            net.zero_grad(set_to_none=True)
            with torch.autograd.graph.save_on_cpu(pin_memory=pin_memory):
                loss = net(xb).pow(2).mean()
            loss.backward()
        return SIZES["steps"] * xb.shape[0] * xb.shape[1]
    return run


def copy_rate(src, dst):
    """GB/s of one large copy, timed by CUDA events: the link's best case (save_on_cpu's copies are smaller)."""
    dst.copy_(src, non_blocking=True)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    dst.copy_(src, non_blocking=True)
    end.record()
    end.synchronize()
    return src.numel() / (start.elapsed_time(end) / 1e3) / 1e9


if DEVICE.type == "cuda":
    on_device = torch.empty(count.packed_bytes, dtype=torch.uint8, device=DEVICE)
    pinned = torch.empty(count.packed_bytes, dtype=torch.uint8, pin_memory=True)
    out_gb_s, back_gb_s = copy_rate(on_device, pinned), copy_rate(pinned, on_device)
    on_device = pinned = None
    off_peak = {"plain": peak_cuda_memory(step(model), DEVICE),
                "save_on_cpu": peak_cuda_memory(offload_step(model), DEVICE)}
    off_ab = lesson.ab("plain vs save_on_cpu(pin_memory=True)", step(model), offload_step(model),
                       pairs=SIZES["pairs"], a_label="plain", b_label="save_on_cpu", unit="tokens/s", dev=DEVICE)
    step_s = tokens / off_ab.a_median
    predicted = step_s / (step_s + count.packed_bytes / (out_gb_s * 1e9) + count.unpacked_bytes / (back_gb_s * 1e9))
    outcome = {"slower": "here offloading cost step time",
               "faster": "faster with copies added: find the cause before trusting it"}.get(
        off_ab.verdict.word, "no difference could be shown at this interval")
    offload_line = (f"device peak {off_peak['plain'] / 2**20:,.0f} -> {off_peak['save_on_cpu'] / 2**20:,.0f} MiB;"
                    f" {off_ab.verdict} — {outcome}; the stream-order model predicted {predicted:.2f}x"
                    f" (link measured {out_gb_s:.1f} GB/s out, {back_gb_s:.1f} GB/s back)")
    print(f"save_on_cpu(pin_memory=True) vs plain on {DEVICE_NAME}: {offload_line}")
else:
    offload_line = "no GPU here: no device memory, link or speed figure for offloading (run this lesson with a GPU)"
    print(offload_line)

# %% [markdown]
# ## Your turn
#
# A memory budget: `MY_BUDGET` of the plain model's activations. `plan_for_budget` checkpoints the
# fewest blocks whose measured bytes fit; try a selective plan too (`save=MATMUL_OPS`), and
# compare both with "checkpoint everything" in time. Which is cheapest at 50%? At 10%?

# %%
MY_BUDGET = 0.5  # your turn: a fraction of the plain model's activations
budget = int(MY_BUDGET * plain_bytes)
my_plan = plan_for_budget(model, x, budget)
mine = apply_plan(copy.deepcopy(model), my_plan)
print(f"budget {budget / 2**20:.2f} MiB: {my_plan.describe(len(model))}, keeps"
      f" {plan_bytes(model, x, my_plan) / 2**20:.2f} MiB"
      f" (everything checkpointed: {plan_bytes(model, x, CheckpointPlan.everything(len(model))) / 2**20:.2f} MiB)")
plan_ab = lesson.ab("checkpoint everything vs your plan", step(checkpointed), step(mine), pairs=SIZES["pairs"],
                    a_label="checkpoint everything", b_label="your plan", unit="tokens/s", dev=DEVICE)

# %% [markdown]
# ### In your own words
#
# Section 3 measured the bytes autograd keeps and the step time with every block checkpointed, and
# section 5 a selective plan. Explain in 2–3 sentences why checkpointing cuts activation memory but
# slows the step, and what keeping the matmuls' outputs while recomputing the pointwise ops trades:
# which ops are cheap to redo, and what the measured bytes and speed said it cost.
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=5)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(5, DEVICE_NAME))
print(f"* one block keeps {bytes_per_token:,.0f} bytes per token; activations over the grid:"
      f" {min(per_token_layer):,.0f}-{max(per_token_layer):,.0f} bytes per token per layer")
print(f"* parameters + gradients + AdamW state: {static / n_params:.1f} bytes per parameter;"
      f" activations at batch {x.shape[0]} x {x.shape[1]}: {anatomy['activations'] / static:.1f}x that")
print(f"* every block checkpointed: {plain_bytes / 2**20:.2f} -> {ckpt_bytes / 2**20:.2f} MiB kept,"
      f" gradients equal to {grad_gap:.0e}")
print(f"* its step time: {ckpt_ab.verdict}")
print(f"* segments ({n} layers, a/i = {a_over_i:.1f}): lowest measured peak at k = {best_k};"
      f" √(n·a/i) = {math.sqrt(n * a_over_i):.1f}, √n = {math.sqrt(n):.1f}")
print(f"* selective (save matmuls) keeps {mib(memory['save matmuls' + chr(10) + '(selective)']).strip()};"
      f" vs checkpoint everything: {sel_ab.verdict}")
print(f"* save pointwise instead (recompute matmuls): {wrong_ab.verdict}")
print(f"* recompute without the RNG state: gradients off by {rng_gap:.0%}")
print(f"* your plan at {MY_BUDGET:.0%}: {my_plan.describe(len(model))}; vs everything: {plan_ab.verdict}")
print(f"* GPU: {gpu_line}")
print(f"* offloading: save_on_cpu packs {offload_ratio:.2f}x the bytes the step keeps"
      f" ({count.packed_bytes / 2**20:.2f} MiB out, {count.unpacked_bytes / 2**20:.2f} back), gradients off by"
      f" at most {offload_gap:.0e}; {offload_line}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson5/`: write a checkpointed forward that
# gets the plain model's gradients, and a planner that fits a memory budget the grader sets with
# as little recompute as possible. The grader applies your plan to its own copy of the model,
# measures the bytes and times it against "checkpoint everything" — outside your notebook.
#
# ### References
#
# * T. Chen, B. Xu, C. Zhang, C. Guestrin, *Training Deep Nets with Sublinear Memory Cost*, 2016,
#   [arXiv:1604.06174](https://arxiv.org/abs/1604.06174) — checkpointing and the √n segments.
# * V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022,
#   [arXiv:2205.05198](https://arxiv.org/abs/2205.05198) — selective recomputation of attention.
# * PyTorch: [`torch.utils.checkpoint`](https://pytorch.org/docs/stable/checkpoint.html)
#   (`use_reentrant`, `preserve_rng_state`, `create_selective_checkpoint_contexts`) and the blog
#   post [Current and New Activation Checkpointing Techniques in PyTorch](https://pytorch.org/blog/activation-checkpointing-techniques/);
#   [saved tensors hooks](https://pytorch.org/tutorials/intermediate/autograd_saved_tensors_hooks_tutorial.html);
#   [`torch.autograd.graph.save_on_cpu`](https://pytorch.org/docs/stable/autograd.html#torch.autograd.graph.save_on_cpu)
#   (saved tensors to host memory and back; with `pin_memory=True` the copies are asynchronous) and its source,
#   `torch/autograd/graph.py` (which stream the copies run on); the
#   [CUDA semantics notes](https://pytorch.org/docs/stable/notes/cuda.html) (work on one stream runs in
#   order; pinned memory and `non_blocking=True` copies).
# * PCI-SIG, [PCI Express Base Specification](https://pcisig.com/specifications) — 16 GT/s per lane for
#   PCIe 4.0, 32 GT/s for 5.0, 128b/130b encoding: the line rates behind `HOST_LINK_GB_S`, not a copy rate.
# * S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*,
#   2019, [arXiv:1910.02054](https://arxiv.org/abs/1910.02054) — the 16 bytes per parameter of
#   mixed-precision Adam.
# * M. Rhu et al., *vDNN: Virtualized Deep Neural Networks for Scalable, Memory-Efficient Neural
#   Network Design*, MICRO 2016, [arXiv:1602.08124](https://arxiv.org/abs/1602.08124) — activations
#   offloaded to host memory and prefetched back, overlapped with compute.
# * S. Rajbhandari et al., *ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme Scale Deep
#   Learning*, 2021, [arXiv:2104.07857](https://arxiv.org/abs/2104.07857) — the parameters offloaded too.
# * J. Ren et al., *ZeRO-Offload: Democratizing Billion-Scale Model Training*, 2021,
#   [arXiv:2101.06840](https://arxiv.org/abs/2101.06840) — offloading the other side of the bill
#   (optimizer state and gradients, and the optimizer step) to the CPU.
#
# ### What to try next
#
# * Run the lesson on a GPU: compare `max_memory_allocated` with the saved bytes, and find the
#   batch at which "checkpoint + bigger batch" overtakes "plain".
# * Offload on a GPU only what checkpointing keeps (section 7's last count): run the checkpointed
#   model's forward under `save_on_cpu(pin_memory=True)` and measure its peak and its tokens/s.
# * Write the overlapped offload of section 7's cost model: pack hooks that copy on a second CUDA
#   stream, and a backward that fetches each block's tensors before it needs them; compare it with
#   `save_on_cpu`. Whether copies can hide does not depend on the batch (bytes saved and FLOPs both
#   grow with it): it depends on the forward's FLOPs per saved byte against the GPU's FLOP/s over the
#   link's bytes/s, which grows with the width and the sequence length.
# * Lesson 11 shards parameters, gradients and optimizer state (ZeRO/FSDP): the other three parts
#   of the memory bill.
