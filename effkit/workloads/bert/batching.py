"""Turning sentences into batches: the naive way, and the way that skips padding and re-tokenizing.

Naive: a ``collate_fn`` that tokenizes raw strings per batch and pads to ``max_length``. Optimized:
`encode_once` tokenizes the corpus once, `bucket_batches` groups similar lengths within shuffled chunks, and
`pad_batch` pads each batch to its longest row, rounded up to a multiple (8 by default: full GPU tiles, few
shapes; the optimized recipe rounds on a GPU only, see ``recipes.default_pad_multiple``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


class TextDataset(torch.utils.data.Dataset):
    """Raw (sentence, label) pairs, for the naive pipeline that tokenizes in the loop."""

    def __init__(self, texts: list[str], labels: list[int]):
        self.texts, self.labels = texts, labels

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.texts[index], self.labels[index]


class TokenizeAndPadCollate:
    """Naive ``collate_fn``: tokenize the batch's raw strings and pad them to ``max_length``."""

    def __init__(self, tokenizer, max_length: int):
        self.tokenizer, self.max_length = tokenizer, max_length

    def __call__(self, rows: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
        texts = [text for text, _ in rows]
        batch = dict(
            self.tokenizer(
                texts,
                padding="max_length",
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
        )
        batch["labels"] = torch.tensor([label for _, label in rows], dtype=torch.long)
        return batch


@dataclass
class EncodedCorpus:
    """Token ids of every sentence, stored flat: row i is ``ids[offsets[i]:offsets[i+1]]``."""

    ids: np.ndarray  # int64, all rows concatenated
    offsets: np.ndarray  # int64, len(rows) + 1
    labels: np.ndarray  # int64
    pad_id: int

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.labels)


def encode_once(tokenizer, texts: list[str], labels: list[int], max_length: int) -> EncodedCorpus:
    """Tokenize ``texts`` a single time (truncated to ``max_length``, unpadded)."""
    encoded = tokenizer(texts, truncation=True, max_length=max_length, padding=False)["input_ids"]
    lengths = np.fromiter((len(row) for row in encoded), dtype=np.int64, count=len(encoded))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((t for row in encoded for t in row), dtype=np.int64, count=int(offsets[-1]))
    return EncodedCorpus(flat, offsets, np.asarray(labels, dtype=np.int64), tokenizer.pad_token_id)


def padded_length(longest: int, multiple: int = 8, max_length: int | None = None) -> int:
    """``longest`` rounded up to a multiple of ``multiple`` (never past ``max_length``)."""
    length = -(-longest // multiple) * multiple
    return min(length, max_length) if max_length else length


def pad_batch(
    corpus: EncodedCorpus, indices, multiple: int = 8, pin: bool = False
) -> dict[str, torch.Tensor]:
    """Dynamic padding: rows ``indices`` padded to their own longest length, rounded up."""
    indices = np.asarray(indices, dtype=np.int64)
    starts, ends = corpus.offsets[indices], corpus.offsets[indices + 1]
    width = padded_length(int((ends - starts).max()), multiple)
    input_ids = np.full((len(indices), width), corpus.pad_id, dtype=np.int64)
    mask = np.zeros((len(indices), width), dtype=np.int64)
    for row, (start, end) in enumerate(zip(starts, ends, strict=True)):
        input_ids[row, : end - start] = corpus.ids[start:end]
        mask[row, : end - start] = 1
    batch = {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(mask),
        "labels": torch.from_numpy(corpus.labels[indices]),
    }
    if pin:  # page-locked host memory lets the copy to the GPU run asynchronously
        batch = {k: v.pin_memory() for k, v in batch.items()}
    return batch


def bucket_batches(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator, chunk_batches: int = 50
) -> list[np.ndarray]:
    """One epoch of length-bucketed batches covering every index exactly once.

    Shuffle, cut into chunks of ``chunk_batches * batch_size``, sort each chunk by length, slice
    it into batches, then shuffle the order of all batches.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = rng.permutation(len(lengths))
    chunk = batch_size * max(1, chunk_batches)
    batches: list[np.ndarray] = []
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
    rng.shuffle(batches)
    return batches


def sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Deterministic length-sorted batches, for evaluation (order does not matter there)."""
    order = np.argsort(lengths, kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
