"""Length-bucketed batches under a sequence count or a token budget, reproducible per (seed, epoch).

`bucket_batches` shuffles with a generator seeded from ``(seed, epoch)``, sorts mega-batches by length, cuts
batches of ``batch_size`` rows or of ``max_tokens`` padded tokens, and shuffles the batch order;
`LengthBucketBatchSampler` wraps it for a DataLoader, `padding_share` / `sorted_padding_share` measure the
padding. A row longer than ``max_tokens`` still forms a batch of one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch


def padded_width(longest: int, multiple: int = 8) -> int:
    """``longest`` rounded up to a multiple of ``multiple`` (tensor cores like multiples of 8)."""
    return -(-int(longest) // multiple) * multiple


def split_by_budget(
    part: np.ndarray, lengths: np.ndarray, max_tokens: int, multiple: int
) -> list[np.ndarray]:
    """Greedy cut of a length-sorted run into batches whose padded size rows x width <= budget."""
    batches: list[np.ndarray] = []
    start = 0
    for i in range(1, len(part) + 1):
        if i == len(part):
            batches.append(part[start:i])
            break
        rows = i + 1 - start
        width = padded_width(lengths[part[start : i + 1]].max(), multiple)
        if rows * width > max_tokens:
            batches.append(part[start:i])
            start = i
    return batches


def bucket_batches(
    lengths: Sequence[int] | np.ndarray,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    seed: int = 0,
    epoch: int = 0,
    mega_batch_rows: int | None = None,
    multiple: int = 8,
) -> list[list[int]]:
    """One epoch of length-bucketed index batches covering every index exactly once.

    Give ``batch_size`` (rows per batch) or ``max_tokens`` (padded rows x width per batch). The
    order depends only on ``(seed, epoch)``. ``mega_batch_rows`` defaults to 50 batches' worth.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if (batch_size is None) == (max_tokens is None):
        raise ValueError("give exactly one of batch_size and max_tokens")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    rng = np.random.default_rng([seed, epoch])
    if mega_batch_rows is None:
        typical = batch_size or max(
            1,
            max_tokens // max(1, padded_width(np.median(lengths) if len(lengths) else 1, multiple)),
        )
        mega_batch_rows = 50 * typical
    order = rng.permutation(len(lengths))
    batches: list[np.ndarray] = []
    for start in range(0, len(order), mega_batch_rows):
        part = order[start : start + mega_batch_rows]
        part = part[np.argsort(lengths[part], kind="stable")]
        if batch_size is not None:
            batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
        else:
            batches.extend(split_by_budget(part, lengths, max_tokens, multiple))
    rng.shuffle(batches)
    return [b.tolist() for b in batches]


def padding_share(
    lengths: Sequence[int] | np.ndarray, batches: Sequence[Sequence[int]], multiple: int = 8
) -> float:
    """Share of computed tokens that are padding when each batch is padded to its own longest row."""
    lengths = np.asarray(lengths, dtype=np.int64)
    computed = real = 0
    for batch in batches:
        rows = lengths[np.asarray(batch, dtype=np.int64)]
        computed += len(rows) * padded_width(rows.max(), multiple)
        real += int(rows.sum())
    return 1.0 - real / computed if computed else 0.0


def sorted_padding_share(
    lengths: Sequence[int] | np.ndarray, batch_size: int, multiple: int = 8
) -> float:
    """Padding share of a full length sort sliced into ``batch_size`` rows: bucketing's optimum."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return padding_share(
        lengths, [order[i : i + batch_size] for i in range(0, len(order), batch_size)], multiple
    )


class LengthBucketBatchSampler(torch.utils.data.Sampler[list[int]]):
    """``batch_sampler`` for a DataLoader: :func:`bucket_batches`, re-drawn per ``set_epoch``."""

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int | None = None,
        max_tokens: int | None = None,
        seed: int = 0,
        multiple: int = 8,
    ) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_size, self.max_tokens, self.seed, self.multiple = (
            batch_size,
            max_tokens,
            seed,
            multiple,
        )
        self.epoch = 0
        self._batches = self._draw()

    def _draw(self) -> list[list[int]]:
        return bucket_batches(
            self.lengths,
            self.batch_size,
            self.max_tokens,
            self.seed,
            self.epoch,
            multiple=self.multiple,
        )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._batches = self._draw()

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches)

    def __len__(self) -> int:
        return len(self._batches)
