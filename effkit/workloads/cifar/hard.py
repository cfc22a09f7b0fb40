"""A harder synthetic CIFAR-10 for full-size offline runs: one where accuracy bugs cost accuracy.

`hard_images(n, seed)` draws a patterned, coloured object in a random disc over a distractor texture, with
low contrast and noise, so an accuracy gate on offline GPU runs means something (the easy set saturates).
``smoke``, ``cpu`` and the grader keep the easy set: their targets are calibrated on it.
"""

from __future__ import annotations

import numpy as np

from effkit.workloads.cifar.colour import _hsv_to_rgb

DIFFICULTIES = ("easy", "hard")


def _textures(rng: np.random.Generator, kinds: np.ndarray) -> np.ndarray:
    """One binary texture per image (float32 N x 32 x 32): stripes (two orientations), checks,
    spots or rings of ``kinds[i]`` (0-4), at random frequency and phase."""
    n = len(kinds)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    freq = (rng.uniform(2.0, 4.0, (n, 1, 1)) * 2 * np.pi / 32).astype(np.float32)
    py, px = rng.uniform(0, 2 * np.pi, (2, n, 1, 1)).astype(np.float32)
    sy, sx = np.sin(freq * yy + py), np.sin(freq * xx + px)
    out = np.empty((n, 32, 32), np.float32)
    # Per kind, on its own rows only: computing all five for every image would cost 5x.
    for k, texture in enumerate(
        (
            lambda i: sy[i] > 0,
            lambda i: sx[i] > 0,
            lambda i: sy[i] * sx[i] > 0,
            lambda i: (sy[i] > 0.5) & (sx[i] > 0.5),  # spots on a lattice
            lambda i: np.abs(np.sin(freq[i] * np.hypot(yy - 16, xx - 16) + py[i])) < 0.4,  # rings
        )
    ):
        idx = np.flatnonzero(kinds == k)
        out[idx] = texture(idx)
    return out


def hard_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` labelled 32x32 RGB images (uint8 N x 32 x 32 x 3, int64 labels), balanced, from ``seed``.

    Class ``c``: texture ``c % 5`` in hue ``36 * c`` (+-25 degrees) inside a disc of radius 7-12
    pixels at a random place; outside it, a texture of another kind in a random hue at 40-90% of
    the object's contrast. Contrast 0.12-0.7 and pixel noise of 0.10 make the faintest images
    ambiguous. Crops and flips keep every cue (the disc stays mostly inside a 4-pixel shift).
    """
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % 10)
    kind = labels % 5
    other = (kind + rng.integers(1, 5, n)) % 5  # any kind but the object's
    obj, clutter = _textures(rng, kind), _textures(rng, other)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    cy, cx = rng.uniform(9, 23, (2, n, 1, 1)).astype(np.float32)
    disc = (np.hypot(yy - cy, xx - cx) < rng.uniform(7, 12, (n, 1, 1))).astype(np.float32)
    hue = (labels * 36.0 + rng.uniform(-25, 25, n)) % 360
    fg = _hsv_to_rgb(hue, rng.uniform(0.5, 1.0, n), rng.uniform(0.6, 1.0, n)).astype(np.float32)
    distractor = _hsv_to_rgb(
        rng.uniform(0, 360, n), rng.uniform(0.5, 1.0, n), rng.uniform(0.6, 1.0, n)
    ).astype(np.float32)
    bg = (rng.uniform(0.1, 0.6, (n, 3)) * rng.uniform(0.4, 1.0, (n, 1))).astype(np.float32)
    contrast = rng.uniform(0.12, 0.7, (n, 1, 1)).astype(np.float32)
    a_obj = (obj * disc * contrast)[..., None]
    a_clu = (clutter * (1 - disc) * contrast * rng.uniform(0.4, 0.9, (n, 1, 1)))[..., None]
    images = (
        bg[:, None, None]
        + a_obj * (fg - bg)[:, None, None]
        + a_clu * (distractor - bg)[:, None, None]
    )
    images += rng.standard_normal(images.shape, dtype=np.float32) * np.float32(0.10)
    images = np.clip(images * 255 + 0.5, 0, 255).astype(np.uint8)
    return images, labels.astype(np.int64)
