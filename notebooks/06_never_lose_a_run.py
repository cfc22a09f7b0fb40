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
# # Lesson 6 — Schedules, early stopping and never losing a run
#
# **Goal:** spend less time per result and lose no time to crashes. We will:
#
# 1. compare a constant learning rate with warm-up + cosine and one-cycle by **time to a target
#    accuracy** — evaluations included;
# 2. stop early with patience on a validation cadence, see what evaluating costs, and keep the
#    *best* weights, not the last;
# 3. look inside a resumable checkpoint (model, optimizer, scheduler, scaler, early stopping,
#    every RNG, the sampler's position), kill a process in the middle of saves and count the torn
#    files a plain `torch.save` leaves against an atomic write (temporary file, fsync, rename);
# 4. resume bit for bit — and see what goes wrong when the RNG or the data position is not saved;
# 5. measure what a save costs and choose the interval from the failure rate (Young/Daly);
# 6. preview `torch.distributed.checkpoint` for sharded state;
# 7. keep an exponential moving average (EMA) of the weights and measure what it changes at the
#    end of a run;
# 8. measure what reproducibility costs (PyTorch's deterministic mode) and how far results spread
#    from seed to seed: what a change must beat before it is called an improvement.
#
# **Run time**: about 110 s in `cpu` (106 s recorded on a quiet 2-core Intel Xeon VM with AMX, no GPU, 2026-12-07: the outputs in `docs/recorded/`); 13 s in `smoke` (a 2-core AMD EPYC VM,
# nothing else running); `gpu`: 2.1 min (129 s) on an H100 80GB HBM3, before sections 7 and 8 (the EMA,
# reproducibility) came in.
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one),
# `smoke` (tests only: its numbers show the code runs, not what is true). You will predict four
# times (torn checkpoints, the cost of saving every step, what the EMA adds, what determinism
# costs), then in *Your turn* run your own experiment and predict the mean time between failures at
# which a given save interval is the best one. The quiz and the graded exercise are in `exercises/lesson6/`.

# %%
# %matplotlib inline
import contextlib
import copy
import functools
import math
import os
import random
import signal
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.patches import FancyArrowPatch, Rectangle
from torch.optim.lr_scheduler import LambdaLR
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm.auto import tqdm

from effkit import lesson, lesson_setup
from effkit.arms import difference_verdict, paired_difference, rows_half_width
from effkit.checkpoint_interval import (
    daly_interval,
    mtbf_for_interval,
    overhead,
    readable_duration,
    steps_between_saves,
    young_holds,
    young_interval,
)
from effkit.early_stopping import EarlyStopping
from effkit.lesson_plots import learning_curves
from effkit.measure import device_name, sync
from effkit.resume import CheckpointManager, load_checkpoint, save_checkpoint
from effkit.sampler import ResumableRandomSampler
from effkit.schedules import one_cycle, warmup_cosine
from effkit.seed import seed_everything
from effkit.seed_compare import separation

# %%
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
# The naive CIFAR recipe's ResNet (one block per stage, narrowed on CPUs) on the course's
# synthetic CIFAR-like images; sizes per profile.
SIZES = {
    "smoke": dict(depth=10, width=8, n_train=640, n_val=256, batch=64, epochs=2, seeds=(0,),
                  target=0.25, es_train=320, es_epochs=6, patience=1, kills=4, pairs=6,
                  burst_steps=2, resume_steps=6, ema_seeds=(1,)),
    "cpu": dict(depth=10, width=8, n_train=3200, n_val=1000, batch=64, epochs=5, seeds=(0, 1, 2),
                target=0.85, es_train=640, es_epochs=25, patience=3, kills=10, pairs=8,
                burst_steps=6, resume_steps=30, ema_seeds=(3, 4, 5)),
    "gpu": dict(depth=18, width=64, n_train=20000, n_val=5000, batch=256, epochs=6, seeds=(0, 1, 2),
                target=0.8, es_train=5000, es_epochs=30, patience=4, kills=10, pairs=8,
                burst_steps=20, resume_steps=60, ema_seeds=(3, 4, 5)),
}[PROFILE]
print(f"profile {PROFILE!r} on {DEVICE_NAME}")


X_TRAIN, Y_TRAIN = lesson_setup.cifar_tensors(SIZES["n_train"], seed=0, device=DEVICE)
X_VAL, Y_VAL = lesson_setup.cifar_tensors(SIZES["n_val"], seed=1, device=DEVICE)


# new_model(seed=0): the naive recipe's ResNet with fresh weights drawn from `seed`
new_model = functools.partial(lesson_setup.cifar_resnet, SIZES["depth"], SIZES["width"], DEVICE)


def evaluate(net, x=X_VAL, y=Y_VAL):
    """(accuracy, mean loss) on the validation set, in eval mode."""
    net.eval()
    with torch.no_grad():
        logits = torch.cat([net(part) for part in x.split(500)])
    net.train()
    return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))


# %% [markdown]
# ## 1. Schedules, compared by time to target
#
# A constant LR is the baseline. The other two ramp the LR up linearly over the first tenth of the
# steps — Goyal et al. (2017, §2.2) warmed up because a large LR from the first step hurt their
# large-minibatch training early on, while the network changes rapidly — and then decay it to 0:
# **warm-up + cosine** along half a cosine [Loshchilov & Hutter, SGDR], **one-cycle** along a
# straight line (`effkit.schedules.one_cycle`, a simplified form of Smith & Topin's policy: theirs
# climbs for a larger share of the run, and Smith (2018) also cycles the momentum against the LR, as
# PyTorch's `OneCycleLR` does by default; here the momentum stays 0.9 in every run). All three share
# one peak LR and the two share one warm-up, so what this compares is the *decay's shape*: none,
# cosine, linear. What matters is not the final accuracy after a fixed budget but **how long it
# takes to reach the accuracy you need** — counting the evaluations that tell you it was reached.
#
# Each run also keeps an average of its weights beside the model, updated off the clock (so the
# times below are the schedules' own), and scores both on the held-out images at its end: section
# 7 explains that average and opens its results.

# %%
def constant(optimizer, total_steps, warmup_steps):
    return LambdaLR(optimizer, lambda step: 1.0)


# Same peak LR for all three and the same warm-up for the two that have one, so only the decay's
# *shape* differs. (Each shape's best LR may differ too: comparing each at its own tuned LR is a
# search — lesson 12.)
PEAK_LR = 0.2
SCHEDULES = {f"constant LR {PEAK_LR}": (constant, PEAK_LR), f"warm-up + cosine, peak {PEAK_LR}": (warmup_cosine, PEAK_LR),
             f"one-cycle, peak {PEAK_LR}": (one_cycle, PEAK_LR)}


STEPS_PER_EPOCH = SIZES["n_train"] // SIZES["batch"]
EMA_DECAY = 1 - 1 / STEPS_PER_EPOCH  # the average spans about one epoch of steps (section 7)


def correct_rows(net, x=X_VAL, y=Y_VAL):
    """Per validation row, whether `net` (in eval mode) classifies it right."""
    net.eval()
    with torch.no_grad():
        right = torch.cat([net(part).argmax(1) for part in x.split(500)]) == y
    net.train()
    return right.tolist()


