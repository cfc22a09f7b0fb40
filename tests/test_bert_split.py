"""The held-out SST-2 split cut from GLUE train is leak-free: no held-out phrase inside a train one.

GLUE SST-2 train holds every parse-tree phrase of each sentence; these tests build a corpus with
that structure (sentences plus their sub-phrases) and show that a random row split leaks while
the by-sentence split does not, on every path that builds one (hub and GLUE folder).
"""

from __future__ import annotations

import random
import sys
import types

import pytest

from effkit.workloads.bert import split
from effkit.workloads.bert.data import load_sst2, split_glue_dir

WORDS = (
    "the film is a gorgeous witty seductive movie dull tedious plot cast ending "
    "charming mess story acting sharp bland"
).split()


def treebank(n_sentences: int = 120, seed: int = 0) -> list[tuple[str, int]]:
    """Sentences and all their contiguous sub-phrases of 1-4 words and prefixes, like SST-2."""
    rng = random.Random(seed)
    rows, seen = [], set()
    for s in range(n_sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 12))] + [f"w{s}"]
        label = rng.randint(0, 1)
        phrases = {" ".join(words)}
        for i in range(len(words)):
            for j in range(i + 1, min(len(words), i + 4) + 1):
                phrases.add(" ".join(words[i:j]))
        phrases |= {" ".join(words[:k]) for k in range(5, len(words))}
        for p in sorted(phrases):
            if p not in seen:
                seen.add(p)
                rows.append((p, label))
    rng.shuffle(rows)
    return rows


def test_a_random_row_split_leaks_and_the_checker_sees_it():
    rows = treebank()
    random.Random(1).shuffle(rows)
    n = len(rows) // 10
    heldout, train = rows[:n], rows[n:]
    long_heldout = [t for t, _ in heldout if len(t.split()) >= 3]
    leaks = split.leaked_phrases([t for t, _ in train], long_heldout)
    assert len(leaks) > 0.5 * len(long_heldout)  # the failure mode the issue found (85% on SST-2)


def test_split_by_sentence_holds_out_whole_sentences_and_nothing_leaks():
    rows = treebank()
    train, heldout = split.split_by_sentence(rows, 0.1, seed=0)
    assert heldout and len(heldout) < 0.25 * len(rows)
    assert not split.leaked_phrases([t for t, _ in train], [t for t, _ in heldout])
    # whole groups: every held-out sentence's own marker word never appears in train
    markers = {w for t, _ in heldout for w in t.split() if w.startswith("w") and w[1:].isdigit()}
    assert markers and not any(set(t.split()) & markers for t, _ in train)
    assert len(train) + len(heldout) <= len(rows)
    assert set(train).isdisjoint(heldout)


def test_group_by_sentence_maps_a_phrase_to_the_longest_phrase_containing_it():
    roots = split.group_by_sentence(["a b c d", "b c", "c", "x c y", "a b"])
    assert roots["b c"] == roots["a b"] == roots["a b c d"] == "a b c d"
    assert roots["c"] == "a b c d"  # the longest one containing it (4 words beat 3)
    assert roots["x c y"] == "x c y"
    assert split.leaked_phrases(["bad film"], ["bad", "badly", "film"]) == ["bad", "film"]


def test_split_glue_dir_turns_the_official_layout_into_a_leak_free_one(tmp_path):
    glue = tmp_path / "SST-2"
    glue.mkdir()
    rows = treebank(60)
    (glue / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    (glue / "dev.tsv").write_text("sentence\tlabel\nit is good\t1\nit is bad\t0\n")
    (glue / "test.tsv").write_text("index\tsentence\n0\tunlabeled\n")
    from effkit.workloads.bert.profiles import prepare_data

    monkey = pytest.MonkeyPatch()
    monkey.setenv("EFFKIT_DATA", str(tmp_path / "cache"))
    try:
        out = prepare_data("cpu", glue)
    finally:
        monkey.undo()
    assert out != glue and out.parent.parent == tmp_path / "cache"
    assert out == split_glue_dir(glue, out)  # written once, reused
    data = load_sst2(out)
    assert data["test"].texts == ["it is good", "it is bad"]  # GLUE dev becomes test
    assert not split.leaked_phrases(data["train"].texts, data["dev"].texts)


def test_the_hub_path_splits_by_sentence(tmp_path, monkeypatch):
    rows = treebank(60)

    hub = {
        "train": {"sentence": [t for t, _ in rows], "label": [y for _, y in rows]},
        "validation": {"sentence": ["fine"], "label": [1]},
    }
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda *a, **k: hub
    monkeypatch.setitem(sys.modules, "datasets", fake)
    from effkit.workloads.bert import pretrained
    from effkit.workloads.bert.data import download_sst2_from_hub

    monkeypatch.setattr(pretrained, "_hub_reachable", lambda: True)  # only the hub is absent

    data = load_sst2(download_sst2_from_hub(tmp_path / "sst2"))
    assert len(data["dev"]) > 0 and len(data["train"]) > 5 * len(data["dev"])
    assert not split.leaked_phrases(data["train"].texts, data["dev"].texts)
