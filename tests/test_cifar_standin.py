"""The hard synthetic CIFAR set (full-size offline runs): format, determinism, and that it is hard.

Half of the easy set's signal is its global colour; the hard set must hide that cue, or an
accuracy gate on it checks little. These tests fail if the hard generator falls back to it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torchvision")

from effkit.workloads import cifar  # noqa: E402
from effkit.workloads.cifar import data as cdata  # noqa: E402


def colour_probe_accuracy(difficulty: str, n_train: int = 3000, n_test: int = 1000) -> float:
    """Held-out accuracy of a least-squares linear probe on each image's hue histogram (12 bins,
    weighted by chroma): the global colour that, with the pattern, solves the easy set."""

    def features(n, seed):
        images, labels = cdata.synthetic_images(n, seed, difficulty)
        x = images.reshape(n, -1, 3).astype(np.float32)
        r, g, b = np.moveaxis(x, -1, 0)
        chroma = x.max(-1) - x.min(-1)
        hue = np.arctan2(np.sqrt(3) * (g - b), 2 * r - g - b)  # angle on the colour wheel
        bins = ((hue + np.pi) / (2 * np.pi) * 12).astype(np.int64) % 12
        hist = np.zeros((n, 12), np.float32)
        np.add.at(hist, (np.repeat(np.arange(n), x.shape[1]), bins.ravel()), chroma.ravel())
        hist /= hist.sum(1, keepdims=True) + 1e-6
        return np.concatenate([hist, np.ones((n, 1), np.float32)], axis=1), labels

    x, y = features(n_train, 5)
    xt, yt = features(n_test, 6)
    w = np.linalg.lstsq(x, np.eye(10)[y], rcond=None)[0]
    return float(((xt @ w).argmax(1) == yt).mean())


def test_hard_set_has_the_official_format_and_is_reproducible(tmp_path):
    root = cifar.make_synthetic_cifar(tmp_path / "hard", 60, 20, seed=3, difficulty="hard")
    train = cifar.load_cifar(root, train=True)  # torchvision's reader, our checksums
    images, labels = cdata.synthetic_images(60, 3, "hard")
    np.testing.assert_array_equal(train.data, images)
    assert train.targets == labels.tolist() and np.bincount(labels).tolist() == [6] * 10
    assert len(cifar.load_cifar(root, train=False)) == 20
    manifest = json.loads((root / cdata.BASE_FOLDER / cdata.MANIFEST).read_text())
    assert manifest["difficulty"] == "hard"
    np.testing.assert_array_equal(cdata.synthetic_images(60, 3, "hard")[0], images)
    assert not np.array_equal(cdata.synthetic_images(60, 4, "hard")[0], images)
    # Same seed, other difficulty: other images (the easy set is not touched by the option).
    assert not np.array_equal(cdata.synthetic_images(60, 3)[0], images)
    with pytest.raises(ValueError, match="difficulty"):
        cdata.synthetic_images(10, 0, "medium")


def test_easy_set_manifest_is_unchanged(tmp_path):
    root = cifar.make_synthetic_cifar(tmp_path / "easy", 10, 5, seed=1)
    manifest = json.loads((root / cdata.BASE_FOLDER / cdata.MANIFEST).read_text())
    assert "difficulty" not in manifest


def test_global_colour_tells_the_easy_classes_apart_but_not_the_hard_ones():
    easy, hard = colour_probe_accuracy("easy"), colour_probe_accuracy("hard")
    assert easy > 0.3, f"the probe itself is broken: {easy:.1%} on the easy set (chance: 10%)"
    # On the hard set the object's hue is mixed with a random distractor hue and background.
    assert hard < 0.25, f"the hard set gives its class away in global colour: {hard:.1%}"
    assert easy - hard > 0.1, (easy, hard)
