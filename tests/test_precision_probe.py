""" "auto" precision on a CPU is chosen by timing the recipe's model (issue: bf16 units made the CIFAR
demo's optimized recipe slower than the naive one on an AVX512-BF16 CPU)."""

import math

import torch
from torch import nn

from effkit import precision_probe as pp
from effkit.workloads import cifar


def _tiny():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10)
    )


def test_the_speedup_is_measured_on_the_model_given():
    ratio = pp.bf16_speedup(_tiny(), torch.randn(4, 3, 8, 8), 10, rounds=1)
    assert math.isfinite(ratio) and ratio > 0


def test_bf16_is_kept_only_where_it_measured_faster_and_the_verdict_is_cached(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(
        pp, "cpu_features", lambda: {"native_bf16": True, "torch_capability": "AVX512"}
    )
    calls = []
    for ratio, want in ((0.3, "off"), (1.1, "off"), (1.6, "bf16")):
        monkeypatch.setattr(pp, "bf16_speedup", lambda *a, r=ratio, **k: calls.append(r) or r)
        mode, why = pp.cpu_precision(
            f"model at {ratio}", _tiny, torch.randn(4, 3, 8, 8), 10, cache_dir=tmp_path
        )
        assert mode == want and f"{ratio:.2f}x" in why, why
        again, _ = pp.cpu_precision(
            f"model at {ratio}", _tiny, torch.randn(4, 3, 8, 8), 10, cache_dir=tmp_path
        )
        assert again == want
    assert calls == [0.3, 1.1, 1.6]  # each model measured once: the second call read the cache
    assert (tmp_path / "precision.json").exists()


def test_a_cpu_without_bf16_units_gets_fp32_without_a_probe(monkeypatch):
    monkeypatch.setattr(
        pp, "cpu_features", lambda: {"native_bf16": False, "torch_capability": "AVX2"}
    )
    monkeypatch.setattr(
        pp, "bf16_speedup", lambda *a, **k: (_ for _ in ()).throw(AssertionError("probed"))
    )
    assert pp.cpu_precision("m", _tiny, torch.randn(4, 3, 8, 8), 10)[0] == "off"


def test_the_optimized_cifar_recipe_runs_the_measured_precision_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFKIT_DATA", str(tmp_path))
    monkeypatch.setattr(pp, "bf16_speedup", lambda *a, **k: 0.4)
    monkeypatch.setattr(
        pp, "cpu_features", lambda: {"native_bf16": True, "torch_capability": "AVX512"}
    )
    d = cifar.build("optimized", "smoke", device="cpu", batch_size=250).describe()
    assert d["precision"] == "off" and "0.40x" in d["precision_choice"], d
    monkeypatch.setattr(pp, "bf16_speedup", lambda *a, **k: 2.0)
    (tmp_path / "cifar" / "precision.json").unlink()
    d = cifar.build("optimized", "smoke", device="cpu", batch_size=250).describe()
    assert d["precision"] == "bf16" and "2.00x" in d["precision_choice"], d
    assert (
        cifar.build("optimized", "smoke", device="cpu", precision="off").describe()["precision"]
        == "off"
    )
