"""Colour helpers shared by the synthetic CIFAR generators (easy and hard)."""

from __future__ import annotations

import numpy as np


def _hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectorised HSV (hue in degrees) to RGB in [0, 1]; returns shape (..., 3)."""
    channels = []
    for n in (5, 3, 1):
        k = (n + h / 60.0) % 6
        channels.append(v - v * s * np.clip(np.minimum(k, 4 - k), 0, 1))
    return np.stack(channels, axis=-1)
