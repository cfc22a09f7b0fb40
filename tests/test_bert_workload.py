"""The BERT-on-SST-2 workload: data loading, tokenizer cache, batching, recipes and hooks.

Everything runs on synthetic data written in the real GLUE TSV format; no download, no ../shared.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from effkit.amp import cpu_native_bf16  # noqa: E402
from effkit.workloads import bert, get  # noqa: E402
from effkit.workloads.bert import batching, tokenizer  # noqa: E402
from effkit.workloads.bert.data import load_sst2, make_synthetic_sst2, read_sst2_tsv  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A private EFFKIT_DATA, so tests neither read nor pollute the user's cache."""
    root = tmp_path_factory.mktemp("effkit-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EFFKIT_DATA", str(root))
        yield root


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return make_synthetic_sst2(tmp_path_factory.mktemp("sst2"), n_train=600, n_eval=200, seed=1)


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# --- data -----------------------------------------------------------------------------------------
def test_synthetic_tsv_loads_through_the_real_loader(synthetic):
    header = (synthetic / "train.tsv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "sentence\tlabel"
    splits = load_sst2(synthetic)
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [600, 200, 200]
    train = splits["train"]
    assert set(train.labels) == {0, 1} and 0.35 < np.mean(train.labels) < 0.65
    words = np.array([len(t.split()) for t in train.texts])
    # SST-2's shape: mostly short phrases, a long tail, nothing past 60 words.
    assert np.median(words) <= 10 and words.max() <= 60 and (words >= 25).sum() >= 5


def test_synthetic_sentiment_is_learnable(synthetic):
    splits = load_sst2(synthetic)
    polarity = Counter()
    for text, label in zip(splits["train"].texts, splits["train"].labels, strict=True):
        for word in set(text.split()):
            polarity[word] += 1 if label else -1
    guesses = [int(sum(polarity[w] for w in t.split()) > 0) for t in splits["test"].texts]
    accuracy = np.mean(np.array(guesses) == np.array(splits["test"].labels))
    assert accuracy > 0.8  # a bag-of-words count already separates the classes


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("fine movie\t1\ntoo\tmany\tcolumns\n", "bad.tsv:3: expected 2 tab-separated columns"),
        ("fine movie\t1\nawful movie\t2\n", "bad.tsv:3: label must be 0 or 1, found '2'"),
        ("no label column here\n", "bad.tsv:2: expected 2 tab-separated columns"),
        ("\t1\n", "bad.tsv:2: empty sentence"),
        ("", "has a header but no rows"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, rows, message):
    path = _write(tmp_path / "bad.tsv", "sentence\tlabel\n" + rows)
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        read_sst2_tsv(path)


def test_bad_headers_and_missing_data_are_explained(tmp_path):
    with pytest.raises(ValueError, match="unlabeled official GLUE test set"):
        read_sst2_tsv(_write(tmp_path / "glue_test.tsv", "index\tsentence\n0\thello\n"))
    with pytest.raises(ValueError, match=r"other\.tsv:1: expected the header"):
        read_sst2_tsv(_write(tmp_path / "other.tsv", "text\tlabel\nhi\t1\n"))
    with pytest.raises(ValueError, match="is empty"):
        read_sst2_tsv(_write(tmp_path / "empty.tsv", ""))
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="nowhere does not exist.*profile='smoke'"):
        load_sst2(missing)
    partial = tmp_path / "partial"
    partial.mkdir()
    _write(partial / "train.tsv", "sentence\tlabel\ngood\t1\n")
    with pytest.raises(FileNotFoundError, match="lacks dev.tsv, test.tsv"):
        load_sst2(partial)
    with pytest.raises(FileNotFoundError, match="lacks"):
        bert.prepare_data("cpu", data_dir=partial)


# --- tokenizer ------------------------------------------------------------------------------------
def test_trained_tokenizer_is_cached_and_reused(tmp_path, synthetic, monkeypatch):
    texts = load_sst2(synthetic)["train"].texts
    first = tokenizer.trained_wordpiece(texts, 300, root=tmp_path)
    assert (tokenizer.tokenizer_cache_dir(texts, 300, tmp_path) / "tokenizer.json").is_file()

    def no_retraining(*args, **kwargs):
        raise AssertionError("the cached tokenizer should have been reused")

    monkeypatch.setattr(tokenizer, "_train_wordpiece", no_retraining)
    second = tokenizer.trained_wordpiece(texts, 300, root=tmp_path)
    ids = second(texts[:5])["input_ids"]
    assert ids == first(texts[:5])["input_ids"]
    assert all(row[0] == second.cls_token_id and row[-1] == second.sep_token_id for row in ids)
    # A different vocabulary size is a different tokenizer: it must be trained, not reused.
    with pytest.raises(AssertionError, match="should have been reused"):
        tokenizer.trained_wordpiece(texts, 400, root=tmp_path)


