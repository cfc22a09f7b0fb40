"""Input pipelines for CIFAR-10: the per-sample DataLoader and the whole-dataset-on-device one.

`TorchvisionPipeline` applies PIL transforms per image in DataLoader workers; `DevicePipeline` keeps the set
on the device as uint8 and crops/flips a batch in one indexing op; `DeviceTestSet` evaluates the same way.
Protocol: ``Pipeline(dataset, batch_size, device, seed)`` over a ``CIFAR10`` with ``transform=None``;
iterating yields one epoch of normalised ``(x, y)`` on ``device``, reshuffled at every ``iter()``.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader
from torchvision import transforms

from effkit.workloads.cifar.data import CIFAR_MEAN, CIFAR_STD

Batch = tuple[torch.Tensor, torch.Tensor]


@functools.lru_cache(maxsize=8)
def _mean_std(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # Built once per device: a fresh torch.tensor() per batch would be a host-to-device copy.
    mean = torch.tensor(CIFAR_MEAN, device=device) * 255
    return mean, torch.tensor(CIFAR_STD, device=device) * 255


def normalize(images_nhwc: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 N x H x W x 3 -> normalised ``dtype`` N x 3 x H x W (channels_last memory layout)."""
    mean, std = _mean_std(images_nhwc.device)
    # Normalising in NHWC broadcasts over the last dim; the permute is then free (a view), and
    # the result is channels_last, which convolutions in channels_last use without a copy.
    # Computed in fp32 and cast after, so bf16 output carries one rounding, not three.
    return ((images_nhwc.float() - mean) / std).to(dtype).permute(0, 3, 1, 2)


class TorchvisionPipeline:
    """The textbook pipeline: torchvision transforms per image in a ``DataLoader`` with 2 workers."""

    def __init__(
        self,
        dataset,
        batch_size: int,
        device: torch.device | str,
        seed: int = 0,
        num_workers: int = 2,
    ):
        # A shallow copy: our transform must not leak into the caller's dataset object (the arrays
        # themselves are shared, not copied).
        self.dataset = copy.copy(dataset)
        self.dataset.transform = transforms.Compose(
            [
                transforms.RandomCrop(32, padding=4),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize(CIFAR_MEAN, CIFAR_STD),
            ]
        )
        self.device = torch.device(device)
        self.generator = torch.Generator().manual_seed(seed)
        self.loader = DataLoader(
            self.dataset,
            batch_size=batch_size,
            shuffle=True,
            num_workers=num_workers,
            generator=self.generator,  # shuffling order and worker seeds follow ``seed``
        )

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Batch]:
        for x, y in self.loader:
            yield x.to(self.device), y.to(self.device)


