"""Lesson 2, the worker's side of the contract checks: the probe dataset whose pixels encode their origin.

Separate from :mod:`.pipeline_checks`, which the worker cannot see (:mod:`grader.sandbox.learner_view`).
"""

from __future__ import annotations

import copy
import functools
import tempfile

import numpy as np


@functools.lru_cache(maxsize=1)
def _template_dataset():
    from effkit.workloads.cifar.data import load_cifar, make_synthetic_cifar

    with tempfile.TemporaryDirectory(prefix="effkit-probe-") as root:
        make_synthetic_cifar(root, n_train=5, n_test=1, seed=0)
        return load_cifar(root, train=True)  # read into memory: the folder may go


def probe_dataset(n: int, seed: int = 0):
    """A torchvision CIFAR10 (transform=None) of ``n`` <= 250 images encoding their origin."""
    if n > 250:
        raise ValueError("probe datasets hold at most 250 images")
    rows, cols = np.mgrid[0:32, 0:32]
    images = np.empty((n, 32, 32, 3), np.uint8)
    images[..., 0] = 10 + 7 * rows
    images[..., 1] = 10 + 7 * cols
    images[..., 2] = (1 + np.arange(n))[:, None, None]
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % 10).tolist()
    ds = copy.copy(_template_dataset())
    ds.data, ds.targets = images, labels
    return ds
