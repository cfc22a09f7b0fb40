"""The grader's own text data: fresh synthetic SST-2-format sets that no learner has seen.

**What it does.** ``grader_sentences(n, seed)`` draws balanced, labelled sentences of a task built
for *measurement*: zero to three filler words around one sentiment word (four positive, four
negative) that carries the label (no conflicting cues, no label noise). ``write_text_set`` stores them as GLUE SST-2 TSVs
(``train.tsv``, ``dev.tsv``, ``test.tsv``, header ``sentence<TAB>label``), so the recipe under test
loads them through its normal code path (:func:`effkit.workloads.bert.load_sst2`).

**When to use it.** Every lesson-3 grading: a new secret seed per training set, for the warm-up
set and for the held-out evaluation set (which only the parent's clean trainer ever reads).

**Expected gain.** A low-noise accuracy gate within a CPU budget: the naive BERT recipe reaches
the plateau on this task in about 30 steps of batch 8 (measured: 78% after 16 steps, 100%
after 32, at lr 1e-3), so fp32 and a correct mixed-precision step end at
nearly the same accuracy and a paired difference of more than a fraction of a point means the
learner's step really trains worse (a broken clip, a skipped update, an unscaled gradient).

**Pitfalls.** The task is deliberately easy: it catches gross accuracy loss, not subtle numeric
drift - the notebook's checks (call order, clipped update, skipped steps) catch those.
"""

from __future__ import annotations

import random
from pathlib import Path

from effkit.workloads.bert.data import _write_tsv

POSITIVE = "good great superb wonderful".split()
NEGATIVE = "bad awful dull boring".split()
FILLER = ("the a of and to in is it that this film movie story with as for its but on by cast "
          "plot script scenes audience feels more than one most all about from there").split()  # fmt: skip


def grader_sentences(n: int, seed: int) -> list[tuple[str, int]]:
    """``n`` (sentence, label) pairs, half of each label, in random order, from ``seed``."""
    rng = random.Random(seed)
    labels = [i % 2 for i in range(n)]
    rng.shuffle(labels)
    rows = []
    for label in labels:
        words = [rng.choice(FILLER) for _ in range(rng.randint(0, 2))]
        for _ in range(rng.randint(2, 4)):  # most tokens carry the label: a strong signal from step 1
            words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
        rows.append((" ".join(words), label))
    return rows


def write_text_set(root: Path, train: list[tuple[str, int]], held_out: list[tuple[str, int]] | None = None) -> Path:
    """``train.tsv`` from ``train``; ``dev.tsv``/``test.tsv`` from ``held_out`` (else 4 train rows)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=False)
    _write_tsv(root / "train.tsv", train)
    for split in ("dev", "test"):
        _write_tsv(root / f"{split}.tsv", held_out if held_out is not None else train[:4])
    return root
