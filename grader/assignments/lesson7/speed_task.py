"""Lesson 7's measured part: the grader trains its own small encoder with the learner's batches.

Random batches with dynamic padding, each padded to its own longest row (A), against the learner's
validated batches padded the same way (B), epochs interleaved: what bucketing adds over dynamic
padding alone. The held-out set exists only in this process.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from effkit.abtest import compare
from effkit.length_buckets import padded_width
from effkit.measure import one_thread

N_TRAIN, N_TEST, MAX_LEN, VOCAB, BATCH = 2000, 1024, 64, 256, 32
KEYWORDS = 24  # ids 1..24 vote for class 1, 25..48 for class 0; the rest are neutral
PAIRS, MAX_PAIRS = (
    6,
    10,
)  # timed pairs after one warm-up epoch each: at least 6 (the interval covers the median 97%
# of the time), up to 10 while the interval is wider than +-10% of the ratio (a loaded machine)
LR = 3e-3


def draw_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.clip(rng.lognormal(2.3, 0.6, n).astype(int) + 2, 3, MAX_LEN)


def _sequences(rng: np.random.Generator, lengths: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.zeros(len(lengths), MAX_LEN, dtype=torch.long)
    labels = torch.zeros(len(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        row = rng.integers(2 * KEYWORDS + 1, VOCAB, n)
        votes = max(1, int(round(0.2 * n)))
        leaning = int(rng.integers(2))  # the class most votes go to
        for_one = (rng.random(votes) < 0.7) == bool(leaning)  # True: a class-1 keyword
        if 2 * for_one.sum() == votes:  # no ties: the label is the strict majority
            for_one[0] = not for_one[0]
        label = int(2 * for_one.sum() > votes)
        ids = np.where(for_one, 1, 1 + KEYWORDS) + rng.integers(0, KEYWORDS, votes)
        row[rng.choice(n, votes, replace=False)] = ids
        tokens[i, :n] = torch.from_numpy(row)
        labels[i] = label
    return tokens, labels


def task_data(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    train_len, test_len = draw_lengths(rng, N_TRAIN), draw_lengths(rng, N_TEST)
    x_train, y_train = _sequences(rng, train_len)
    x_test, y_test = _sequences(rng, test_len)
    return {
        "lengths": train_len,
        "x_train": x_train,
        "y_train": y_train,
        "x_test": x_test,
        "y_test": y_test,
        "test_lengths": test_len,
    }


class Encoder(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, 64, padding_idx=0)
        self.layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.head = nn.Linear(64, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        h = self.layer(self.embed(tokens), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1).clamp_min(1))


def _width(lengths: np.ndarray, batch: list[int]) -> int:
    return min(MAX_LEN, padded_width(int(lengths[batch].max())))


def random_epochs(seed: int, n: int, epochs: int) -> list[list[list[int]]]:
    """The baseline's batches: a fresh random permutation per epoch, sliced into BATCH rows."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(epochs):
        order = rng.permutation(n).tolist()
        out.append([order[i : i + BATCH] for i in range(0, n, BATCH)])
    return out


def accuracy(model: nn.Module, data: dict) -> float:
    with torch.no_grad():
        logits = model(data["x_test"][:, :MAX_LEN])
    return float((logits.argmax(1) == data["y_test"]).float().mean())


def train_ab(
    seed: int, mine: list[list[list[int]]], pairs: int = PAIRS, max_pairs: int = MAX_PAIRS
) -> dict:
    """Time epochs of random dynamically padded batches (A) against the learner's batches (B), both
    padded to their longest row rounded up to 8; accuracy of both."""
    data = task_data(seed)
    lengths = data["lengths"]
    baseline = random_epochs(seed + 1, N_TRAIN, max_pairs + 1)
    models = {"A": Encoder(seed + 2), "B": Encoder(seed + 2)}
    optims = {k: torch.optim.Adam(m.parameters(), lr=LR) for k, m in models.items()}
    tokens = {"A": 0, "B": 0}
    done = {"A": 0, "B": 0}

    def epoch(arm: str, epochs: list[list[list[int]]]):
        def once() -> int:
            model, opt = models[arm], optims[arm]
            batches = epochs[done[arm] % len(epochs)]
            done[arm] += 1
            for batch in batches:
                width = _width(lengths, batch)
                x, y = data["x_train"][batch, :width], data["y_train"][batch]
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                tokens[arm] += len(batch) * width
            return sum(len(b) for b in batches)

        return once

    with one_thread():
        ab = compare(
            epoch("A", baseline),
            epoch("B", mine),
            warmup=1,
            min_pairs=pairs,
            max_pairs=max_pairs,
            rel_ci=0.1,
        )
        acc = {k: accuracy(m, data) for k, m in models.items()}
    return {
        "ab": ab,
        "acc_random": acc["A"],
        "acc_mine": acc["B"],
        "epochs": done["B"],
        "tokens_random": tokens["A"],
        "tokens_mine": tokens["B"],
    }
