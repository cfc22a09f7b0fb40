"""A shuffling sampler whose order depends only on (seed, epoch), so a run can resume mid-epoch.

:class:`ResumableRandomSampler` draws each epoch's permutation from a generator seeded with ``seed + epoch``
and can skip the samples already seen; the DataLoader still needs its own ``generator=``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


class ResumableRandomSampler(torch.utils.data.Sampler[int]):
    """Shuffle with a permutation that depends only on ``(seed, epoch)``; can start mid-epoch.

    Call ``set_epoch(epoch, skip=batch_in_epoch * batch_size)`` before iterating: the skipped
    samples are never loaded, unlike fast-forwarding a DataLoader iterator.
    """

    def __init__(self, num_samples: int, seed: int = 0) -> None:
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self.num_samples = num_samples
        self.seed = seed
        self.epoch = 0
        self.skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        if not 0 <= skip <= self.num_samples:
            raise ValueError(f"skip must be in [0, {self.num_samples}], got {skip}")
        self.epoch, self.skip = epoch, skip

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)  # same recipe as DistributedSampler
        order = torch.randperm(self.num_samples, generator=generator)
        return iter(order[self.skip :].tolist())

    def __len__(self) -> int:
        return self.num_samples - self.skip
