"""Correctness checks for a CIFAR input pipeline (the lesson-2 contract), with exact pixel tests.

Probe pixels encode their origin, so every output image is decoded to its source, crop and flip
and a failure names the exact pixel at fault. Each check runs under a SIGALRM time limit.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from grader.assignments.lesson2.probe_data import probe_dataset  # noqa: F401  (re-exported)
from grader.kit.pixels import PAD, decode  # noqa: F401  (decode: re-exported)
from grader.kit.worker import CHECK_SECONDS, expect, time_limit


def build(cls, dataset, batch_size: int, device: str = "cpu", seed: int = 0):
    name = getattr(cls, "__name__", "your pipeline")
    call = f"{name}(dataset, batch_size={batch_size}, device={device!r}, seed={seed})"
    with time_limit(CHECK_SECONDS, call):
        try:
            return cls(dataset, batch_size, device, seed)
        except Exception as err:
            raise AssertionError(f"{call} raised {type(err).__name__}: {err}") from err


def one_epoch(pipe, n: int, what: str = "one epoch") -> list[tuple[torch.Tensor, torch.Tensor]]:
    batches, seen = [], 0
    with time_limit(CHECK_SECONDS, f"iterating {what}"):
        for batch in pipe:
            expect(
                isinstance(batch, tuple | list) and len(batch) == 2,
                f"expected each batch to be a pair (x, y), got {type(batch).__name__}",
            )
            x, y = batch
            expect(
                isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor),
                f"expected x and y to be tensors, got {type(x).__name__} and {type(y).__name__}",
            )
            batches.append((x, y))
            seen += int(y.shape[0]) if y.dim() else 1
            expect(seen <= n, f"one epoch yielded more than the dataset's {n} samples")
    return batches


def check_batches(batches, n: int, batch_size: int, device: str) -> None:
    want_batches, last = (
        expected_len(n, batch_size),
        n - batch_size * (expected_len(n, batch_size) - 1),
    )
    expect(
        len(batches) == want_batches,
        f"expected every image exactly once per epoch: {n} images in {want_batches} batches of "
        f"{batch_size} (the last with {last}), got {len(batches)} batches",
    )
    for i, (x, y) in enumerate(batches):
        at = f"batch {i}"
        expect(x.dtype == torch.float32, f"{at}: expected x.dtype float32, got {x.dtype}")
        expect(y.dtype == torch.int64, f"{at}: expected y.dtype int64, got {y.dtype}")
        expect(
            x.dim() == 4 and tuple(x.shape[1:]) == (3, 32, 32),
            f"{at}: expected x of shape B x 3 x 32 x 32, got {tuple(x.shape)}",
        )
        expect(
            y.shape == (x.shape[0],),
            f"{at}: expected y of shape ({x.shape[0]},), got {tuple(y.shape)}",
        )
        expect(
            x.device.type == torch.device(device).type
            and y.device.type == torch.device(device).type,
            f"{at}: expected x and y on {device}, got {x.device} and {y.device}",
        )
        want = batch_size if i < len(batches) - 1 else n - batch_size * (len(batches) - 1)
        expect(x.shape[0] == want, f"{at}: expected {want} samples, got {x.shape[0]}")


def locate(img: np.ndarray, source: np.ndarray) -> tuple[int, int, int, bool]:
    """(image id, row offset, column offset, flipped) that explain ``img`` exactly, or fail."""
    fg = img.max(axis=-1) > 0
    expect(fg.sum() >= 28 * 28, "an image is mostly black: more than 4 px of padding in it")
    ids = np.unique(img[..., 2][fg])
    expect(
        len(ids) == 1, f"an image mixes pixels of several source images (ids {ids[:5].tolist()})"
    )
    k = int(ids[0]) - 1
    expect(0 <= k < len(source), f"an image has an unknown id {k}")
    r, c = np.nonzero(fg)
    dy = (img[r, c, 0] - 10) // 7 - r + PAD
    dxf = (img[r, c, 1] - 10) // 7 + c  # constant when flipped: src_col = (31 - c) + dx - PAD
    dxn = (img[r, c, 1] - 10) // 7 - c  # constant when not flipped
    flipped = len(np.unique(dxf)) == 1 and len(np.unique(dxn)) > 1
    dx = int(dxf[0]) - 31 + PAD if flipped else int(dxn[0]) + PAD
    oy = int(dy[0])
    padded = np.pad(source[k], ((PAD, PAD), (PAD, PAD), (0, 0)))
    expect(
        0 <= oy <= 2 * PAD and 0 <= dx <= 2 * PAD,
        f"image {k}: not a crop within the 4-pixel padding (offset {oy - PAD:+d}, {dx - PAD:+d})",
    )
    want = padded[oy : oy + 32, dx : dx + 32]
    if flipped:
        want = want[:, ::-1]
    expect(
        np.array_equal(img, want),
        f"image {k}: not an exact 32x32 crop of the zero-padded (4 px) image, mirrored or not "
        f"({int((img != want).any(-1).sum())} pixels differ)",
    )
    return k, oy, dx, flipped


def epoch_record(batches, dataset) -> dict:
    """Decode an epoch: order of ids, offsets and flips; checks each sample once, labels aligned."""
    source, targets = np.asarray(dataset.data), list(dataset.targets)
    order, offsets, flips = [], [], []
    for x, y in batches:
        pixels = decode(x).numpy()
        labels = y.detach().cpu().tolist()
        for img, label in zip(pixels, labels, strict=True):
            k, oy, ox, fl = locate(img, source)
            expect(
                label == targets[k],
                f"image {k} came with label {label}, expected {targets[k]} "
                "(labels must stay aligned with their images)",
            )
            order.append(k)
            offsets.append((oy, ox))
            flips.append(fl)
    missing = sorted(set(range(len(source))) - set(order))
    dupes = len(order) - len(set(order))
    expect(
        not missing and not dupes,
        f"expected every image exactly once per epoch; {len(missing)} missing (e.g. {missing[:3]}), "
        f"{dupes} repeated",
    )
    return {"order": order, "offsets": offsets, "flips": flips}


def expected_len(n: int, batch_size: int) -> int:
    return math.ceil(n / batch_size)