def train_schedule(schedule, peak, seed, bar, evals_per_epoch=4):
    """Train with `schedule`; returns [(wall seconds incl. evaluations, val accuracy)] per eval
    (`evals_per_epoch` per epoch, plus one after the last step; none with `evals_per_epoch=None`) and
    the end of the run: which held-out rows the last weights and their EMA get right, the run's
    clock and the EMA updates' (off that clock)."""
    net = new_model(seed)
    ema = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(EMA_DECAY), use_buffers=True)
    opt = torch.optim.SGD(net.parameters(), lr=peak, momentum=0.9, weight_decay=5e-4, nesterov=True)
    total = SIZES["epochs"] * STEPS_PER_EPOCH
    sched = schedule(opt, total, max(1, total // 10))
    gen = torch.Generator().manual_seed(seed)
    curve, elapsed, ema_s = [], 0.0, 0.0
    every = None if evals_per_epoch is None else max(1, STEPS_PER_EPOCH // evals_per_epoch)
    for step in range(total):
        if step % STEPS_PER_EPOCH == 0:
            order = torch.randperm(SIZES["n_train"], generator=gen).to(DEVICE)
        sync(DEVICE)
        t0 = time.perf_counter()
        idx = order[(step % STEPS_PER_EPOCH) * SIZES["batch"]:][:SIZES["batch"]]
        loss = F.cross_entropy(net(X_TRAIN[idx]), Y_TRAIN[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if every is not None and ((step + 1) % every == 0 or step + 1 == total):  # the last step too
            accuracy = evaluate(net)[0]  # timed too: an evaluation is part of time-to-target
            sync(DEVICE)
            elapsed += time.perf_counter() - t0
            curve.append((elapsed, accuracy))
        else:
            sync(DEVICE)
            elapsed += time.perf_counter() - t0
        t1 = time.perf_counter()  # the EMA, off the clock: it reads the weights, changes nothing
        ema.update_parameters(net)
        sync(DEVICE)
        ema_s += time.perf_counter() - t1
        bar.update(1)
    end = {"raw": correct_rows(net), "ema": correct_rows(ema.module), "seconds": elapsed, "ema_seconds": ema_s}
    return curve, end


total_steps = SIZES["epochs"] * STEPS_PER_EPOCH * len(SCHEDULES) * len(SIZES["seeds"])
curves, ends = {}, {}  # per schedule, one entry per seed: the curve; the end (section 7)
with tqdm(total=total_steps, desc="schedules", unit="step") as bar:
    for name, (schedule, peak) in SCHEDULES.items():
        runs = [train_schedule(schedule, peak, seed, bar) for seed in SIZES["seeds"]]
        curves[name], ends[name] = [curve for curve, _ in runs], [end for _, end in runs]

# %%
TARGET = SIZES["target"]


def time_to_target(curve):
    return next((t for t, accuracy in curve if accuracy >= TARGET), None)


learning_curves(curves, TARGET, ["tab:gray", "tab:blue", "tab:orange"], xlabel="wall seconds (training + evaluations)",
                ylabel="validation accuracy", title=f"LR schedules — {DEVICE_NAME}, seeds {list(SIZES['seeds'])}")
plt.show()
reached = {name: [time_to_target(run) for run in runs] for name, runs in curves.items()}
for name, times in reached.items():
    shown = ", ".join("not reached" if t is None else f"{t:.1f} s" for t in times)
    print(f"{name:28} accuracy after the last step {', '.join(f'{run[-1][1]:.1%}' for run in curves[name]):14}"
          f" time to {TARGET:.0%}: {shown}")
base = reached[f"constant LR {PEAK_LR}"]
for name in list(SCHEDULES)[1:]:
    mine = reached[name]
    if None not in mine and all(t is None for t in base):
        word = "reached the target on every seed; the constant LR never did within the budget"
    elif all(t is None for t in mine) and None not in base:
        word = "never reached the target within the budget; the constant LR did on every seed"
    elif None not in mine and None in base:
        word = (f"reached the target on every seed; the constant LR on {sum(t is not None for t in base)}"
                f" of {len(base)}")
    elif len(SIZES["seeds"]) < 2 or None in mine + base:
        word = "too few seeds reaching the target for a comparison"
    elif max(mine) < min(base):
        word = "faster than the constant LR on every seed"
    elif min(mine) > max(base):
        word = "slower than the constant LR on every seed"
    else:
        word = "within the constant LR's seed range: no difference these seeds can show"
    print(f"{name}: {word} ({len(SIZES['seeds'])} seed(s))")

# %% [markdown]
# ## 2. Early stopping — and what evaluating costs
#
# Early stopping evaluates on held-out data at a fixed **cadence** (here: every epoch) and stops
# after `patience` evaluations without improving on the best so far — the common "patience" rule
# (Keras' `EarlyStopping(patience=...)`, `effkit.early_stopping` here). Prechelt ["Early stopping —
# but when?"] compared three related criteria: GL (the validation error a set fraction above its
# best), PQ (GL against the training progress) and UP (the validation error rose over several
# successive strips of epochs); patience is closest to UP. Two costs come with it: each evaluation
# takes time (a forward pass over the validation set), and it stops *after* the best point, so the
# **best weights must have been saved** when they happened — the last weights are `patience` epochs
# past the best, none of them a strict improvement on it. A small training set overfits quickly, so
# the validation loss turns.

# %%
es_x, es_y = X_TRAIN[:SIZES["es_train"]], Y_TRAIN[:SIZES["es_train"]]
es_tmp = tempfile.TemporaryDirectory(prefix="lesson6-es-")  # removed when the kernel stops
es_dir = Path(es_tmp.name)
net = new_model(0)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
stopper = EarlyStopping(patience=SIZES["patience"], mode="min")
manager = CheckpointManager(es_dir, metric_mode="min")
history, train_s, eval_s, es_save_s = [], 0.0, 0.0, 0.0
for epoch in tqdm(range(SIZES["es_epochs"]), desc="early stopping", unit="epoch"):
    sync(DEVICE)
    t0 = time.perf_counter()
    for idx in torch.randperm(len(es_x), generator=torch.Generator().manual_seed(epoch)).split(SIZES["batch"]):
        loss = F.cross_entropy(net(es_x[idx.to(DEVICE)]), es_y[idx.to(DEVICE)])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync(DEVICE)
    t1 = time.perf_counter()
    accuracy, val_loss = evaluate(net)
    sync(DEVICE)
    t2 = time.perf_counter()
    train_s, eval_s = train_s + t1 - t0, eval_s + t2 - t1
    history.append(val_loss)
    stop = stopper.step(val_loss)
    manager.save(net, optimizer=opt, early_stopping=stopper, metric=val_loss, epoch=epoch + 1)
    sync(DEVICE)
    es_save_s += time.perf_counter() - t2
    if stop:
        break
last_loss = evaluate(net)[1]
manager.restore_best(net)
best_loss = evaluate(net)[1]
epochs_run = len(history)
print(f"stopped after {epochs_run} of {SIZES['es_epochs']} epochs (patience {SIZES['patience']}); best "
      f"validation loss {stopper.best:.4f} at epoch {stopper.best_epoch + 1}")
print(f"last weights: loss {last_loss:.4f}; restored best.pt: loss {best_loss:.4f}")
es_total_s = train_s + eval_s + es_save_s  # the loop's clock: training, evaluations, checkpoint saves
eval_share = eval_s / es_total_s
print(f"evaluating {SIZES['n_val']} samples every epoch of {SIZES['es_train']}: {eval_s:.2f} s of "
      f"{es_total_s:.2f} s ({eval_share:.0%} of training + evaluations + saves; the saves {es_save_s:.2f} s)")

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.2))
ax.plot(range(1, epochs_run + 1), history, "o-", label="validation loss")
ax.axvline(stopper.best_epoch + 1, color="tab:green", ls="--", label="best (restored)")
ax.axvline(epochs_run, color="tab:red", ls=":", label="stopped")
ax.set(xlabel="epoch", ylabel="validation loss", title=f"Early stopping, patience {SIZES['patience']}")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 3. What a resumable checkpoint holds, and why writes must be atomic
#
# To continue *as if nothing happened*, a checkpoint needs everything the future of the run
# depends on: the **model**, the **optimizer** (momentum, Adam's moments — often twice the
# model), the **LR scheduler**'s step, the **GradScaler** (fp16), the **early-stopping**
# counters, **every RNG** (Python, NumPy, torch CPU and CUDA: dropout, augmentation) and the
# **sampler's position** (epoch and next batch). `effkit.resume.save_checkpoint` writes all of it,
# so that you can see each piece. At work the same pieces come from libraries: 🤗 Accelerate's
# `accelerator.save_state()` / `load_state()` save the model, optimizer, scheduler, scaler and RNG
# states (and `skip_first_batches` resumes mid-epoch), and torchdata's `StatefulDataLoader` (a
# drop-in `DataLoader` with `state_dict()`) keeps the loader's position, workers included.

# %%
net = new_model(0)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
sched = warmup_cosine(opt, 100, 10)
F.cross_entropy(net(X_TRAIN[:64]), Y_TRAIN[:64]).backward()
opt.step()
sched.step()
ckpt_tmp = tempfile.TemporaryDirectory(prefix="lesson6-ckpt-")  # removed when the kernel stops
ckpt_dir = Path(ckpt_tmp.name)
path = save_checkpoint(ckpt_dir / "last.pt", net, optimizer=opt, scheduler=sched,
                       scaler=torch.amp.GradScaler("cpu"), early_stopping=EarlyStopping(3),
                       epoch=0, step=1, batch_in_epoch=1)


def nbytes(obj):
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(nbytes(v) for v in obj)
    return 0


payload = torch.load(path, weights_only=True)
for key in ("model", "optimizer", "scheduler", "scaler", "early_stopping", "rng", "progress"):
    print(f"{key:15} {nbytes(payload[key]) / 1024:9.1f} KiB of tensors   {str(payload[key])[:60]!r}...")
print(f"file: {path.stat().st_size / 1024:.0f} KiB")

# %% [markdown]
# A process can die at any instant — also in the middle of writing that file. `torch.save(state,
# "last.pt")` truncates the old file first and writes the new one in pieces: a kill in between
# leaves **neither** checkpoint. An atomic write goes to a temporary file in the same directory,
# `fsync`s it, and `os.replace`s it onto the name (a rename is atomic within one file system):
# a reader sees the old file or the new one, never half of one.
#
# Below, a child process saves in a loop and is SIGKILLed at a random moment; then we try to
# load what it left. **Predict.** Out of the kills below, how many leave an unloadable
# checkpoint with plain `torch.save` to the final name?

# %%
GUESS_TORN = None  # your guess: a number of kills

# %%
# The saving child is *forked*, and a forked process cannot use CUDA: on a GPU it would die at
# its first save and no kill would be measured. So it saves host copies — what a GPU job writes
# anyway (a checkpoint is copied to host memory first).
cpu_payload = torch.load(path, weights_only=True, map_location="cpu")
cpu_net = copy.deepcopy(net).cpu()
cpu_opt = torch.optim.SGD(cpu_net.parameters(), lr=0.1, momentum=0.9)
cpu_opt.load_state_dict(opt.state_dict())
cpu_sched = warmup_cosine(cpu_opt, 100, 10)
cpu_sched.load_state_dict(sched.state_dict())


def save_in_place(path):
    torch.save(cpu_payload, path)  # the usual one-liner: truncates, then writes


def save_atomic(path):
    save_checkpoint(path, cpu_net, optimizer=cpu_opt, scheduler=cpu_sched, epoch=0, step=1)


def kill_during_saves(save, path, rng):
    """Fork a child that saves to `path` forever; SIGKILL it at a random moment."""
    save(path)  # a complete checkpoint exists before the child starts
    pid = os.fork()
    if pid == 0:  # the child: save until killed
        try:
            while True:
                save(path)
        finally:
            os._exit(0)
    time.sleep(rng.uniform(0.05, 0.25))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    try:
        if save is save_atomic:
            load_checkpoint(path, cpu_net, restore_rng=False)
        else:
            torch.load(path, weights_only=True)
        return False
    except Exception:  # CheckpointError, or torch's zip reader on a torn file
        return True


torn = {}
rng = random.Random(0)
for name, save in tqdm([("torch.save in place", save_in_place), ("atomic save_checkpoint", save_atomic)],
                       desc="kill during saves"):
    torn[name] = sum(kill_during_saves(save, ckpt_dir / f"{name[:5]}.pt", rng) for _ in range(SIZES["kills"]))
for name, count in torn.items():
    print(f"{name:24} {count} of {SIZES['kills']} kills left an unloadable checkpoint")
lesson.check_guess(GUESS_TORN, torn["torch.save in place"], "torn checkpoints from torch.save in place", "{:.0f}")

# %% [markdown]
# Keep two files: **last** (for resuming; overwritten every save) and **best** (the best
# validation metric so far; what early stopping hands back). `CheckpointManager` writes both
# atomically, every N steps and/or every N minutes (time-based saving bounds the work lost
# whatever the step time), and deletes temporary files a killed save left behind.
#
# ## 4. Resume, bit for bit
#
# With deterministic kernels, resuming from a complete checkpoint gives *exactly* the weights
# of an uninterrupted run. We train `resume_steps` steps with dropout-free ResNet on shuffled
# data (`ResumableRandomSampler`: the order depends only on seed and epoch), once straight
# through, once killed half-way and resumed; then twice more, forgetting first the sampler's
# position, then the global torch RNG. The data order does not depend on that RNG here (the
# sampler derives it from seed and epoch); what does is the `torch.rand` draw every step that
# stands in for dropout — forget the RNG and the resumed run draws different "dropout" noise.

# %%
def run(steps, ckpt=None, stop_at=None, keep_position=True, keep_rng=True, deterministic=True):
    """Train `steps` steps; optionally save at `stop_at` and return, or resume from `ckpt`."""
    seed_everything(0, deterministic=deterministic)
    net = new_model(0)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sched = warmup_cosine(opt, steps, steps // 5)
    sampler = ResumableRandomSampler(SIZES["n_train"], seed=0)
    per_epoch = SIZES["n_train"] // SIZES["batch"]
    step = 0
    if ckpt is not None:
        progress = load_checkpoint(ckpt, net, optimizer=opt, scheduler=sched, restore_rng=keep_rng)
        step = progress.step
    while step < steps:
        epoch, batch = divmod(step, per_epoch)
        sampler.set_epoch(epoch, skip=batch * SIZES["batch"] if keep_position else 0)
        order = torch.tensor(list(sampler))
        for idx in order.split(SIZES["batch"]):
            if step == stop_at:
                return save_checkpoint(ckpt_dir / "resume.pt", net, optimizer=opt, scheduler=sched,
                                       epoch=epoch, step=step, batch_in_epoch=batch)
            noise = torch.rand(()) * 1e-3  # stands in for dropout: a draw from the global torch RNG
            idx = idx.to(DEVICE)
            loss = F.cross_entropy(net(X_TRAIN[idx]), Y_TRAIN[idx]) * (1 + noise)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step, batch = step + 1, batch + 1
            if step == steps:
                break
    seed_everything(0, deterministic=False)
    return net


n = SIZES["resume_steps"]
with tqdm(total=4, desc="resume runs", unit="run") as bar:
    straight = run(n); bar.update(1)  # noqa: E702
    saved = run(n, stop_at=n // 2 + 1)  # the crash: everything after this is lost
    results = {"resumed (everything saved)": run(n, ckpt=saved)}; bar.update(1)  # noqa: E702
    results["resumed, position not saved"] = run(n, ckpt=saved, keep_position=False); bar.update(1)  # noqa: E702
    results["resumed, RNG not saved"] = run(n, ckpt=saved, keep_rng=False); bar.update(1)  # noqa: E702
ref = torch.cat([p.detach().flatten() for p in straight.parameters()])
resume_diff = {}
for name, model in results.items():
    got = torch.cat([p.detach().flatten() for p in model.parameters()])
    resume_diff[name] = float((got - ref).abs().max())
    print(f"{name:28} bit-equal to the uninterrupted run: {torch.equal(got, ref)!s:5}  "
          f"max |difference| {resume_diff[name]:.2e}")

# %% [markdown]
# ## 5. What a save costs, and how often to save
#
# Every save stops training for a moment. **Predict.** How much slower (B/A) is training that
# saves a full checkpoint after *every* step than training that never saves?

# %%
GUESS_SAVE_EVERY_STEP = None  # your guess, e.g. 0.8 (B runs at 80% of A's speed)

# %%
net = new_model(0)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
sched = warmup_cosine(opt, 10_000, 100)
burst_manager = CheckpointManager(ckpt_dir / "burst", every_steps=1)
save_times = []


def burst(save_every_step):
    def go():
        for step in range(SIZES["burst_steps"]):
            idx = torch.randint(0, SIZES["n_train"], (SIZES["batch"],), device=DEVICE)
            loss = F.cross_entropy(net(X_TRAIN[idx]), Y_TRAIN[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if save_every_step:
                t0 = time.perf_counter()
                burst_manager.save(net, optimizer=opt, scheduler=sched, step=step + 1)
                save_times.append(time.perf_counter() - t0)
        return SIZES["burst_steps"] * SIZES["batch"]
    return go


save_ab = lesson.ab("training vs training + a save every step", burst(False), burst(True),
                    pairs=SIZES["pairs"], a_label="no saves", b_label="a save every step", dev=DEVICE)
save_s = statistics.median(save_times)
step_s = SIZES["batch"] / save_ab.a_median
lesson.check_guess(GUESS_SAVE_EVERY_STEP, save_ab.ratio, "speed with a save every step / without", "{:.2f}x")
# Three numbers that need not agree: the verdict's interval is of the median of the per-pair ratios (each
# pair runs both arms back to back, under the same conditions), while the two medians above are taken
# per arm, and may come from different pairs; the save is timed on its own, inside B's bursts.
print(f"the interval is of the median per-pair ratio, {save_ab.ratio:.2f}x; the ratio of the two arms' medians"
      f" is {save_ab.b_median / save_ab.a_median:.2f}x (medians from different pairs: it may lie outside the interval)")
print(f"one save: {save_s * 1e3:.1f} ms, timed on its own (median of {len(save_times)}); one training step:"
      f" {step_s * 1e3:.1f} ms (the no-saves median); one save = {save_s / step_s:.2f} steps here")
print(f"the extra time per step the A/B implies: {step_s * (1 / save_ab.ratio - 1) * 1e3:.1f} ms from the median"
      f" per-pair ratio, {SIZES['batch'] * (1 / save_ab.b_median - 1 / save_ab.a_median) * 1e3:.1f} ms from the two"
      " medians, against the save's own timing above (the A/B's bursts and the lone saves are timed apart:"
      " where they disagree, the A/B is the figure for a run)")

# %% [markdown]
# So how often? Saving every `τ` seconds of work costs `δ/τ` of the time in saves; a failure
# loses on average half an interval. Young (1974) balanced the two: **τ ≈ √(2 δ M)** for a save
# cost δ and a mean time between failures M; Daly (2006) refined it for saves that are not small
# against M. The optimum is flat — 2× off costs little — but saving every step, or once a day,
# costs a lot. Below: Daly's model with *our measured* save cost, for machines that fail once an
# hour, once a day, once a week (a job on 1,000 GPUs that each fail once a year fails every ~9 h).

# %%
MTBF = {"1 hour": 3600.0, "1 day": 86400.0, "1 week": 7 * 86400.0}
fig, ax = plt.subplots(figsize=(7, 3.6))
grid = [save_s * 2 ** (k / 4) for k in range(200) if save_s * 2 ** (k / 4) < 3e6]  # up to ~a month
for (label, mtbf), colour in zip(MTBF.items(), ["tab:red", "tab:blue", "tab:green"], strict=True):
    shown = [t for t in grid if t < 20 * mtbf]
    ax.plot(shown, [100 * overhead(t, save_s, mtbf) for t in shown], color=colour, label=f"MTBF {label}")
    best = daly_interval(save_s, mtbf)
    ax.plot([best], [100 * overhead(best, save_s, mtbf)], "o", color=colour)
    print(f"MTBF {label:7}: save every {young_interval(save_s, mtbf):7.1f} s (Young), "
          f"{best:7.1f} s (Daly) = every {steps_between_saves(best, step_s):,} steps here; expected "
          f"overhead {overhead(best, save_s, mtbf):.2%} vs {overhead(step_s, save_s, mtbf):.0%} saving every step"
          f" (model, from the lone save's time; the A/B measured {1 / save_ab.ratio - 1:.0%} for the saves alone)")
ax.set(xscale="log", yscale="log", xlabel="seconds of training between saves",
       ylabel="expected extra wall time (%)", ylim=(1e-2, 1e3),
       title=f"Checkpoint interval vs failure rate — save measured at {save_s * 1e3:.1f} ms")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# A save is not always cheap against a step: the A/B cell above printed one save in steps. A
# save's time grows with the bytes it writes (model and optimizer state: section 3's table), a
# step's with its arithmetic (model and batch size), so the ratio depends on the model, the batch
# and the machine. Where it matters, make the save asynchronous: copy the state to host memory (the
# blocking part), write it in the background. Young/Daly can then use the blocking part as δ, but
# only while the background write is short against τ: a checkpoint exists only once its write has
# finished, so a failure during the write loses the work since the save before it, and a write that
# takes longer than τ holds up the next save.

# %%
fig, ax = plt.subplots(figsize=(10, 2.2))
COLOURS = {"work": "tab:blue", "save": "tab:orange", "lost": "tab:red", "restart": "tab:gray"}
TIMELINE = [(0, 2.0, "work", "τ of work"), (2.0, 0.25, "save", "δ"), (2.25, 2.0, "work", "τ"),
            (4.25, 0.25, "save", "δ"), (4.5, 1.1, "lost", "lost"), (5.6, 0.5, "restart", "R"),
            (6.1, 1.1, "work", "redo"), (7.2, 0.9, "work", ""), (8.1, 0.25, "save", "δ")]
for start, width, kind, label in TIMELINE:
    ax.add_patch(Rectangle((start, 0.3), width, 0.5, color=COLOURS[kind], alpha=0.85))
    ax.text(start + width / 2, 0.55, label, ha="center", va="center", color="white", fontsize=8)
ax.add_patch(FancyArrowPatch((5.6, 1.3), (5.6, 0.85), arrowstyle="->", mutation_scale=14))
ax.text(5.6, 1.4, "failure: the work since the last complete save is lost", ha="center", fontsize=8)
ax.add_patch(FancyArrowPatch((4.5, 0.15), (7.2, 0.15), arrowstyle="<->", mutation_scale=10))
ax.text(5.85, -0.15, "cost of one failure: the lost work (< τ + δ), restart R, and redoing it",
        ha="center", fontsize=8)
ax.set(xlim=(-0.2, 10), ylim=(-0.4, 1.7), title="Checkpoint interval τ, save cost δ, restart R")
ax.axis("off")
plt.show()

# %% [markdown]
# ## 6. Preview: sharded checkpoints with `torch.distributed.checkpoint`
#
# Under FSDP/ZeRO (lesson 11) no rank holds the whole model: gathering it on rank 0 to call
# `torch.save` costs time and memory. `torch.distributed.checkpoint` (DCP) has **every rank write
# its own shards in parallel**, plus a metadata file, and can load them back into a *different*
# number of ranks (resharding). Its `async_save` stages the state in host memory and writes in
# the background. The shape of the code:
#
# ```python
# import torch.distributed.checkpoint as dcp
# from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
#
# model_sd, optim_sd = get_state_dict(model, optimizer)      # sharded views, no gather
# dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=f"ckpt/step{step}")
# ...
# state = {"model": model_sd, "optim": optim_sd}
# dcp.load(state, checkpoint_id="ckpt/step1200")             # in place, on any world size
# set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
# ```
#
# The same rules apply: a checkpoint directory is complete only once its metadata is written —
# resume from the newest *complete* one — and RNGs and the data position travel with it.
#
# ## 7. An average of the weights: EMA
#
# At a learning rate that does not decay, SGD never settles: each step's gradient noise moves the
# weights, so the last weights are one draw from a cloud around where training has got to. An
# average of the recent weights cancels much of that noise. For stochastic approximation, Polyak &
# Juditsky (1992) proved that averaging the iterates (with slowly decreasing steps) converges at the
# highest rate possible, for the classical optimization and identification problems they studied; a
# deep network is not one of them, which is why we measure. Deep-learning practice keeps an
# **exponential moving average** (EMA) of the weights beside the model, updated after every
# optimizer step, `ema ← decay · ema + (1 − decay) · weights`, and evaluates and ships the EMA.
# PyTorch's documentation calls it "a variation of Polyak averaging" with exponential weights; timm's
# training script keeps one on request (`--model-ema`; `ModelEmaV2`, `ModelEmaV3` in
# `timm.utils.model_ema`); PyTorch has it built in, and this lesson uses that:
#
# ```python
# from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
#
# ema = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(EMA_DECAY), use_buffers=True)
# ...                          # after every optimizer.step():
# ema.update_parameters(net)   # the first call copies the weights, later ones average
# evaluate(ema.module)         # the averaged copy is an ordinary model
# ```
#
# Two choices matter. **The decay**: the average spans about 1/(1 − decay) steps, and timm's
# documentation says to choose it "relative to your update count per epoch". Here decay = 1 − 1/(steps
# per epoch): an average over about one epoch. **BatchNorm**: its running mean and variance are
# buffers, not parameters, and averaged weights normalised with the *last* weights' statistics would
# be normalised with another model's statistics. `use_buffers=True` averages the buffers with the
# same decay (timm's EMA averages the whole `state_dict` the same way); PyTorch's other way is
# `torch.optim.swa_utils.update_bn(loader, ema)` after training, one more pass over the training
# data that recomputes them. This lesson uses the first and does not compare them. And the EMA is state: a resumable checkpoint
# (section 3) must hold `ema.state_dict()` too, or a resumed run restarts its average from the
# current weights.
#
# Every run of section 1 kept an EMA, so the workload is that one: same network, data, schedules and
# seeds. We expect the most noise to average away in the constant LR's last weights, so we train more
# constant-LR seeds here (`ema_seeds`). Both models of a run are scored on the same held-out images
# (for section 1's seeds, "raw" is the accuracy it printed after the last step), so the difference
# EMA − raw is paired per run; its median gets an order-statistic interval with its
# real coverage (`effkit.arms.paired_difference`, as in lessons 7-9), and the verdict says only what
# that interval allows. Warm-up + cosine and one-cycle both end at an LR near zero: their runs are
# pooled as one group, one run per seed and schedule. The two runs of a seed share its initial
# weights and data order, so they are not independent draws: that group's interval counts runs, not
# independent seeds, and its stated coverage is approximate.
#
# **Predict.** At the end of a constant-LR run, how many points of held-out accuracy does the EMA
# add to the last weights (negative if it loses)?

# %%
GUESS_EMA_POINTS = None  # your guess, in points of accuracy, e.g. 1.0 (or -0.5 if the EMA loses)

# %%
constant_name, annealed = list(SCHEDULES)[0], list(SCHEDULES)[1:]
with tqdm(total=len(SIZES["ema_seeds"]) * SIZES["epochs"] * STEPS_PER_EPOCH, desc="more constant-LR seeds",
          unit="step") as bar:  # no evaluations during these runs: only their end is scored
    extra_ends = [train_schedule(constant, PEAK_LR, seed, bar, evals_per_epoch=None)[1] for seed in SIZES["ema_seeds"]]


def accuracy_of(rows):
    return sum(rows) / len(rows)


ema_groups = {constant_name: list(ends[constant_name]) + extra_ends,
              " and ".join(annealed): [end for name in annealed for end in ends[name]]}
print(f"held-out accuracy at the end of each run, last weights (raw) vs their EMA (decay {EMA_DECAY:.4f}: about"
      f" {1 / (1 - EMA_DECAY):.0f} steps, one epoch), on {SIZES['n_val']:,} held-out images of the synthetic CIFAR"
      f" stand-in (not CIFAR-10), {DEVICE_NAME}:")
ema_diff, ema_verdict = {}, {}
for group, runs in ema_groups.items():
    raw, avg = [accuracy_of(end["raw"]) for end in runs], [accuracy_of(end["ema"]) for end in runs]
    ema_diff[group] = paired_difference(raw, avg)
    rows_error = max(rows_half_width(end["raw"], end["ema"]) for end in runs)
    ema_verdict[group] = difference_verdict(ema_diff[group], "raw", "EMA", rows_error=rows_error)
    if group != constant_name:  # two schedules on the same seeds: paired runs, not independent ones
        pooled = (f"over {len(runs)} runs ({len(SIZES['seeds'])} seeds x {len(annealed)} schedules, not independent:"
                  " coverage approximate)")
        ema_verdict[group] = (ema_verdict[group].replace(f"over {len(runs)} seeds", pooled)
                              .replace("these seeds", "these runs"))
    print(f"* {group} ({len(runs)} runs): raw {', '.join(f'{a:.1%}' for a in raw)}; EMA {', '.join(f'{a:.1%}' for a in avg)}")
    print(f"  -> {ema_verdict[group]}")
rode = [end for runs in ends.values() for end in runs]  # section 1's runs, whose clock counts evaluations too
ema_ms = 1e3 * sum(end["ema_seconds"] for end in rode) / (len(rode) * SIZES["epochs"] * STEPS_PER_EPOCH)
ema_cost = sum(end["ema_seconds"] for end in rode) / sum(end["seconds"] for end in rode)
print(f"one EMA update: {ema_ms:.2f} ms; on the clock, the updates would have added {ema_cost:.1%} to section 1's"
      " runs (training and evaluations); the EMA also holds a second copy of the weights and buffers")
lesson.check_guess(GUESS_EMA_POINTS, 100 * ema_diff[constant_name].median,
                   "EMA − raw held-out accuracy at the end of a constant-LR run (median over seeds), points", "{:+.1f}")

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.6))
for (group, runs), colour in zip(ema_groups.items(), ["tab:gray", "tab:blue"], strict=True):
    for i, end in enumerate(runs):
        ax.plot([0, 1], [100 * accuracy_of(end["raw"]), 100 * accuracy_of(end["ema"])], "o-", color=colour,
                alpha=0.7, label=group if i == 0 else None)
ax.set(xticks=[0, 1], xticklabels=["last weights", f"their EMA (decay {EMA_DECAY:.3f})"], xlim=(-0.3, 1.3),
       ylabel="held-out accuracy (%)",
       title=f"End of each run, two models: one line per run\n{DEVICE_NAME}, synthetic CIFAR stand-in")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# How to read the two verdicts. Where the LR stays high, the last weights carry the most step-to-step
# noise, and an average over the last epoch can remove some of it: the EMA does part of the work of
# an LR decay without choosing when to decay. Where the schedule already took the LR to near zero,
# the last steps barely move the weights, and an EMA has little left to remove — it may even lag,
# averaging in weights from before the end. Which of these happened here is what the intervals say,
# not this paragraph: a group whose interval holds 0 is "no difference these runs resolve", however
# plausible the story.
#
# ## 8. Reproducibility: what determinism costs, and the spread it cannot remove
#
# Section 4's bit-exact resume ran with `seed_everything(0, deterministic=True)`. After the A/B
# below, the same seed runs twice straight through with deterministic kernels and twice with the
# defaults: that shows whether the default kernels repeat a run bit for bit on this device. Neither
# pair is a resume, so it does not show whether section 4's resume needed deterministic mode: that
# would take a resume without it. PyTorch's reproducibility notes list what a run needs to repeat
# itself bit for bit, and say that even then completely reproducible results are not guaranteed
# across PyTorch releases, commits or platforms, nor between CPU and GPU:
#
# * seed every generator: `torch.manual_seed` (every device), Python's `random`, NumPy, and a
#   DataLoader's workers (its `generator=` and a `worker_init_fn` that seeds each worker);
# * `torch.backends.cudnn.benchmark = False`: the autotuner may pick another convolution algorithm
#   in another run;
# * `torch.use_deterministic_algorithms(True)`: operations that have a deterministic implementation
#   use it, and those that do not raise an error. It covers cuDNN's convolutions (which
#   `torch.backends.cudnn.deterministic = True` alone would), and with it on, `torch.empty` and its
#   relatives fill new memory with NaN (`torch.utils.deterministic.fill_uninitialized_memory`, on by
#   default), so that reading uninitialised memory is reproducible too.
#
# On CUDA, the documentation of `use_deterministic_algorithms` also asked for
# `CUBLAS_WORKSPACE_CONFIG=:4096:8` (it did up to PyTorch 2.7 at least); the 2.14 pinned here no longer
# mentions it, and pytorch/pytorch#161749 says why: PyTorch gives each cuBLAS handle and stream a
# workspace of its own, which that pull request says "appears to be sufficient". `effkit.seed.seed_everything` still sets it,
# harmless where it is not needed. The notes warn that deterministic operations are often slower.
# How much slower, here? The A/B below times the same training step with the default kernels (A) and
# inside `deterministic_kernels()` (B), entered and left off the clock around each burst, and puts back
# whatever was set before. On a CPU, cuDNN and its autotuner play no part, and the operations
# `use_deterministic_algorithms` lists that this step runs (convolutions among them) are listed for
# CUDA tensors only. On a CPU, then, our hypothesis for any cost is the NaN fill of new memory
# above — a hypothesis, not isolated here: this A/B does not test it, and setting
# `torch.utils.deterministic.fill_uninitialized_memory = False` inside B would.
#
# **Predict.** Speed with deterministic kernels / speed without (1.0 = no cost), on this device?

# %%
GUESS_DETERMINISTIC_SPEED = None  # your guess, e.g. 0.9 (B runs at 90% of A's speed)


# %%
@contextlib.contextmanager
def deterministic_kernels():
    """Deterministic kernels inside the block (PyTorch's reproducibility notes); what was set before, after it."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.benchmark)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False  # no autotuner: the same convolution algorithm in every run
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.benchmark = saved[2]


det_net = new_model(0)
det_opt = torch.optim.SGD(det_net.parameters(), lr=0.05, momentum=0.9)


def steps_burst():
    for _ in range(SIZES["burst_steps"]):
        idx = torch.randint(0, SIZES["n_train"], (SIZES["batch"],), device=DEVICE)
        loss = F.cross_entropy(det_net(X_TRAIN[idx]), Y_TRAIN[idx])
        det_opt.zero_grad(set_to_none=True)
        loss.backward()
        det_opt.step()
    return SIZES["burst_steps"] * SIZES["batch"]


settings_before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
switch = contextlib.ExitStack()  # holds deterministic_kernels() open during B's bursts only
try:
    det_ab = lesson.ab("training step on the synthetic CIFAR stand-in: default vs deterministic kernels",
                       steps_burst, steps_burst, pairs=SIZES["pairs"], a_label="default kernels",
                       b_label="deterministic kernels", dev=DEVICE,
                       before=lambda side: switch.enter_context(deterministic_kernels()) if side == "b" else None,
                       after=lambda side: switch.close())
finally:
    switch.close()
settings_after = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
assert settings_after == settings_before, (settings_before, settings_after)
lesson.check_guess(GUESS_DETERMINISTIC_SPEED, det_ab.ratio, "speed with deterministic kernels / without", "{:.2f}x")
print(f"after the A/B: deterministic algorithms {settings_after[0]}, cudnn.benchmark {settings_after[1]}"
      " (as before it)")

# %% [markdown]
# What does determinism buy on this device? Run the same seed twice (section 4's `run()`, the
# uninterrupted `resume_steps`), with and without deterministic kernels, and compare the weights.

# %%
steps = SIZES["resume_steps"]
with tqdm(total=3, desc="the same seed, twice", unit="run") as bar:
    twice = {"deterministic kernels": (straight, run(steps))}  # section 4's run, and one more
    bar.update(1)
    twice["default kernels"] = (run(steps, deterministic=False), run(steps, deterministic=False))
    bar.update(2)
same_seed_diff = {}
for mode, (first, second) in twice.items():
    a, b = (torch.cat([p.detach().flatten() for p in m.parameters()]) for m in (first, second))
    same_seed_diff[mode] = float((a - b).abs().max())
    print(f"the same seed twice, {steps} steps, {mode:21}: bit-equal {torch.equal(a, b)!s:5}"
          f" max |weight difference| {same_seed_diff[mode]:.1e}  ({DEVICE_NAME})")
if same_seed_diff["default kernels"] == 0:
    print("here the default kernels repeated the run bit for bit too: on this device deterministic mode bought"
          " nothing these two runs could see (one repeat, not a guarantee), and it costs what the A/B above says")
else:
    print("without deterministic kernels the same seed gave other weights: that run cannot be repeated bit for"
          " bit, and a resume (section 4) or a debugging session would not see the same numbers twice")

# %% [markdown]
# Determinism makes one run repeatable; it does not make a recipe's result certain. Another seed
# (other initial weights, another data order) is another draw. Summers & Dinneen (2021) found that
# each source of nondeterminism they isolated, cuDNN's included, had a similar effect on how much
# trained networks differ, and that even a one-bit change in the initial weights makes training end
# at very different weights. So the number a change must beat is the recipe's spread from seed to
# seed. Sections 1 and 7 trained each schedule on several seeds, nothing else changed; here are their
# final accuracies (section 1's seeds: the accuracies it printed after the last step; the constant
# LR's extra seeds: section 7's), and what they imply for a comparison.

# %%
finals = {name: [accuracy_of(end["raw"]) for end in runs] for name, runs in ends.items()}
finals[constant_name] += [accuracy_of(end["raw"]) for end in extra_ends]
print(f"final held-out accuracy of the last weights, only the seed changed ({SIZES['n_val']:,} held-out images of"
      f" the synthetic CIFAR stand-in, {DEVICE_NAME}):")
spread_lines = {}
for name, accs in finals.items():
    if len(accs) < 2:
        spread_lines[name] = f"one seed, {accs[0]:.1%}: no spread is measured with one seed"
    else:
        spread_lines[name] = (f"{len(accs)} seeds, {min(accs):.1%} to {max(accs):.1%}: a range of"
                              f" {100 * (max(accs) - min(accs)):.1f} points, SD {100 * statistics.stdev(accs):.1f}")
    print(f"* {name:28} {spread_lines[name]}")
base = list(SCHEDULES)[1]  # warm-up + cosine: the recipe a change would start from
k, base_acc = len(finals[base]), statistics.mean(finals[base])
rows_sd = 100 * math.sqrt(base_acc * (1 - base_acc) / SIZES["n_val"])
spread_rule = (f"{base}: changing only the seed moved its final accuracy over"
               f" {100 * (max(finals[base]) - min(finals[base])):.1f} points ({k} seeds), so a difference inside that"
               " range is one the seed alone could have produced here" if k > 1 else
               f"{base}: one seed, so its spread from seed to seed is not measured here")
spread_rule += (f"; one run of a change that beats all {k} seed(s) of the recipe proves little: an unchanged"
                f" recipe's next run does that {1 / (k + 1):.0%} of the time (it is as likely to rank anywhere among"
                f" {k + 1}); every run of a change above every run of the recipe, {k} seed(s) each, happens by chance"
                f" {1 / math.comb(2 * k, k):.0%} of the time (one-sided; effkit.seed_compare's test, used on"
                " seeds in lessons 1 and 2)")
print(spread_rule)
print(f"and every accuracy above is measured on one fixed set of {SIZES['n_val']:,} images: on new images each"
      f" carries its own sampling error too (SD about {rows_sd:.1f} points at {base_acc:.0%})")

# %% [markdown]
# ## Your turn
#
# **A schedule of your own.** Re-run one-cycle with your own peak LR and warm-up (`MY_PEAK`,
# `MY_WARMUP_FRAC`) and set it against warm-up + cosine's times to the target from section 1. One run
# is one draw (section 8): with no difference at all, it lands earlier than all three of section 1's
# seeds 1 time in 4. So one seed shows whether your schedule reaches the target, and where its time
# falls against the seed range — not that it is faster or slower. To compare, set `MY_SEEDS` to
# section 1's seeds (three runs, three times the wait): with no difference, every run of yours earlier
# than every warm-up + cosine run then happens by chance 1 time in 20 (and every one later, 1 time in
# 20 too). The cell prints what `effkit.seed_compare.separation` says, that chance included. (Your runs are timed later than
# section 1's: a machine that got busier in between moves their times too.)
#
# **A checkpoint interval for your machines.** Set `MY_STEP_S` and `MY_SAVE_S` to the seconds per
# step and per save of a job of yours (or leave them `None` for this notebook's measurements), and
# `MY_SAVE_EVERY` to how often you would save, in steps. Predict first: for what mean time between
# failures M is that interval Young-optimal (τ = √(2δM), solved for M)? Write it in `GUESS_MTBF_S`,
# then run the cell.

# %%
MY_PEAK, MY_WARMUP_FRAC = 0.4, 0.3  # your turn: change these
MY_SEEDS = (0,)  # one run, one draw; SIZES["seeds"] (section 1's) to compare seed ranges
my_times, my_finals = [], []
with tqdm(total=len(MY_SEEDS) * SIZES["epochs"] * STEPS_PER_EPOCH, desc="your schedule") as bar:
    for seed in MY_SEEDS:
        mine, _ = train_schedule(lambda o, t, w: one_cycle(o, t, int(MY_WARMUP_FRAC * t)), MY_PEAK, seed, bar)
        my_times.append(time_to_target(mine))
        my_finals.append(mine[-1][1])
cosine_name = list(SCHEDULES)[1]
for label, seeds, times in [(f"one-cycle, peak {MY_PEAK}, warm-up {MY_WARMUP_FRAC:.0%}", MY_SEEDS, my_times),
                            (f"{cosine_name} (section 1)", SIZES["seeds"], reached[cosine_name])]:
    shown = ", ".join("not reached" if t is None else f"{t:.1f} s" for t in times)
    print(f"{label}, seed(s) {list(seeds)}: time to {TARGET:.0%} {shown}")
print(f"final accuracy of yours: {', '.join(f'{a:.1%}' for a in my_finals)}")
print(separation(reached[cosine_name], my_times).words(cosine_name, "one-cycle (yours)", "later", "earlier"))

# %%
MY_STEP_S, MY_SAVE_S = None, None  # seconds per step and per save of a job of yours; None: this notebook's
MY_SAVE_EVERY = 100  # steps between saves
GUESS_MTBF_S = None  # your prediction, in seconds: the MTBF for which saving every MY_SAVE_EVERY steps is optimal
my_step_s = step_s if MY_STEP_S is None else MY_STEP_S
my_save_s = save_s if MY_SAVE_S is None else MY_SAVE_S
my_mtbf = mtbf_for_interval(MY_SAVE_EVERY * my_step_s, my_save_s)
print(f"a step {my_step_s:.4g} s{' (measured here)' if MY_STEP_S is None else ''}, a save {my_save_s:.4g} s"
      f"{' (measured here)' if MY_SAVE_S is None else ''}, a save every {MY_SAVE_EVERY} steps")
lesson.check_guess(GUESS_MTBF_S, my_mtbf, f"MTBF for which saving every {MY_SAVE_EVERY} steps is Young-optimal, s",
                   "{:,.1f}")
if young_holds(my_save_s, my_mtbf):
    print(f"saving every {MY_SAVE_EVERY} steps is Young-optimal for an MTBF of {readable_duration(my_mtbf)}")
else:  # Young's first-order rule needs saves much shorter than the MTBF: say it does not apply
    print(f"saving every {MY_SAVE_EVERY} steps would be Young-optimal only for an MTBF of {readable_duration(my_mtbf)},"
          f" barely {my_mtbf / my_save_s:.1f} saves long, where Young's first-order rule does not hold:"
          " on any real machine that is far too often to save")

# %% [markdown]
# ### In your own words
#
# Section 4 resumed a killed run from a complete checkpoint, then without the sampler's position
# and without the RNG state; section 3 killed processes in the middle of saves. Explain in 2–3
# sentences what each missing piece changes in the resumed run, why a plain `torch.save` onto the
# checkpoint's own name can leave no loadable checkpoint, and how an atomic write avoids that (so
# does writing each checkpoint once, to a new name, with a loader that checks a file and falls back
# to the one before).
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=6)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(6, DEVICE_NAME, "; CIFAR data: the synthetic stand-in, not CIFAR-10"))
for name, times in reached.items():
    shown = ", ".join("not reached" if t is None else f"{t:.1f} s" for t in times)
    print(f"* {name}: time to {TARGET:.0%} validation accuracy {shown} ({len(times)} seed(s))")
print(f"* early stopping (patience {SIZES['patience']}): {epochs_run} of {SIZES['es_epochs']} epochs run;"
      f" best epoch {stopper.best_epoch + 1}; evaluations {eval_share:.0%} of training + evaluations + saves;"
      f" restoring best.pt: loss {last_loss:.4f} -> {best_loss:.4f}")
print(f"* checkpoint of a {sum(p.numel() for p in net.parameters()):,}-parameter model: "
      f"{path.stat().st_size / 1024:.0f} KiB; one save {save_s * 1e3:.1f} ms, one step {step_s * 1e3:.1f} ms"
      f" ({save_s / step_s:.2f} steps a save)")
for name, count in torn.items():
    print(f"* {name}: {count} of {SIZES['kills']} random kills left an unloadable checkpoint")
for name, diff in resume_diff.items():
    print(f"* {name}: max |weight difference| vs uninterrupted {diff:.1e}")
print(f"* a save every step vs none: {save_ab.verdict}")
for label, mtbf in MTBF.items():
    best = daly_interval(save_s, mtbf)
    print(f"* MTBF {label}: save every {best:.0f} s ({steps_between_saves(best, step_s):,} steps),"
          f" expected overhead {overhead(best, save_s, mtbf):.2%}")
for group, said in ema_verdict.items():
    print(f"* EMA of the weights (decay {EMA_DECAY:.3f}, about one epoch) at the end of {group}: {said}")
print(f"* one EMA update: {ema_ms:.2f} ms, {ema_cost:.1%} of section 1's clock")
print(f"* deterministic vs default kernels: {det_ab.verdict}")
for mode, diff in same_seed_diff.items():
    print(f"* the same seed twice, {mode}: max |weight difference| {diff:.1e}")
for name, line in spread_lines.items():
    print(f"* final accuracy of {name} from seed to seed: {line}")
print(f"* {spread_rule}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson6/`: make a training loop crash-safe.
# The grader kills your worker twice and restarts it each time: once between two steps of epoch 3,
# at a step it draws, and once in the middle of a save — not at random: once the epoch after the best
# one has begun, while early stopping counts its patience, the first file being written in your
# checkpoint folder (or a folder inside it) once about 2 MB of it are written (0.4x the model's
# weights, whatever its format) is torn: the kill cuts it to half of what was written. The grader
# serves each training batch itself, once the run reaches it (so `task.batches` must be consumed one
# batch at a time, as a `for` loop does: asking ahead is refused). A run could still log every batch
# it was served and replay them after a restart (a checkpoint of the data): the grader does not stop
# that, and the exercise asks for a checkpoint of the state. It compares the final weights bit for bit with its own uninterrupted
# run; when early stopping fires, the weights you keep must be the best ones.
#
# ### References
#
# * J. W. Young, *A first order approximation to the optimum checkpoint interval*, Communications
#   of the ACM 17(9), 1974, [doi:10.1145/361147.361115](https://doi.org/10.1145/361147.361115).
# * J. T. Daly, *A higher order estimate of the optimum checkpoint interval for restart dumps*,
#   Future Generation Computer Systems 22(3), 2006,
#   [doi:10.1016/j.future.2004.11.016](https://doi.org/10.1016/j.future.2004.11.016).
# * I. Loshchilov, F. Hutter, *SGDR: Stochastic Gradient Descent with Warm Restarts*, 2016,
#   [arXiv:1608.03983](https://arxiv.org/abs/1608.03983) — cosine annealing.
# * L. N. Smith, N. Topin, *Super-Convergence: Very Fast Training of Neural Networks Using Large
#   Learning Rates*, 2017, [arXiv:1708.07120](https://arxiv.org/abs/1708.07120) — one-cycle.
# * L. N. Smith, *A disciplined approach to neural network hyper-parameters: Part 1 — learning rate,
#   batch size, momentum, and weight decay*, 2018,
#   [arXiv:1803.09820](https://arxiv.org/abs/1803.09820) — cyclical momentum.
# * P. Goyal et al., *Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour*, 2017,
#   [arXiv:1706.02677](https://arxiv.org/abs/1706.02677) — gradual warm-up (section 2.2).
# * L. Prechelt, *Early Stopping — But When?*, in Neural Networks: Tricks of the Trade, 1998,
#   [doi:10.1007/3-540-49430-8_3](https://doi.org/10.1007/3-540-49430-8_3).
# * B. T. Polyak, A. B. Juditsky, *Acceleration of Stochastic Approximation by Averaging*, SIAM
#   Journal on Control and Optimization 30(4), 1992,
#   [doi:10.1137/0330046](https://doi.org/10.1137/0330046) — averaging the iterates.
# * C. Summers, M. J. Dinneen, *Nondeterminism and Instability in Neural Network Optimization*,
#   ICML 2021, [arXiv:2103.04514](https://arxiv.org/abs/2103.04514).
# * PyTorch: [Distributed Checkpoint (DCP)](https://pytorch.org/docs/stable/distributed.checkpoint.html),
#   [saving and loading a general checkpoint](https://pytorch.org/tutorials/recipes/recipes/saving_and_loading_a_general_checkpoint.html),
#   [reproducibility](https://pytorch.org/docs/stable/notes/randomness.html),
#   [`torch.use_deterministic_algorithms`](https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html),
#   [`AveragedModel`](https://pytorch.org/docs/stable/generated/torch.optim.swa_utils.AveragedModel.html)
#   (SWA and EMA, `get_ema_multi_avg_fn`, `update_bn`); the cuBLAS workspace:
#   [pytorch/pytorch#161749](https://github.com/pytorch/pytorch/pull/161749).
# * timm: [`timm/utils/model_ema.py`](https://github.com/huggingface/pytorch-image-models/blob/main/timm/utils/model_ema.py)
#   (`ModelEmaV2`, `ModelEmaV3`).
# * 🤗 Accelerate: [checkpointing](https://huggingface.co/docs/accelerate/usage_guides/checkpoint)
#   (`save_state`, `load_state`, `skip_first_batches`); torchdata:
#   [`StatefulDataLoader`](https://pytorch.org/data/beta/torchdata.stateful_dataloader.html).
#
# ### What to try next
#
# * Put the data order on the global RNG (`DataLoader(shuffle=True)` without a `generator=`) and
#   check whether resume is still bit-exact.
# * Make the save asynchronous (copy the state to CPU, write in a thread) and measure the
#   blocking part against the whole save.
# * Give the EMA a window of a tenth of an epoch, or of five (`EMA_DECAY`), or recompute its
#   BatchNorm statistics with `torch.optim.swa_utils.update_bn` instead of `use_buffers=True`, and
#   compare on the same seeds.