# --- batching -------------------------------------------------------------------------------------
def _corpus(lengths, pad_id=0):
    rows = [np.arange(1, n + 1) for n in lengths]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    labels = np.arange(len(lengths)) % 2
    return batching.EncodedCorpus(np.concatenate(rows).astype(np.int64), offsets, labels, pad_id)


@pytest.mark.parametrize("indices", [[0], [0, 1], [1, 2, 3], [0, 1, 2, 3, 4]])
def test_dynamic_padding_pads_to_a_multiple_of_8_and_no_further(indices):
    lengths = [3, 9, 17, 5, 8]
    corpus = _corpus(lengths)
    batch = batching.pad_batch(corpus, indices)
    width = batch["input_ids"].shape[1]
    longest = max(lengths[i] for i in indices)
    assert width % 8 == 0 and longest <= width < longest + 8
    assert batch["attention_mask"].sum(1).tolist() == [lengths[i] for i in indices]
    for row, i in enumerate(indices):
        assert batch["input_ids"][row, : lengths[i]].tolist() == list(range(1, lengths[i] + 1))
        assert (batch["input_ids"][row, lengths[i] :] == corpus.pad_id).all()
    assert batch["labels"].tolist() == [i % 2 for i in indices]


def test_bucketing_covers_every_example_once_with_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = np.clip(np.exp(rng.normal(np.log(10), 0.8, 3000)).astype(int), 3, 128)
    epoch = batching.bucket_batches(lengths, 32, np.random.default_rng(1), chunk_batches=20)
    assert np.array_equal(np.sort(np.concatenate(epoch)), np.arange(len(lengths)))
    assert all(len(b) == 32 for b in epoch[:-1]) or sum(len(b) < 32 for b in epoch) == 1
    spread = np.mean([np.ptp(lengths[b]) for b in epoch])
    random_spread = np.mean([np.ptp(lengths[b]) for b in np.array_split(rng.permutation(3000), 94)])
    assert spread < 0.25 * random_spread
    # Batch order is shuffled (not sorted by length) and differs between epochs.
    maxima = [lengths[b].max() for b in epoch]
    assert maxima != sorted(maxima)
    other = batching.bucket_batches(lengths, 32, np.random.default_rng(2), chunk_batches=20)
    assert not np.array_equal(np.concatenate(epoch), np.concatenate(other))


def test_naive_and_cached_pipelines_produce_the_same_tokens(synthetic, tmp_path):
    split = load_sst2(synthetic)["train"]
    tok = tokenizer.trained_wordpiece(split.texts, 300, root=tmp_path)
    rows = list(zip(split.texts[:16], split.labels[:16], strict=True))
    static = batching.TokenizeAndPadCollate(tok, 128)(rows)
    assert static["input_ids"].shape == (16, 128)
    corpus = batching.encode_once(tok, split.texts[:16], split.labels[:16], 128)
    dynamic = batching.pad_batch(corpus, np.arange(16))
    width = dynamic["input_ids"].shape[1]
    assert torch.equal(static["input_ids"][:, :width], dynamic["input_ids"])
    assert torch.equal(static["labels"], dynamic["labels"])


# --- recipes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", bert.RECIPES)
def test_smoke_recipes_build_train_and_evaluate(cache, recipe):
    trainer = bert.build(recipe, "smoke", device="cpu")
    work = trainer.train_steps(3)
    batch = trainer.describe()["batch_size"]
    assert work.samples == 3 * batch and 0 < work.tokens < work.samples * 128
    assert np.isfinite(trainer.last_loss)
    accuracy = trainer.evaluate()
    assert 0.0 <= accuracy <= 1.0 and 0.0 <= trainer.evaluate("dev") <= 1.0
    info = trainer.describe()
    # Naive = library defaults: transformers 5 gives SDPA unless asked otherwise; describe() says
    # what actually runs (the old naive recipe forced "eager").
    from transformers import BertConfig, BertForSequenceClassification

    tiny = BertConfig(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8
    )
    default = BertForSequenceClassification(tiny).config._attn_implementation  # the library's pick
    assert default != "eager"
    assert info["attention"] == (default if recipe == "naive" else "sdpa")
    assert info["attention"] == trainer.model.config._attn_implementation
    native = "bf16" if cpu_native_bf16() else "off"
    assert info["precision"] == ("off" if recipe == "naive" else native)
    assert trainer.total_steps == trainer.steps_per_epoch * bert.PROFILES["smoke"].epochs
    assert trainer.flops_per_sample > 0


def test_optimized_does_less_work_per_sample_than_naive(cache):
    naive = bert.build("naive", "smoke", device="cpu")
    optimized = bert.build("optimized", "smoke", device="cpu")
    assert optimized.describe()["mean_padded_length"] < 0.3 * naive.describe()["mean_padded_length"]
    assert optimized.flops_per_sample < 0.3 * naive.flops_per_sample