class DevicePipeline:
    """Whole dataset resident on ``device`` as uint8; crop + flip + shuffle as one gather per batch.

    Defaults reproduce `TorchvisionPipeline`'s augmentation (zero padding 4, random flip), so it
    drops into the naive recipe. The optimized recipe uses airbench's variant: ``pad=2``,
    ``padding_mode="reflect"`` and ``flip="alternating"`` (each image is flipped in every other
    epoch, starting from a random choice, which sees both views more evenly than coin flips).
    """

    def __init__(
        self,
        dataset,
        batch_size: int,
        device: torch.device | str,
        seed: int = 0,
        *,
        pad: int = 4,
        padding_mode: str = "constant",
        flip: str = "random",
        drop_last: bool = False,
        dtype: torch.dtype = torch.float32,
    ):
        if flip not in ("random", "alternating", "none"):
            raise ValueError(f"flip must be 'random', 'alternating' or 'none', got {flip!r}")
        if padding_mode not in ("constant", "reflect"):
            raise ValueError(f"padding_mode must be 'constant' or 'reflect', got {padding_mode!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.device = torch.device(device)
        self.batch_size, self.pad, self.flip = batch_size, pad, flip
        self.drop_last, self.dtype = drop_last, dtype
        images = np.asarray(dataset.data)
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(
                f"dataset.data must be uint8 N x H x W x 3 (torchvision CIFAR10 with "
                f"transform=None), got {images.dtype} {images.shape}"
            )
        self.size = images.shape[1]  # crop back to the original size (32)
        # Pad once, up front, on the host; then the padded set lives on the device as uint8 and
        # every epoch's crops are views into it. NHWC keeps the gather below a single op.
        widths = ((0, 0), (pad, pad), (pad, pad), (0, 0))
        padded = np.pad(images, widths, mode=padding_mode) if pad else images
        self.images = torch.from_numpy(np.ascontiguousarray(padded)).to(self.device)
        self.labels = torch.as_tensor(dataset.targets, dtype=torch.int64).to(self.device)
        if len(self.labels) != len(self.images):
            raise ValueError(f"{len(self.images)} images but {len(self.labels)} labels")
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.epoch = 0
        n = len(self.images)
        self._base_flip = torch.rand(n, device=self.device, generator=self.generator) < 0.5
        self._offsets = torch.arange(self.size, device=self.device)

    def __len__(self) -> int:
        n = len(self.images)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def augment(self, idx: torch.Tensor, shifts: torch.Tensor, flips: torch.Tensor) -> torch.Tensor:
        """Crop each image ``idx[i]`` at offset ``shifts[i]`` (row, col in ``[0, 2*pad]``) of the
        padded image, mirrored where ``flips[i]``; returns uint8 B x 32 x 32 x 3."""
        rows = shifts[:, 0, None] + self._offsets  # B x 32
        cols_fwd = self._offsets.expand(len(idx), -1)
        cols = shifts[:, 1, None] + torch.where(flips[:, None], cols_fwd.flip(1), cols_fwd)
        # One advanced-indexing gather does shuffle + crop + flip for the whole batch.
        return self.images[idx[:, None, None], rows[:, :, None], cols[:, None, :]]

    def __iter__(self) -> Iterator[Batch]:
        n, bs, gen = len(self.images), self.batch_size, self.generator
        order = torch.randperm(n, device=self.device, generator=gen)
        shifts = torch.randint(0, 2 * self.pad + 1, (n, 2), device=self.device, generator=gen)
        if self.flip == "random":
            flips = torch.rand(n, device=self.device, generator=gen) < 0.5
        elif self.flip == "alternating":
            flips = self._base_flip[order] ^ bool(self.epoch % 2)
        else:
            flips = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.epoch += 1
        for i in range(len(self)):
            sl = slice(i * bs, (i + 1) * bs)
            idx = order[sl]
            x = normalize(self.augment(idx, shifts[sl], flips[sl]), self.dtype)
            yield x, self.labels[idx]


# Evaluation batch sizes a CPU tries during its first evaluation, on that evaluation's own images. At
# 1000 images a batch a conv net's activations leave the caches: airbench's net evaluated 974 images/s
# at 1000 and 3,372 at 100 on a 2-core AMD EPYC (Zen 3, AVX2), and its evaluations were then nearly
# half of a smoke run's time to target (benchmarks/results/cifar-eval-batch-epyc-zen3-2c.txt)
CPU_EVAL_BATCHES = (64, 128, 256, 512)


class DeviceTestSet:
    """Held-out images resident on ``device``, normalised a batch at a time for evaluation.

    ``batch_size=None``: 1000 on an accelerator; on a CPU the fastest per image of
    :data:`CPU_EVAL_BATCHES`, timed on the first evaluation's own batches (no extra work), said in
    :attr:`choice`. Accuracy does not depend on it."""

    def __init__(self, dataset, device: torch.device | str, batch_size: int | None = None):
        self.device = torch.device(device)
        self.images = torch.from_numpy(np.ascontiguousarray(dataset.data)).to(self.device)
        self.labels = torch.as_tensor(dataset.targets, dtype=torch.int64).to(self.device)
        self.batch_size = batch_size or (None if self.device.type == "cpu" else 1000)
        self.choice = "" if self.batch_size is None else f"evaluation batch {self.batch_size}"

    def __len__(self) -> int:
        return len(self.labels)

    def batches(self, dtype: torch.dtype = torch.float32) -> Iterator[Batch]:
        sizes = iter(CPU_EVAL_BATCHES if self.batch_size is None else ())
        i = 0
        while i < len(self.labels):
            size = next(sizes, None) or self.batch_size or CPU_EVAL_BATCHES[-1]
            sl = slice(i, i + size)
            yield normalize(self.images[sl], dtype), self.labels[sl]
            i += size

    @torch.no_grad()
    def accuracy(self, predict, dtype: torch.dtype = torch.float32) -> float:
        """Fraction of test images where ``predict(x)`` (logits) picks the right class."""
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        rates: dict[int, float] = {}  # images per second of each probed size, first CPU pass only
        probing = self.batch_size is None
        for x, y in self.batches(dtype):
            start = time.perf_counter()
            correct += (predict(x).argmax(1) == y).sum()
            if probing and len(x) in CPU_EVAL_BATCHES and len(x) not in rates:
                rates[len(x)] = len(x) / max(time.perf_counter() - start, 1e-9)
                if len(rates) == len(CPU_EVAL_BATCHES):
                    self.batch_size = max(rates, key=rates.get)
                    self.choice = (
                        f"evaluation batch {self.batch_size}, the fastest measured: "
                        + ", ".join(f"{b}: {r:,.0f} images/s" for b, r in rates.items())
                    )
        if probing and self.batch_size is None:  # fewer images than the probe: the fastest seen
            self.batch_size = max(rates, key=rates.get) if rates else CPU_EVAL_BATCHES[-1]
        return correct.item() / max(1, len(self.labels))
