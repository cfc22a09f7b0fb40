"""The lessons' SST-2 on the README's install, built on a fresh cache both ways (issue 49, section 6).

In the ``cpu`` profile lessons 1 and 3 get SST-2 through ``bert.build(recipe, PROFILE)``, lesson 2
through ``bert.prepare_data(PROFILE)``, lessons 7, 8, 9 and 13 through
``lesson_setup.sst2_splits(PROFILE)`` (13 also ``sst2_calibration_split``): all of them end in
``prepare_data("cpu")`` with no folder given. These tests call those entry points, from a lesson's
folder with no ``../shared`` beside it and ``EFFKIT_DATA`` in tmp:

(a) online: the real ``download_sst2_from_hub``, with only ``datasets.load_dataset``'s hub replaced
    by local parquet files in GLUE's layout on the hub (the real parquet loader reads them);
(b) offline: ``EFFKIT_SST2_DIR`` at GLUE's own SST-2 folder (split leak-free into the cache), and
    at a folder of the course's three TSVs.

Both ways give the same splits. No network: ``HF_HUB_OFFLINE`` is set and nothing asks the hub.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import datasets  # the course extra brings it
import pytest

ROOT = Path(__file__).resolve().parents[1]

# lesson -> the calls through which it gets its SST-2 (the entry points the tests below run)
ENTRY_POINTS = {
    "01": ("bert.build(",),
    "02": ("bert.prepare_data(PROFILE)",),
    "03": ("bert.build(",),
    "07": ("lesson_setup.sst2_splits(PROFILE",),
    "08": ("lesson_setup.sst2_splits(PROFILE",),
    "09": ("lesson_setup.sst2_splits(PROFILE",),
    "13": ("lesson_setup.sst2_splits(PROFILE", "lesson_setup.sst2_calibration_split(PROFILE"),
}
WORDS = "good bad film plot actor dull great story slow funny warm cold long short odd".split()


def _treebank(n_sentences: int, seed: int) -> list[tuple[str, int]]:
    """Sentences and their sub-phrases, each sentence's phrases sharing its label, like GLUE's
    train split (parse-tree phrases)."""
    rng = random.Random(seed)
    rows, seen = [], set()
    for s in range(n_sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 9))] + [f"w{seed}x{s}"]
        label = rng.randint(0, 1)
        phrases = {" ".join(words[i:j]) for i in range(len(words)) for j in (i + 1, len(words))}
        for p in sorted(phrases):
            if p not in seen:
                seen.add(p)
                rows.append((p, label))
    return rows


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    """Small GLUE SST-2 in both of its published forms: the hub's parquet files (sentence, label
    as ClassLabel, idx; test labels -1) and GLUE's own folder of TSVs (unlabeled test.tsv)."""
    base = tmp_path_factory.mktemp("glue")
    train, validation = _treebank(30, 0), _treebank(6, 1)[:40]
    test = [f"unlabeled sentence {i}" for i in range(10)]
    features = datasets.Features(
        {
            "sentence": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["negative", "positive"]),
            "idx": datasets.Value("int32"),
        }
    )
    hub = base / "nyu-mll-glue" / "sst2"
    hub.mkdir(parents=True)
    files = {}
    for split, rows in (
        ("train", train),
        ("validation", validation),
        ("test", [(t, -1) for t in test]),
    ):
        table = {
            "sentence": [t for t, _ in rows],
            "label": [y for _, y in rows],
            "idx": list(range(len(rows))),
        }
        files[split] = hub / f"{split}-00000-of-00001.parquet"
        datasets.Dataset.from_dict(table, features=features).to_parquet(str(files[split]))
    folder = base / "SST-2"
    folder.mkdir()
    for name, rows in (("train", train), ("dev", validation)):
        text = "".join(f"{t}\t{y}\n" for t, y in rows)
        (folder / f"{name}.tsv").write_text("sentence\tlabel\n" + text, encoding="utf-8")
    body = "".join(f"{i}\t{t}\n" for i, t in enumerate(test))
    (folder / "test.tsv").write_text("index\tsentence\n" + body, encoding="utf-8")
    return {"hub_files": files, "features": features, "folder": folder, "train": train}


