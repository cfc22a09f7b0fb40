"""CIFAR batches back to pixels: what a pipeline's normalised batch says about the images in it.

Shared by lesson 2's parent-side pipeline checks and the parent's judge of timed batches
(:mod:`grader.kit.batch_judge`): both undo the recipe's normalisation and check it was exact.
"""

from __future__ import annotations

import torch

from grader.kit.worker import expect

PAD = 4  # the naive recipe's crop: a 32 x 32 window of the image zero-padded by 4 pixels


def decode(x: torch.Tensor) -> torch.Tensor:
    """Undo the normalisation; returns int64 B x 32 x 32 x 3 pixel values (checked)."""
    from effkit.workloads.cifar.data import CIFAR_MEAN, CIFAR_STD

    x = x.detach().to("cpu", torch.float64)
    expect(bool(torch.isfinite(x).all()), "x contains NaN or inf: check the normalisation")
    mean = torch.tensor(CIFAR_MEAN, dtype=torch.float64).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD, dtype=torch.float64).view(1, 3, 1, 1)
    raw = (x * std + mean) * 255
    lo, hi = raw.min().item(), raw.max().item()
    expect(
        lo > -0.5 and hi < 255.5,
        f"expected x = (pixel / 255 - CIFAR_MEAN) / CIFAR_STD; de-normalising gives values in "
        f"[{lo:.1f}, {hi:.1f}] instead of [0, 255] (missing /255, or wrong mean/std?)",
    )
    err = (raw - raw.round()).abs().max().item()
    expect(
        err < 0.02,
        f"expected x = (pixel / 255 - CIFAR_MEAN) / CIFAR_STD per channel; "
        f"de-normalising gives non-integer pixels (off by up to {err:.2f})",
    )
    return raw.round().to(torch.int64).permute(0, 2, 3, 1)