def test_optimized_recipe_pads_exact_widths_on_a_cpu_and_rounds_when_asked(cache):
    # lesson 7 measured exact widths faster than rounding to 8 on a CPU; the recipe practises it
    def widths(trainer):
        batches = [next(trainer._batches) for _ in range(trainer.steps_per_epoch)]
        return [(b["input_ids"].shape[1], int(b["attention_mask"].sum(1).max())) for b in batches]

    exact = bert.build("optimized", "smoke", device="cpu")
    assert exact.describe()["padding"] == "dynamic, exact widths"
    assert all(width == longest for width, longest in widths(exact))
    rounded = bert.build("optimized", "smoke", device="cpu", pad_multiple=8)
    assert rounded.describe()["padding"] == "dynamic, multiple of 8"
    assert all(w % 8 == 0 and longest <= w < longest + 8 for w, longest in widths(rounded))
    assert exact.describe()["mean_padded_length"] < rounded.describe()["mean_padded_length"]
    with pytest.raises(ValueError, match="pad_multiple"):
        bert.build("optimized", "smoke", device="cpu", pad_multiple=0)


def test_optimized_smoke_recipe_learns(cache):
    trainer = bert.build("optimized", "smoke", device="cpu", stop_at_target=False)
    before = trainer.evaluate()
    trainer.train_steps(trainer.steps_per_epoch)  # one epoch is enough for the synthetic signal
    assert trainer.evaluate() >= max(0.7, before + 0.1)


def test_train_step_hook_and_precision_reach_the_naive_recipe(cache):
    seen = []

    def my_step(model, batch, optimizer, policy, scaler, max_grad_norm):
        seen.append((policy.mode, batch["input_ids"].shape[1], max_grad_norm))
        return bert.default_train_step(model, batch, optimizer, policy, scaler, max_grad_norm)

    trainer = bert.build("naive", "smoke", device="cpu", precision="bf16", train_step=my_step)
    trainer.train_steps(2)
    assert seen == [("bf16", 128, bert.MAX_GRAD_NORM)] * 2
    info = trainer.describe()
    naive = bert.build("naive", "smoke", device="cpu").describe()
    assert (
        info["attention"] == naive["attention"] and info["batch_size"] == 32
    )  # nothing else changed


def test_lr_schedule_does_not_advance_on_skipped_steps(cache):
    trainer = bert.build("naive", "smoke", device="cpu")
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # as fp16 would have

    def overflowing_step(model, batch, optimizer, policy, scaler, max_grad_norm):
        scaler.scale(torch.ones(()))  # the scaler's state starts with its first scale()
        scaler.update(new_scale=scaler.get_scale() / 2)  # what an inf/NaN gradient does
        optimizer.zero_grad(set_to_none=True)
        return float("nan")

    trainer.train_step = overflowing_step
    trainer.train_steps(2)
    assert trainer.scheduler.last_epoch == 0
    trainer.train_step = bert.default_train_step
    trainer.train_steps(1)
    assert trainer.scheduler.last_epoch == 1


def test_unknown_recipe_profile_or_hook_is_rejected(cache):
    workload = get("bert")
    assert set(workload.PROFILES) == {"smoke", "cpu", "gpu"}
    with pytest.raises(ValueError, match="unknown recipe 'fast'.*naive.*optimized"):
        workload.build("fast", "smoke")
    with pytest.raises(ValueError, match="unknown profile 'tpu'.*smoke"):
        workload.build("naive", "tpu")
    with pytest.raises(ValueError, match="unknown profile 'tpu'"):
        workload.prepare_data("tpu")
    with pytest.raises(ValueError, match="unknown hook.*'colour'"):
        workload.build("naive", "smoke", colour="red")
    with pytest.raises(ValueError, match="fp16 mixed precision cannot run on the cpu"):
        workload.build("naive", "smoke", device="cpu", precision="fp16")


def test_compiled_training_view_is_used_and_trains(cache):
    """``compile=True`` trains through the torch.compile'd view. An OptimizedModule has no truth
    value (``bool()`` calls ``__len__``, which raises): the first GPU run of ``--compile`` crashed
    on ``train_model or model``. The "eager" backend builds the same wrapper without a C++ build."""
    trainer = bert.build("optimized", "smoke", device="cpu")
    trainer.train_model = torch.compile(trainer.model, backend="eager", dynamic=True)
    calls = []
    step = trainer.train_step
    trainer.train_step = lambda model, *rest: calls.append(model) or step(model, *rest)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train_steps(2)
    assert calls == [trainer.train_model] * 2 and np.isfinite(trainer.last_loss)
    assert any(
        not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True)
    )
