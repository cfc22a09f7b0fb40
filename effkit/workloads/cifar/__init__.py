"""CIFAR-10 image classification: a naive and an optimized (airbench94-style) training recipe.

``build(recipe, profile)`` returns a `Trainer` (:mod:`effkit.workloads.common`): naive (torchvision ResNet,
per-image DataLoader, fp32) or optimized (data on the device, airbench94's net and optimizer, mixed precision
where it pays); hooks swap one part (``pipeline=``...). ``prepare_data(profile)`` provides synthetic data in
the official format for ``smoke``, real CIFAR-10 for ``gpu``, either for ``cpu``. Build once per measurement.
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from effkit.batch_probe import cpu_batch
from effkit.precision_probe import PROBE_BATCH, cpu_precision
from effkit.schedules import scale_lr
from effkit.seed import seed_everything
from effkit.workloads.cifar.data import (
    CIFAR_MEAN,
    CIFAR_STD,
    CifarDataError,
    data_home,
    download_cifar,
    has_cifar,
    is_synthetic,
    load_cifar,
    make_synthetic_cifar,
)
from effkit.workloads.cifar.models import airbench_net, naive_resnet
from effkit.workloads.cifar.pipelines import DevicePipeline, DeviceTestSet, TorchvisionPipeline
from effkit.workloads.cifar.profiles import DEFAULT_EVAL_EVERY, PROFILES, Profile, get_profile
from effkit.workloads.cifar.recipes import (
    NaiveTrainer,
    OptimizedTrainer,
    RecipeConfig,
    resolve_precision,
)
from effkit.workloads.common import Trainer, check_build_args

__all__ = [
    "CIFAR_MEAN",
    "CIFAR_STD",
    "DEFAULT_EVAL_EVERY",
    "HOOKS",
    "PROFILES",
    "RECIPES",
    "CifarDataError",
    "DevicePipeline",
    "Profile",
    "TorchvisionPipeline",
    "build",
    "load_cifar",
    "make_synthetic_cifar",
    "prepare_data",
]

RECIPES = ("naive", "optimized")
HOOKS = (
    "pipeline",
    "epochs",
    "batch_size",
    "lr",
    "precision",
    "channels_last",
    "compile",
    "target",
    "tta",
)

# airbench94 states its LR as 11.5 per 1024 examples, decoupled from the Nesterov momentum of
# 0.85 (a step moves 1 + 1/(1 - 0.85) times the gradient); for a mean-reduced loss at batch 1024
# that is 11.5 / 7.67 = 1.5. Its decoupled weight decay 0.0153 becomes 0.0153 / 11.5 in
# PyTorch's coupled form, for every batch size when the LR scales linearly with the batch.
AIRBENCH_MOMENTUM = 0.85
AIRBENCH_BASE_BATCH = 1024
AIRBENCH_BASE_LR = 11.5 / (1 + 1 / (1 - AIRBENCH_MOMENTUM))
AIRBENCH_WEIGHT_DECAY = 0.0153 / 11.5


def prepare_data(profile: str, data_dir: str | Path | None = None) -> Path:
    """Make sure ``profile``'s data exist; return the root that holds ``cifar-10-batches-py/``.

    ``data_dir`` given: smoke generates its synthetic set there if the folder has none; cpu and
    gpu expect CIFAR-10 there. ``data_dir`` None: the cache (``$EFFKIT_DATA/cifar`` or
    ``~/.cache/effkit/cifar``): smoke generates, cpu uses ``real/`` if present else a larger
    synthetic set, gpu downloads real CIFAR-10 into ``real/`` (a clear error when offline).
    cpu and gpu read ``$EFFKIT_CIFAR_DIR`` (a folder holding ``cifar-10-batches-py/``) when no
    ``data_dir`` is given.
    """
    p = get_profile(profile)
    if data_dir is None and p.data != "synthetic":
        data_dir = os.environ.get("EFFKIT_CIFAR_DIR") or None
    if data_dir is not None:
        root = Path(data_dir).expanduser()
        if p.data == "synthetic" and not has_cifar(root):
            make_synthetic_cifar(root, p.n_train, p.n_test, p.synthetic_seed)
        elif not has_cifar(root):
            load_cifar(root)  # raises CifarDataError naming the folder and how to get the data
        return root
    real = data_home() / "real"
    if p.data == "real":
        return real if has_cifar(real) else download_cifar(real)
    if p.data == "real-or-synthetic" and has_cifar(real):
        return real
    root = data_home() / p.synthetic_dir_name()
    if not has_cifar(root):
        make_synthetic_cifar(root, p.n_train, p.n_test, p.synthetic_seed)
    return root


def recipe_config(recipe: str, p: Profile, hooks: dict) -> RecipeConfig:
    """The settings of ``recipe`` under profile ``p``, with hook overrides applied."""
    per_profile = {"profile": p.name, "target": p.target, "eval_every_epochs": p.eval_every_epochs}
    # Hand-laid, one line per concern (model, schedule, optimizer, numerics): the formatter would
    # put each keyword on a line of its own.
    # fmt: off
    if recipe == "naive":  # torchvision ResNet, SGD(0.9) at lr 0.1 and wd 5e-4, fp32, eager
        cfg = RecipeConfig(
            recipe="naive", model="resnet", depth=p.naive_depth, width=p.naive_width, **per_profile,
            epochs=p.naive_epochs, batch_size=p.naive_batch,
            lr=0.1, momentum=0.9, nesterov=False, weight_decay=5e-4, label_smoothing=0.0,
            precision="off", channels_last=False, compile=False,
        )
    else:
        batch = hooks.get("batch_size", p.opt_batch)
        cfg = RecipeConfig(
            recipe="optimized", model="airbench", widths=p.opt_widths, **per_profile,
            epochs=p.opt_epochs, batch_size=batch, warmup_frac=0.23, final_lr_ratio=0.07,
            lr=scale_lr_for(batch), momentum=AIRBENCH_MOMENTUM, nesterov=True, bias_lr_scale=64.0,
            weight_decay=AIRBENCH_WEIGHT_DECAY, label_smoothing=0.2,
            precision=p.opt_precision, channels_last=p.opt_channels_last, compile=p.opt_compile,
            tta=p.opt_tta,
        )
    # fmt: on
    overrides = {k: v for k, v in hooks.items() if k != "pipeline"}
    return replace(cfg, **overrides)


def scale_lr_for(batch: int) -> float:
    """airbench's LR rescaled to ``batch`` by the linear scaling rule (it was tuned at 1024)."""
    return scale_lr(AIRBENCH_BASE_LR, AIRBENCH_BASE_BATCH, batch, rule="linear")