@pytest.fixture
def fresh_lesson(tmp_path, monkeypatch):
    """A learner's first lesson: an empty cache, no EFFKIT_SST2_DIR, no ../shared beside it."""
    lesson_dir = tmp_path / "course" / "notebooks"
    lesson_dir.mkdir(parents=True)
    monkeypatch.chdir(lesson_dir)
    monkeypatch.setenv("EFFKIT_DATA", str(tmp_path / "cache"))
    monkeypatch.delenv("EFFKIT_SST2_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return tmp_path / "cache" / "bert"


def _lessons_data() -> dict[str, object]:
    """Each lesson's SST-2, got the way the lesson gets it (ENTRY_POINTS), in the cpu profile."""
    from effkit import lesson_setup
    from effkit.workloads import bert

    got = {"02": bert.load_sst2(bert.prepare_data("cpu"))}  # lesson 2
    train, held_out = lesson_setup.sst2_splits("cpu")  # lessons 7, 8, 9, 13
    got["07-13"] = {"train": train, "test": held_out}
    got["13-calibration"] = lesson_setup.sst2_calibration_split("cpu")
    trainer = bert.build("naive", "cpu", device="cpu")  # lessons 1 and 3
    got["01-03"] = {s: trainer.eval_sets[s].labels.tolist() for s in ("dev", "test")}
    return got


def _same_splits(got, sst2) -> None:
    assert got["02"]["train"].texts == sst2["train"].texts
    assert got["07-13"]["train"].texts == sst2["train"].texts
    assert got["07-13"]["test"].texts == sst2["test"].texts
    assert got["13-calibration"].texts == sst2["dev"].texts
    assert got["01-03"] == {s: sst2[s].labels for s in ("dev", "test")}


def test_every_bert_lesson_gets_its_sst2_through_an_entry_point_tested_here():
    for number, calls in ENTRY_POINTS.items():
        (source,) = ROOT.glob(f"notebooks/{number}_*.py")
        text = source.read_text()
        for call in calls:
            assert call in text, f"{source.name} no longer calls {call}: test its new entry point"
    for source in ROOT.glob("notebooks/*.py"):  # no side door around prepare_data
        text = source.read_text()
        assert "download_sst2_from_hub" not in text and "shared/data" not in text, source.name
        for line in re.findall(r".*load_sst2\(.*", text):
            assert "prepare_data(" in line, f"{source.name}: {line.strip()}"


def test_online_the_first_lesson_downloads_sst2_once_into_the_cache(
    glue, fresh_lesson, monkeypatch, capsys
):
    from effkit.workloads.bert import data, pretrained

    calls = []
    real_load = datasets.load_dataset

    def hub_from_local_files(path, name=None, **kwargs):  # the hub's answer, read from disk
        calls.append((path, name))
        files = {split: str(f) for split, f in glue["hub_files"].items()}
        return real_load("parquet", data_files=files, features=glue["features"], **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", hub_from_local_files)
    monkeypatch.setattr(pretrained, "_hub_reachable", lambda: True)  # as if online
    got = _lessons_data()
    assert calls == [data.HUB_DATASET]  # once: every later lesson reads the cache
    cached = fresh_lesson / "sst2"
    assert sorted(p.name for p in fresh_lesson.iterdir()) == ["sst2"]  # download folder removed
    sst2 = data.load_sst2(cached)
    _same_splits(got, sst2)
    printed = capsys.readouterr().out
    assert (
        f"SST-2: downloading GLUE sst2 (nyu-mll/glue on the Hugging Face hub, ~3 MB) once into {cached}"
        in printed
    )
    assert "EFFKIT_SST2_DIR" in printed
    # GLUE's validation set is the held-out test split; its train is split by sentence
    assert sst2["test"].texts == [t for t, _ in _treebank(6, 1)[:40]]
    assert len(sst2["train"]) + len(sst2["dev"]) == len(glue["train"])
    from effkit.workloads.bert import split

    assert not split.leaked_phrases(sst2["train"].texts, sst2["dev"].texts)


def test_offline_the_lessons_read_a_folder_of_glue_tsvs(glue, fresh_lesson, monkeypatch, tmp_path):
    from effkit.workloads.bert import data

    def no_hub(*args, **kwargs):
        raise AssertionError("offline: nothing may ask the hub")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    monkeypatch.setenv("EFFKIT_SST2_DIR", str(glue["folder"]))  # GLUE's own SST-2 folder
    got = _lessons_data()
    (split_dir,) = fresh_lesson.glob("sst2-split-*")  # split leak-free into the cache once
    sst2 = data.load_sst2(split_dir)
    _same_splits(got, sst2)
    assert not (fresh_lesson / "sst2").exists()
    # the course's three-TSV layout is read where it lies
    monkeypatch.setenv("EFFKIT_SST2_DIR", str(split_dir))
    from effkit.workloads import bert

    assert bert.prepare_data("cpu") == split_dir


def test_both_ways_give_the_lessons_the_same_splits(glue, tmp_path, monkeypatch):
    from effkit.workloads.bert import data, pretrained

    monkeypatch.setattr(pretrained, "_hub_reachable", lambda: True)
    real_load = datasets.load_dataset
    files = {split: str(f) for split, f in glue["hub_files"].items()}
    monkeypatch.setattr(
        datasets,
        "load_dataset",
        lambda *a, **k: real_load("parquet", data_files=files, features=glue["features"], **k),
    )
    online = data.load_sst2(data.download_sst2_from_hub(tmp_path / "online" / "sst2"))
    offline = data.load_sst2(data.split_glue_dir(glue["folder"], tmp_path / "offline"))
    for split in data.SPLITS:
        assert online[split].texts == offline[split].texts
        assert online[split].labels == offline[split].labels


def test_without_datasets_or_data_the_reason_is_one_line(fresh_lesson, monkeypatch):
    from effkit import lesson_setup
    from effkit.workloads.bert.data import Sst2Unavailable

    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` fails
    with pytest.raises(Sst2Unavailable) as err:
        lesson_setup.sst2_splits("cpu")
    message = str(err.value)
    assert "\n" not in message and "`datasets`" in message and "EFFKIT_SST2_DIR" in message
    assert "pip install -e '.[course]'" in message


def test_bench_cpu_profile_without_data_ends_with_a_one_line_reason(
    fresh_lesson, monkeypatch, tmp_path, capsys
):
    """`python -m effkit.bench bert --profile cpu` with no --data: no traceback, one line, rc 2."""
    from effkit import bench

    monkeypatch.setitem(sys.modules, "datasets", None)
    assert bench.main(["bert", "--profile", "cpu", "--quiet", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("effkit.bench: error: SST-2 is not at ") and err.count("\n") == 1

    monkeypatch.setitem(sys.modules, "datasets", datasets)  # installed, the hub answers badly
    from effkit.workloads.bert import pretrained

    monkeypatch.setattr(pretrained, "_hub_reachable", lambda: True)

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub\n(LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    assert bench.main(["bert", "--profile", "cpu", "--quiet", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ConnectionError: Couldn't reach 'nyu-mll/glue'" in err


@pytest.mark.slow
def test_bench_cpu_profile_offline_as_a_learner_runs_it(tmp_path):
    """The command itself, in a fresh process on a host with `datasets` and no hub: one line."""
    env = {k: v for k, v in os.environ.items() if k not in ("EFFKIT_SST2_DIR", "HF_DATASETS_CACHE")}
    env.update(
        EFFKIT_DATA=str(tmp_path / "cache"), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1"
    )
    run = subprocess.run(
        [sys.executable, "-m", "effkit.bench", "bert", "--profile", "cpu", "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()[-1:]
    assert line.startswith("effkit.bench: error: SST-2 is not at ")
    assert "hub is not reachable from here" in line and "EFFKIT_SST2_DIR" in line
