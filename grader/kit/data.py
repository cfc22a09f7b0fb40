"""The grader's own data: fresh synthetic CIFAR-format sets that no learner has seen.

An easy task both recipes plateau on within the budget, so the accuracy gate has low noise; it
catches gross accuracy loss, not subtle augmentation bugs (the exact-pixel tests catch those).
"""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np

from effkit.workloads.cifar.data import BASE_FOLDER, LABEL_NAMES, MANIFEST, _hsv_to_rgb
from effkit.workloads.cifar.hard import hard_images


def grader_images(n: int, seed: int, difficulty: str = "easy") -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (uint8 N x 32 x 32 x 3) and int64 labels, balanced, from ``seed``. ``"hard"``:
    effkit's full-size stand-in (``cifar.hard``), where a GPU-sized run does not reach 100% and
    an accuracy bug shows in the gate; the CPU specs' gates are calibrated on the easy set.

    Class ``c``: a background of hue ``72 * (c // 2)`` (+-8 degrees; five hues far apart) with a
    white (``c`` even) or black (``c`` odd) disc, square or ring of random size and place, plus
    pixel noise. Both cues are large, low-frequency areas - what the naive recipe's ResNet (a
    strided ImageNet stem) learns first - and neither changes under crops and flips.
    """
    if difficulty == "hard":
        return hard_images(n, seed)
    if difficulty != "easy":
        raise ValueError(f"difficulty must be 'easy' or 'hard', not {difficulty!r}")
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % 10)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    cy, cx = rng.uniform(12, 20, (2, n, 1, 1))
    size = rng.uniform(8, 12, (n, 1, 1))
    radius = np.hypot(yy - cy, xx - cx)
    shapes = [
        radius < size,
        (np.abs(yy - cy) < 0.85 * size) & (np.abs(xx - cx) < 0.85 * size),
        (radius < size) & (radius > size - 5),
    ]
    kind = rng.integers(0, 3, (n, 1, 1))
    masks = np.select([kind == k for k in range(3)], shapes).astype(np.float32)[..., None]
    hue = ((labels // 2) * 72.0 + rng.uniform(-8, 8, n)) % 360
    background = _hsv_to_rgb(hue, rng.uniform(0.7, 1.0, n), rng.uniform(0.55, 0.8, n))
    grey = np.where(labels % 2 == 0, rng.uniform(0.9, 1.0, n), rng.uniform(0.0, 0.1, n))
    images = background[:, None, None, :] * (1 - masks) + grey[:, None, None, None] * masks
    images += rng.normal(0, 0.04, images.shape)
    return np.clip(images * 255 + 0.5, 0, 255).astype(np.uint8), labels.astype(np.int64)


def _write_pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_train_set(root: Path, n: int, seed: int, difficulty: str = "easy") -> Path:
    """Write ``n`` training images (and a 10-image test split nobody uses) under ``root``."""
    base = Path(root) / BASE_FOLDER
    base.mkdir(parents=True, exist_ok=False)
    splits = [
        ("train", *grader_images(n, seed, difficulty)),
        ("test", *grader_images(10, seed ^ 0x5A5A, difficulty)),
    ]
    for split, images, labels in splits:
        flat = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)  # R, G, B planes
        names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
        for name, rows in zip(
            names, np.array_split(np.arange(len(images)), len(names)), strict=True
        ):
            _write_pickle(
                base / name,
                {
                    "batch_label": f"grader {split} batch",
                    "labels": labels[rows].tolist(),
                    "data": np.ascontiguousarray(flat[rows]),
                    "filenames": [f"grader_{split}_{r:05d}.png" for r in rows],
                },
            )
    _write_pickle(
        base / "batches.meta",
        {"num_cases_per_batch": -(-n // 5), "label_names": list(LABEL_NAMES), "num_vis": 3072},
    )
    md5 = {
        p.name: hashlib.md5(p.read_bytes(), usedforsecurity=False).hexdigest()
        for p in sorted(base.iterdir())
    }
    manifest = {
        "generator": "grader.kit.data.write_train_set",
        "n_train": n,
        "n_test": 10,
        "md5": md5,
    }
    (base / MANIFEST).write_text(json.dumps(manifest))
    return Path(root)