def _airbench_pipeline(dataset, batch_size, device, seed, dtype=torch.float32):
    return DevicePipeline(
        dataset,
        batch_size,
        device,
        seed,
        pad=2,
        padding_mode="reflect",
        flip="alternating",
        drop_last=True,
        dtype=dtype,
    )


def measured_precision(cfg: RecipeConfig) -> tuple[RecipeConfig, str]:
    """ "auto" on a CPU, resolved by timing the recipe's own model (effkit.precision_probe)."""
    if cfg.model == "airbench":
        key, make = f"cifar airbench {cfg.widths}", lambda: airbench_net(cfg.widths)
    else:
        key, make = (
            f"cifar resnet{cfg.depth}x{cfg.width}",
            lambda: naive_resnet(cfg.depth, cfg.width),
        )
    layout = torch.channels_last if cfg.channels_last else torch.contiguous_format
    example = torch.randn(PROBE_BATCH, 3, 32, 32).contiguous(memory_format=layout)
    mode, why = cpu_precision(
        f"{key} channels_last={cfg.channels_last}",
        lambda: make().to(memory_format=layout),
        example,
        10,
        cache_dir=data_home(),
    )
    return replace(cfg, precision=mode), why


def measured_batch(
    cfg: RecipeConfig, candidates: tuple[int, ...], rescale_lr: bool
) -> tuple[RecipeConfig, str]:
    """The optimized recipe's batch on a CPU, by timing its own model (effkit.batch_probe); the LR
    follows by the linear rule, as for a ``batch_size`` hook."""
    layout = torch.channels_last if cfg.channels_last else torch.contiguous_format
    policy = resolve_precision(torch.device("cpu"), cfg.precision)
    batch, why = cpu_batch(
        f"cifar airbench {cfg.widths} channels_last={cfg.channels_last} precision={policy.mode}",
        lambda: airbench_net(cfg.widths).to(memory_format=layout),
        list(candidates),
        layout,
        10,
        autocast=policy.autocast,
        cache_dir=data_home(),
    )
    lr = {"lr": scale_lr_for(batch)} if rescale_lr else {}
    return replace(cfg, batch_size=batch, **lr), why


