"""Checkpoint/resume: bit-exact resume after SIGKILL, atomic saves, clear load errors."""

from __future__ import annotations

import fractions
import io
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from effkit import resume
from effkit.early_stopping import EarlyStopping
from effkit.resume import (
    CheckpointError,
    CheckpointManager,
    CheckpointNotFoundError,
    ResumableRandomSampler,
    load_checkpoint,
    model_fingerprint,
    save_checkpoint,
)

REPO_ROOT = Path(__file__).resolve().parents[1]

# A complete small training run: shuffled data, dropout, AdamW, per-step LR schedule,
# GradScaler, early stopping, checkpoints every 5 steps and at every epoch end.
# argv: checkpoint dir, output file, step at which to SIGKILL itself (-1: never).
TRAIN_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from effkit.early_stopping import EarlyStopping
    from effkit.resume import CheckpointManager, ResumableRandomSampler
    from effkit.seed import seed_everything

    ckpt_dir, out_path, die_at_step = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(1)
    seed_everything(0, deterministic=True)
    data = torch.Generator().manual_seed(123)
    x = torch.randn(120, 8, generator=data)
    y = (x[:, 0] - x[:, 1] + 0.5 * torch.randn(120, generator=data) > 0).long()
    train, val = TensorDataset(x[:96], y[:96]), (x[96:], y[96:])
    BATCH = 8  # 12 batches per epoch
    sampler = ResumableRandomSampler(len(train), seed=7)
    # Own generator: creating the iterator must not draw from the (restored) global RNG.
    loader = DataLoader(train, batch_size=BATCH, sampler=sampler, generator=torch.Generator())

    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.8)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=4)
    stopper = EarlyStopping(patience=1, mode="min", min_delta=0.02)
    state = dict(optimizer=optimizer, scheduler=scheduler, scaler=scaler, early_stopping=stopper)
    manager = CheckpointManager(ckpt_dir, every_steps=5, metric_mode="min")

    progress = manager.resume(model, **state)
    step = progress.step
    for epoch in range(progress.epoch, 30):
        first = progress.batch_in_epoch if epoch == progress.epoch else 0
        sampler.set_epoch(epoch, skip=first * BATCH)
        model.train()
        for batch, (xb, yb) in enumerate(loader, start=first):
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            if step == die_at_step:
                os.kill(os.getpid(), signal.SIGKILL)
            if manager.should_save(step):
                manager.save(model, **state, epoch=epoch, step=step, batch_in_epoch=batch + 1)
        model.eval()
        with torch.no_grad():
            val_loss = F.cross_entropy(model(val[0]), val[1]).item()
        stop = stopper.step(val_loss)
        manager.save(model, **state, epoch=epoch + 1, step=step, metric=val_loss)
        if stop:
            break
    torch.save({"model": model.state_dict(), "epochs": epoch + 1, "step": step,
                "scale": scaler.get_scale(), "lr": scheduler.get_last_lr()}, out_path)
    """
)


def run_training(tmp_path: Path, name: str, die_at_step: int = -1) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(tmp_path / name),
            str(tmp_path / f"{name}.out"),
            str(die_at_step),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> int:
    _, stderr = process.communicate(timeout=120)
    if process.returncode not in (0, -signal.SIGKILL):
        pytest.fail(f"training subprocess failed:\n{stderr}")
    return process.returncode


def test_killed_and_resumed_run_is_bit_identical(tmp_path):
    # 12 batches/epoch, checkpoints every 5 steps and at epoch ends; early stopping ends the
    # run after epoch 3 (step 48). Kill 1 at step 23: resume at step 20 = epoch 1, batch 8.
    # Kill 2 at step 43: resume at step 40 = epoch 3, batch 4, where early stopping's saved
    # best decides that epoch 3 is the last one.
    uninterrupted = run_training(tmp_path, "full")
    for die_at_step, position in ((23, (20, 1, 8)), (43, (40, 3, 4))):
        assert finish(run_training(tmp_path, "killed", die_at_step)) == -signal.SIGKILL
        assert not (tmp_path / "killed.out").exists()
        last = torch.load(tmp_path / "killed" / "last.pt", weights_only=True)["progress"]
        assert (last["step"], last["epoch"], last["batch_in_epoch"]) == position
    assert finish(run_training(tmp_path, "killed")) == 0  # same dir: resumes from last.pt
    assert finish(uninterrupted) == 0

    full = torch.load(tmp_path / "full.out", weights_only=True)
    resumed = torch.load(tmp_path / "killed.out", weights_only=True)
    assert full["epochs"] == 4, "early stopping should have ended the run after epoch 3"
    assert (resumed["epochs"], resumed["step"]) == (full["epochs"], full["step"])
    assert (resumed["scale"], resumed["lr"]) == (full["scale"], full["lr"])
    assert full["scale"] != 2.0**8  # the scaler state evolved, so restoring it matters
    for name, tensor in full["model"].items():
        assert torch.equal(resumed["model"][name], tensor), name


def small_model(out_features: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, out_features))


INTERRUPTED_SAVE_SCRIPT = textwrap.dedent(
    """
    import io, os, sys
    import torch
    from torch import nn
    from effkit.resume import CheckpointManager

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    manager = CheckpointManager(sys.argv[1])
    manager.save(model, epoch=0, step=1)
    real_save = torch.save

    def dying_save(obj, file, *args, **kwargs):  # the process dies half-way through a write
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        file.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        file.flush()
        os._exit(3)

    torch.save = dying_save
    with torch.no_grad():
        model[0].weight.add_(1.0)
    manager.save(model, epoch=0, step=2)
    """
)


def test_save_killed_half_way_leaves_previous_checkpoint_loadable(tmp_path):
    script = tmp_path / "save.py"
    script.write_text(INTERRUPTED_SAVE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ckpt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    leftovers = list((tmp_path / "ckpt").glob(".last.pt.*.effkit-tmp"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # the half-written file

    model = small_model()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model[0].weight.zero_()
    progress = CheckpointManager(tmp_path / "ckpt").resume(model)
    assert progress.step == 1
    torch.testing.assert_close(model.state_dict(), expected, rtol=0, atol=0)
    assert not leftovers[0].exists()  # the manager cleaned up the stale temp file


def test_failing_save_in_process_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(path, small_model(), step=1)
    good_bytes = path.read_bytes()

    def failing_save(obj, file, *args, **kwargs):
        file.write(b"PK partial garbage")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, small_model(), step=2)
    assert path.read_bytes() == good_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_round_trip_restores_every_component_and_rng(tmp_path):
    model = small_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=64.0)
    stopper = EarlyStopping(patience=4)
    scaler.scale(model(torch.randn(2, 4)).sum()).backward()
    scaler.step(optimizer)
    scaler.update(new_scale=32.0)
    scheduler.step()
    stopper.step(0.9)
    stopper.step(0.8)
    components = dict(optimizer=optimizer, scheduler=scheduler, scaler=scaler)
    save_checkpoint(
        tmp_path / "c.pt",
        model,
        **components,
        early_stopping=stopper,
        epoch=3,
        step=42,
        batch_in_epoch=5,
        metric=0.8,
        extra={"note": "hi"},
    )
    next_draws = (torch.rand(3), random.random(), np.random.rand())

    fresh = small_model(3)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    fresh_sched = torch.optim.lr_scheduler.StepLR(fresh_opt, step_size=1, gamma=0.5)
    fresh_scaler = torch.amp.GradScaler("cpu")
    fresh_stopper = EarlyStopping(patience=4)
    torch.manual_seed(999), random.seed(999), np.random.seed(999)
    progress = load_checkpoint(
        tmp_path / "c.pt",
        fresh,
        optimizer=fresh_opt,
        scheduler=fresh_sched,
        scaler=fresh_scaler,
        early_stopping=fresh_stopper,
    )
    assert (progress.epoch, progress.step, progress.batch_in_epoch) == (3, 42, 5)
    assert progress.metric == pytest.approx(0.8) and progress.extra == {"note": "hi"}
    assert progress.path == str(tmp_path / "c.pt")
    torch.testing.assert_close(fresh.state_dict(), model.state_dict(), rtol=0, atol=0)
    assert fresh_opt.state_dict()["state"][0]["step"] == 1
    assert fresh_sched.get_last_lr() == scheduler.get_last_lr()
    assert fresh_scaler.get_scale() == 32.0
    assert (fresh_stopper.best, fresh_stopper.bad_epochs) == (0.9, 1)
    assert torch.equal(torch.rand(3), next_draws[0])
    assert (random.random(), np.random.rand()) == next_draws[1:]


def test_should_save_by_steps_and_minutes(tmp_path, monkeypatch):
    by_steps = CheckpointManager(tmp_path / "a", every_steps=3)
    assert [s for s in range(10) if by_steps.should_save(s)] == [3, 6, 9]
    assert not CheckpointManager(tmp_path / "b").should_save(3)  # manual saves only

    now = [1000.0]
    monkeypatch.setattr(resume.time, "monotonic", lambda: now[0])
    by_time = CheckpointManager(tmp_path / "c", every_minutes=2)
    now[0] += 119
    assert not by_time.should_save(1)
    now[0] += 1
    assert by_time.should_save(1)
    by_time.save(small_model(), step=1)
    assert not by_time.should_save(2)  # the clock restarts at each save

    for kwargs in ({"every_steps": 0}, {"every_minutes": -1}, {"metric_mode": "best"}):
        with pytest.raises(ValueError):
            CheckpointManager(tmp_path / "d", **kwargs)


def test_best_checkpoint_follows_metric_across_resume(tmp_path):
    model = small_model()
    manager = CheckpointManager(tmp_path, metric_mode="min")
    assert manager.save(model, step=1, metric=0.9) is True
    with torch.no_grad():
        model[0].bias.fill_(7.0)  # the weights of the best checkpoint
    assert manager.save(model, step=2, metric=0.5) is True
    with torch.no_grad():
        model[0].bias.fill_(-1.0)
    assert manager.save(model, step=3, metric=0.7) is False
    assert manager.save(model, step=4) is False  # mid-epoch save without metric

    again = CheckpointManager(tmp_path, metric_mode="min")
    assert again.resume(model).step == 4 and again.best_metric == 0.5
    assert again.save(model, step=5, metric=0.6) is False  # not better than 0.5
    best = load_checkpoint(again.best_path, model)
    assert best.step == 2 and torch.all(model[0].bias == 7.0)
    assert CheckpointManager(tmp_path / "empty").resume(model).step == 0  # fresh start


def test_missing_truncated_and_corrupt_files(tmp_path):
    model = small_model()
    with pytest.raises(CheckpointNotFoundError, match=r"'.*nope\.pt' does not exist"):
        load_checkpoint(tmp_path / "nope.pt", model)
    assert issubclass(CheckpointNotFoundError, FileNotFoundError)

    good = save_checkpoint(tmp_path / "good.pt", model, step=1)
    data = good.read_bytes()
    (tmp_path / "half.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"'.*half\.pt' is truncated or corrupt"):
        load_checkpoint(tmp_path / "half.pt", model)
    (tmp_path / "text.pt").write_text("definitely not a checkpoint")
    with pytest.raises(CheckpointError, match=r"'.*text\.pt' is truncated or corrupt"):
        load_checkpoint(tmp_path / "text.pt", model)


def test_wrong_format_and_newer_version(tmp_path):
    model = small_model()
    torch.save(model.state_dict(), tmp_path / "bare.pt")
    with pytest.raises(CheckpointError, match=r"'.*bare\.pt' is not an effkit checkpoint.*bare"):
        load_checkpoint(tmp_path / "bare.pt", model)

    payload = torch.load(save_checkpoint(tmp_path / "v.pt", model), weights_only=True)
    torch.save({**payload, "version": 99}, tmp_path / "v.pt")
    with pytest.raises(CheckpointError, match=r"'.*v\.pt' has checkpoint format version 99"):
        load_checkpoint(tmp_path / "v.pt", model)


def test_checkpoint_from_another_model_lists_mismatches(tmp_path):
    path = save_checkpoint(tmp_path / "three.pt", small_model(3))
    other = small_model(5)
    assert model_fingerprint(other) != model_fingerprint(small_model(3))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path, other)
    message = str(error.value)
    assert "three.pt" in message and "from another model" in message
    assert "2.weight: checkpoint (3, 8) vs model (5, 8)" in message
    assert "2.bias: checkpoint (3,) vs model (5,)" in message
    torch.testing.assert_close(other.state_dict(), before, rtol=0, atol=0)  # untouched


def test_missing_component_state_and_untrusted_objects(tmp_path):
    model = small_model()
    path = save_checkpoint(tmp_path / "no_opt.pt", model)
    other_weights = small_model()
    with torch.no_grad():
        other_weights[0].weight.zero_()
    with pytest.raises(CheckpointError, match=r"'.*no_opt\.pt' has no optimizer state"):
        load_checkpoint(path, other_weights, optimizer=torch.optim.SGD(model.parameters(), lr=1))
    assert torch.all(other_weights[0].weight == 0)  # nothing was loaded

    unsafe = save_checkpoint(tmp_path / "obj.pt", model, extra={"f": fractions.Fraction(1, 3)})
    with pytest.raises(CheckpointError, match=r"'.*obj\.pt' contains Python objects.*trust"):
        load_checkpoint(unsafe, model)
    assert load_checkpoint(unsafe, model, weights_only=False).extra["f"] == fractions.Fraction(1, 3)


def test_resumable_sampler_skips_into_the_same_permutation():
    sampler = ResumableRandomSampler(20, seed=3)
    sampler.set_epoch(2)
    full = list(sampler)
    assert sorted(full) == list(range(20))
    sampler.set_epoch(2, skip=8)
    assert list(sampler) == full[8:] and len(sampler) == 12
    sampler.set_epoch(3)
    assert list(sampler) != full
    with pytest.raises(ValueError, match="skip"):
        sampler.set_epoch(0, skip=21)


def test_checkpoint_is_loadable_with_weights_only_and_keys_unwrapped(tmp_path):
    model = small_model()
    buffer = io.BytesIO(save_checkpoint(tmp_path / "w.pt", model).read_bytes())
    payload = torch.load(buffer, weights_only=True)
    assert payload["format"] == "effkit-checkpoint" and payload["version"] == 1
    assert set(payload["model"]) == set(model.state_dict())


def test_wrapped_models_save_bare_keys(tmp_path):
    wrapped = nn.DataParallel(small_model())  # on CPU it just wraps: keys get "module."
    assert all(key.startswith("module.") for key in wrapped.state_dict())
    path = save_checkpoint(tmp_path / "dp.pt", wrapped)
    assert set(torch.load(path, weights_only=True)["model"]) == set(small_model().state_dict())
    bare = small_model(3)
    load_checkpoint(path, bare)
    load_checkpoint(path, nn.DataParallel(bare))  # and back into a wrapped one
