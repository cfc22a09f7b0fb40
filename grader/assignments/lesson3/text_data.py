"""The grader's own text data: fresh synthetic SST-2-format sets that no learner has seen.

An easy task the naive BERT recipe plateaus on quickly, written as GLUE TSVs so the recipe loads
it through its normal path: the accuracy gate then catches gross loss, not subtle numeric drift.
"""

from __future__ import annotations

import random
from pathlib import Path

from effkit.workloads.bert.data import _write_tsv

POSITIVE = "good great superb wonderful".split()
NEGATIVE = "bad awful dull boring".split()
FILLER = (
    "the a of and to in is it that this film movie story with as for its but on by cast "
    "plot script scenes audience feels more than one most all about from there"
).split()


def grader_sentences(n: int, seed: int) -> list[tuple[str, int]]:
    """``n`` (sentence, label) pairs, half of each label, in random order, from ``seed``."""
    rng = random.Random(seed)
    labels = [i % 2 for i in range(n)]
    rng.shuffle(labels)
    rows = []
    for label in labels:
        words = [rng.choice(FILLER) for _ in range(rng.randint(0, 2))]
        for _ in range(
            rng.randint(2, 4)
        ):  # most tokens carry the label: a strong signal from step 1
            words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
        rows.append((" ".join(words), label))
    return rows


def write_text_set(
    root: Path, train: list[tuple[str, int]], held_out: list[tuple[str, int]] | None = None
) -> Path:
    """``train.tsv`` from ``train``; ``dev.tsv``/``test.tsv`` from ``held_out`` (else 4 train rows)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=False)
    _write_tsv(root / "train.tsv", train)
    for split in ("dev", "test"):
        _write_tsv(root / f"{split}.tsv", held_out if held_out is not None else train[:4])
    return root