def build(
    recipe: str,
    profile: str,
    *,
    data_dir: str | Path | None = None,
    device: torch.device | str | None = None,
    seed: int = 0,
    **hooks,
) -> Trainer:
    """A ready-to-train `Trainer` for ``recipe`` ("naive" | "optimized") under ``profile``.

    Hooks (all optional) replace one part of the recipe: ``pipeline`` (a class built as
    ``Pipeline(dataset, batch_size, device, seed)``), ``epochs``, ``batch_size``, ``lr``,
    ``precision`` ("auto" | "bf16" | "fp16" | "off"), ``channels_last``, ``compile``,
    ``target`` and ``tta`` (test-time augmentation level 0-2). The optimized recipe rescales its
    LR with ``batch_size`` unless ``lr`` is given too; the naive one keeps lr 0.1. The trainer's
    ``eval_every`` is the profile's evaluation cadence in steps, for ``train_to_target``.
    """
    check_build_args("cifar", recipe, RECIPES, hooks, HOOKS)
    p = get_profile(profile)
    pipeline_cls = hooks.get("pipeline")
    if pipeline_cls is not None and not callable(pipeline_cls):
        raise ValueError(f"pipeline must be a class, got {pipeline_cls!r}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    root = prepare_data(profile, data_dir)
    train_set, test_set = load_cifar(root, train=True), load_cifar(root, train=False)
    if p.max_train is not None:
        train_set.data, train_set.targets = (
            train_set.data[: p.max_train],
            train_set.targets[: p.max_train],
        )
    if p.max_test is not None:
        test_set.data, test_set.targets = (
            test_set.data[: p.max_test],
            test_set.targets[: p.max_test],
        )
    cfg = recipe_config(recipe, p, hooks)
    choice = batch_choice = ""
    if device.type == "cpu" and cfg.precision == "auto":
        cfg, choice = measured_precision(cfg)
    if (
        device.type == "cpu"
        and recipe == "optimized"
        and p.opt_cpu_batches
        and "batch_size" not in hooks
    ):
        cfg, batch_choice = measured_batch(cfg, p.opt_cpu_batches, rescale_lr="lr" not in hooks)
    synthetic = is_synthetic(root)
    if not synthetic and p.real_target is not None and "target" not in hooks:
        cfg = replace(cfg, target=p.real_target)
    seed_everything(seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick the fastest kernels
    if pipeline_cls is None and recipe == "naive":
        pipeline_cls = TorchvisionPipeline
    elif pipeline_cls is None:
        # Under autocast the first conv casts its input anyway: hand it over in that dtype and
        # halve the pipeline's memory traffic (airbench keeps its images in fp16 for this).
        dtype = resolve_precision(device, cfg.precision).dtype or torch.float32
        pipeline_cls = partial(_airbench_pipeline, dtype=dtype)
    try:
        pipeline = pipeline_cls(train_set, cfg.batch_size, device, seed)
    except TypeError as err:
        name = getattr(pipeline_cls, "__name__", repr(pipeline_cls))
        raise TypeError(
            f"pipeline {name} must accept (dataset, batch_size, device, seed): {err}"
        ) from err
    info = {
        "data": "synthetic" if synthetic else "CIFAR-10",
        "data_dir": str(root),
        "n_train": len(train_set),
        "n_test": len(test_set),
        "seed": seed,
        **({"precision_choice": choice} if choice else {}),
        **({"batch_choice": batch_choice} if batch_choice else {}),
    }
    evaluator = DeviceTestSet(test_set, device)
    if recipe == "naive":
        return NaiveTrainer(cfg, pipeline, evaluator, device, info)
    return OptimizedTrainer(cfg, pipeline, evaluator, device, info, train_set.data)
