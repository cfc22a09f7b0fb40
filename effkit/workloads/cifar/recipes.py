"""The two CIFAR-10 training recipes behind ``build()``: naive and optimized (airbench94-style).

`NaiveTrainer`: torchvision ResNet-18, per-image transforms in a 2-worker DataLoader, fp32, SGD, batch 128,
cosine schedule. `OptimizedTrainer`: airbench94 (data on the device, whitened conv net, large batch with a
warm-up/decay triangle, Nesterov SGD, label smoothing, Lookahead, TTA, bf16/channels_last where they pay).
A recipe never times itself: the caller does, every evaluation on the clock.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass

import torch
from torch import nn

from effkit.amp import AmpPolicy, choose_precision, cpu_native_bf16
from effkit.measure import train_flops
from effkit.schedules import one_cycle, warmup_cosine
from effkit.workloads.cifar.models import Lookahead, airbench_net, init_whitening, naive_resnet
from effkit.workloads.cifar.pipelines import DeviceTestSet, normalize
from effkit.workloads.common import Work


def cpu_has_fast_bf16() -> bool:
    """True when this CPU multiplies bf16 in hardware (see :func:`effkit.amp.cpu_native_bf16`)."""
    return cpu_native_bf16()


def resolve_precision(device: torch.device, requested: str) -> AmpPolicy:
    """The one effkit policy, :func:`effkit.amp.choose_precision` (kept as a name for callers).

    ``cifar.build`` resolves a CPU's "auto" before this, by timing the recipe's own model
    (:mod:`effkit.precision_probe`): bf16 units alone do not make bf16 faster.
    """
    return choose_precision(device, requested)


@dataclass
class RecipeConfig:
    """Everything a trainer needs besides data; built by ``build()`` from a profile and hooks."""

    recipe: str
    profile: str
    model: str  # "resnet" (torchvision) or "airbench"
    epochs: float
    batch_size: int
    lr: float
    momentum: float
    nesterov: bool
    weight_decay: float
    label_smoothing: float
    precision: str
    channels_last: bool
    compile: bool
    target: float
    eval_every_epochs: float
    depth: int = 18  # resnet only
    width: int = 64  # resnet only: stem width, as in torchvision
    widths: tuple[int, int, int] = (64, 256, 256)  # airbench only
    tta: int = 0
    bias_lr_scale: float = 1.0  # airbench: BatchNorm shifts learn 64x faster (same decay)
    warmup_frac: float = 0.0
    final_lr_ratio: float = 0.0


class _Trainer:
    """Shared bookkeeping: device, epoch cycling over the pipeline, evaluation, describe()."""

    stop_at_target = False

    def __init__(
        self,
        cfg: RecipeConfig,
        model: nn.Module,
        pipeline,
        test_set: DeviceTestSet,
        device: torch.device,
        info: dict,
    ):
        self.cfg, self.model, self.pipeline, self.test_set = cfg, model, pipeline, test_set
        self.recipe, self.device, self.target, self.info = cfg.recipe, device, cfg.target, info
        self.steps_per_epoch = len(pipeline)
        if self.steps_per_epoch < 1:
            raise ValueError(f"pipeline {type(pipeline).__name__} yields no batches per epoch")
        self.total_steps = max(1, math.ceil(cfg.epochs * self.steps_per_epoch))
        self.eval_every = max(1, round(cfg.eval_every_epochs * self.steps_per_epoch))
        self.step = 0
        self.policy = resolve_precision(device, cfg.precision)
        self.scaler = self.policy.make_scaler()
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.model.to(device=device, memory_format=self.memory_format)
        self.forward = torch.compile(self.model) if cfg.compile else self.model
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        self._batches = None
        self.flops_per_sample = self._count_flops()

    def _count_flops(self) -> float | None:
        """Forward + backward FLOPs per training sample, counted on a throwaway copy."""
        twin = copy.deepcopy(self.model).train()
        x = torch.zeros(2, 3, 32, 32, device=self.device)
        y = torch.zeros(2, dtype=torch.int64, device=self.device)
        try:
            return train_flops(lambda: self.loss_fn(twin(x), y).backward()) / 2
        except RuntimeError:  # an exotic op the counter cannot trace: report unknown
            return None

    def _has_workers(self) -> bool:
        loader = getattr(self.pipeline, "loader", None)
        return getattr(loader, "num_workers", 0) > 0

    def pause(self) -> None:
        """Shut down DataLoader workers (if any) so they do not prefetch while another recipe is
        timed on the same cores; the next batch starts a fresh epoch. No-op without workers."""
        if self._has_workers():
            self._batches = None

    def resume(self) -> None:
        """Start the workers again and wait for a full prefetch queue (call outside any timing)."""
        if self._has_workers() and self._batches is None:
            # Fill the workers' prefetch queue, as in steady state: no start-up inside a burst.
            loader = self.pipeline.loader
            it = iter(self.pipeline)
            depth = max(1, loader.num_workers * (loader.prefetch_factor or 1))
            ready = list(itertools.islice(it, depth))  # fewer when the epoch is shorter
            self._batches = itertools.chain(ready, it)

    def skip_batches(self, n: int) -> None:
        """Advance the data stream ``n`` batches without training (a replay starts mid-epoch)."""
        for _ in range(n):
            self._next_batch()

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        # Cycles epochs: a fresh iter() reshuffles (and, for DataLoaders, restarts workers).
        if self._batches is None:
            self._batches = iter(self.pipeline)
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.pipeline)
            return next(self._batches)

    def _optimizer_step(self, x: torch.Tensor, y: torch.Tensor, optimizer, scheduler) -> None:
        x = x.contiguous(memory_format=self.memory_format)
        with self.policy.autocast():
            loss = self.loss_fn(self.forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()
        scheduler.step()

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        with self.policy.autocast():
            return self.forward(x.contiguous(memory_format=self.memory_format)).float()

    def _predict(self, x: torch.Tensor) -> torch.Tensor:
        """Logits, averaged over test-time augmentations when ``cfg.tta`` asks for them."""
        tta = self.cfg.tta

        def mirrored(inputs: torch.Tensor) -> torch.Tensor:
            if tta < 1:
                return self._logits(inputs)
            return 0.5 * self._logits(inputs) + 0.5 * self._logits(inputs.flip(-1))

        logits = mirrored(x)
        if tta >= 2:  # airbench's level 2: also 1-px shifts up-left and down-right
            padded = nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
            size = x.shape[-1]
            shifted = [padded[..., :size, :size], padded[..., 2:, 2:]]
            logits = 0.5 * logits + 0.25 * sum(mirrored(s) for s in shifted)
        return logits

    def evaluate(self) -> float:
        """Accuracy on the held-out test split, without augmentation (or with TTA if set)."""
        self.model.eval()
        try:
            return self.test_set.accuracy(self._predict)
        finally:
            self.model.train()

    def model_name(self) -> str:
        cfg = self.cfg
        if cfg.model == "airbench":
            return f"airbench94 net, widths {'/'.join(map(str, cfg.widths))}"
        narrow = "" if cfg.width == 64 else f", narrowed: stem width {cfg.width} instead of 64"
        return f"torchvision ResNet-{cfg.depth}{narrow}"

    def describe(self) -> dict:
        cfg = self.cfg
        pipe = self.pipeline
        return {
            "workload": "cifar",
            "recipe": cfg.recipe,
            "profile": cfg.profile,
            **self.info,
            "model": self.model_name(),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "pipeline": getattr(pipe, "name", type(pipe).__name__),
            "num_workers": getattr(getattr(pipe, "loader", None), "num_workers", 0),
            "batch_size": cfg.batch_size,
            "epochs": cfg.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "optimizer": f"SGD(momentum={cfg.momentum}, nesterov={cfg.nesterov})",
            "lr": cfg.lr,
            "weight_decay": cfg.weight_decay,
            "bias_lr_scale": cfg.bias_lr_scale,
            "label_smoothing": cfg.label_smoothing,
            "precision": self.policy.mode,
            "channels_last": cfg.channels_last,
            "compile": cfg.compile,
            "tta": cfg.tta,
            # measured on a CPU during the first evaluation (effkit.workloads.cifar.pipelines)
            "evaluation_batch": getattr(self.test_set, "choice", "") or "not chosen yet",
            "target": cfg.target,
            "stop_at_target": self.stop_at_target,
            "device": str(self.device),
        }


class NaiveTrainer(_Trainer):
    """ResNet + SGD + cosine, fixed epochs; every knob at its first-attempt default."""

    def __init__(self, cfg: RecipeConfig, pipeline, test_set, device, info):
        super().__init__(cfg, naive_resnet(cfg.depth, cfg.width), pipeline, test_set, device, info)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
        self.scheduler = warmup_cosine(self.optimizer, self.total_steps, 0)

    def train_steps(self, n: int) -> Work:
        self.model.train()
        samples = 0
        for _ in range(n):
            x, y = self._next_batch()
            self._optimizer_step(x, y, self.optimizer, self.scheduler)
            samples += len(y)
            self.step += 1
        return Work(samples=samples)


class OptimizedTrainer(_Trainer):
    """airbench94: whitened conv net, decoupled SGD hyper-parameters, Lookahead, TTA."""

    stop_at_target = True
    whiten_bias_frac = 3 / 9.9  # airbench trains the whitening bias for 3 of 9.9 epochs
    ema_start_frac = 3 / 9.9  # ... and starts Lookahead after 3 epochs
    ema_every, ema_decay_base, ema_decay_pow = 5, 0.95, 3.0
    # airbench estimates the whitening from 5000 of 50000 images; a tenth of the training set,
    # at least 1000, keeps that ratio without costing a quarter of a short CPU run.
    whitening_fraction, whitening_min, whitening_max = 0.1, 1000, 5000

    def __init__(self, cfg: RecipeConfig, pipeline, test_set, device, info, train_images):
        super().__init__(cfg, airbench_net(cfg.widths), pipeline, test_set, device, info)
        self.train_images = train_images  # uint8 NHWC host array, for the whitening init
        norm_shifts = [m.bias for m in self.model.modules() if isinstance(m, nn.BatchNorm2d)]
        shift_ids = {id(p) for p in norm_shifts}
        others = [p for p in self.model.parameters() if p.requires_grad and id(p) not in shift_ids]
        # The LR multiplier on BN shifts must not multiply their weight decay: divide it back out.
        fast = cfg.lr * cfg.bias_lr_scale
        self.optimizer = torch.optim.SGD(
            [
                dict(
                    params=norm_shifts, lr=fast, weight_decay=cfg.weight_decay / cfg.bias_lr_scale
                ),
                dict(params=others, lr=cfg.lr, weight_decay=cfg.weight_decay),
            ],
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
        )
        warmup = round(cfg.warmup_frac * self.total_steps)
        self.scheduler = one_cycle(self.optimizer, self.total_steps, warmup, cfg.final_lr_ratio)
        self.lookahead: Lookahead | None = None
        self._whitened = False

    def _init_whitening(self) -> None:
        if self._whitened:
            return
        self._whitened = True
        n = int(len(self.train_images) * self.whitening_fraction)
        n = max(self.whitening_min, min(self.whitening_max, n))
        images = torch.from_numpy(self.train_images[:n]).to(self.device)
        init_whitening(self.model[0], normalize(images))

    def train_steps(self, n: int) -> Work:
        self._init_whitening()  # first call only; inside the timed region, as in airbench
        self.model.train()
        samples = 0
        whiten_bias = self.model[0].bias
        for _ in range(n):
            progress = self.step / self.total_steps
            whiten_bias.requires_grad_(progress < self.whiten_bias_frac)
            x, y = self._next_batch()
            self._optimizer_step(x, y, self.optimizer, self.scheduler)
            samples += len(y)
            self.step += 1
            if progress >= self.ema_start_frac and self.step % self.ema_every == 0:
                if self.lookahead is None:
                    self.lookahead = Lookahead(self.model)
                else:  # average more and more strongly towards the end of training
                    base = self.ema_decay_base**self.ema_every
                    decay = base * min(1.0, self.step / self.total_steps) ** self.ema_decay_pow
                    self.lookahead.update(self.model, decay)
        return Work(samples=samples)

    def evaluate(self) -> float:
        self._init_whitening()  # so an evaluation before training sees the real first layer
        return super().evaluate()
