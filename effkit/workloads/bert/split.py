"""A leak-free held-out split of GLUE SST-2 train: whole source sentences, never shared phrases.

GLUE SST-2 train holds every parse-tree phrase of each sentence, so a random row split leaks held-out phrases
into training. `split_by_sentence` groups phrases by source sentence, holds out whole groups and drops
held-out phrases that still occur inside a training phrase (whole-word matching); `leaked_phrases` checks.
"""

from __future__ import annotations

import random


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def group_by_sentence(texts: list[str]) -> dict[str, str]:
    """Map every distinct phrase to its source sentence: the longest phrase that contains it.

    Phrases are visited longest first; a phrase no longer phrase has claimed is a sentence (a
    phrase contained in a longer phrase is also contained in that phrase's sentence), and every
    phrase occurring inside it, on word boundaries, is claimed by it.
    """
    distinct = {" ".join(_words(t)) for t in texts}
    root_of: dict[str, str] = {}
    for phrase in sorted(distinct, key=lambda p: (-len(_words(p)), p)):
        if phrase in root_of:
            continue
        root_of[phrase] = phrase
        words = _words(phrase)
        for i in range(len(words)):
            for j in range(i + 1, len(words) + 1):
                sub = " ".join(words[i:j])
                if sub in distinct and sub not in root_of:
                    root_of[sub] = phrase
    return root_of


def leaked_phrases(train_texts: list[str], heldout_texts: list[str]) -> list[str]:
    """Held-out phrases that occur (on word boundaries) inside some training phrase."""
    wanted = {" ".join(_words(t)) for t in heldout_texts}
    longest = max((len(_words(t)) for t in heldout_texts), default=0)
    found: set[str] = set()
    for text in {" ".join(_words(t)) for t in train_texts}:
        words = _words(text)
        for i in range(len(words)):
            for j in range(i + 1, min(len(words), i + longest) + 1):
                sub = " ".join(words[i:j])
                if sub in wanted:
                    found.add(sub)
    return [t for t in heldout_texts if " ".join(_words(t)) in found]


def split_by_sentence(
    rows: list[tuple[str, int]], heldout_fraction: float = 0.1, seed: int = 0
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(train, held-out) rows: whole sentence groups held out, then any leaked phrase dropped."""
    if not 0 < heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    root_of = group_by_sentence([text for text, _ in rows])
    roots = sorted(set(root_of.values()))
    random.Random(seed).shuffle(roots)
    heldout_roots = set(roots[: max(1, round(heldout_fraction * len(roots)))])
    train, heldout = [], []
    for text, label in rows:
        side = heldout if root_of[" ".join(_words(text))] in heldout_roots else train
        side.append((text, label))
    leaks = set(leaked_phrases([t for t, _ in train], [t for t, _ in heldout]))
    heldout = [(t, y) for t, y in heldout if t not in leaks]
    return train, heldout
