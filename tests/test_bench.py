"""The benchmark command end to end, on the smoke profile (synthetic data, CPU)."""

import json

import pytest

from effkit import bench
from effkit.abtest import median_ci_coverage

FIELDS = {
    "workload",
    "profile",
    "device",
    "torch",
    "recipes",
    "speedup",
    "speedup_ci",
    "speedup_spread",
    "time_to_target_speedup",
    "accuracy_delta_pp",
    "speedup_ci_coverage",
    "headline",
    "time_to_target_speedup_train_only",
    "speedup_verdict",
}
RECIPE_FIELDS = {
    "samples_per_s",
    "tokens_per_s",
    "time_to_target_s",
    "final_accuracy",
    "peak_memory_bytes",
    "mfu",
    "flops_per_sample",
    "history",
    "config",
    "eval_seconds",
    "wall_seconds",
    "time_to_target_train_only_s",
}


@pytest.fixture(scope="module")
def bert_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-bert")
    bench.main(["bert", "--profile", "smoke", "--out", str(out), "--quiet", "--pairs", "5"])
    return out, json.loads((out / "result.json").read_text())


def test_smoke_bench_writes_every_field_and_plots(bert_result):
    out, res = bert_result
    assert FIELDS <= set(res), FIELDS - set(res)
    assert res["workload"] == "bert" and res["profile"] == "smoke" and "CPU" in res["device"]
    for name in ("naive", "optimized"):
        rec = res["recipes"][name]
        assert RECIPE_FIELDS <= set(rec), RECIPE_FIELDS - set(rec)
        assert rec["samples_per_s"] > 0 and rec["tokens_per_s"] > 0
        assert 0.0 <= rec["final_accuracy"] <= 1.0
        assert rec["peak_memory_bytes"] > 2**20  # bytes, not KiB or MiB
        assert rec["flops_per_sample"] is None or rec["flops_per_sample"] > 1e3
    delta = 100 * (
        res["recipes"]["optimized"]["final_accuracy"] - res["recipes"]["naive"]["final_accuracy"]
    )
    assert res["accuracy_delta_pp"] == pytest.approx(delta)
    lo, hi = res["speedup_ci"]
    assert lo <= res["speedup"] <= hi
    # the interval's real coverage is reported (5 pairs: [min, max] covers the median 93.75%)
    assert res["ab_pairs"] == 5 and res["speedup_ci_coverage"] == median_ci_coverage(5)
    assert "93.8%" in bench.table(res) or "93.7%" in bench.table(res)
    assert res["headline"]["metric"] == "speedup"  # BERT: same model, so samples/s is quoted
    for name in ("naive", "optimized"):
        rec = res["recipes"][name]
        assert rec["wall_seconds"] == pytest.approx(rec["train_seconds"] + rec["eval_seconds"])
        if rec["time_to_target_s"] is not None:
            assert rec["time_to_target_s"] > rec["time_to_target_train_only_s"]
    for png in ("throughput.png", "accuracy_vs_time.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_bert_optimized_beats_naive_by_a_margin_that_survives_noise(bert_result):
    _, res = bert_result
    # Measured 4.4x (95% CI 3.1-15) on a heavily loaded 2-core Xeon. Demand 2x at the median and
    # the whole CI above 1.2x: a change that loses the optimization fails, load alone does not.
    assert res["speedup"] > 2.0, res["speedup"]
    assert res["speedup_ci"][0] > 1.2, res["speedup_ci"]


def test_bad_workload_and_profile_are_clear_errors(capsys, tmp_path):
    with pytest.raises(SystemExit):
        bench.main(["resnet", "--out", str(tmp_path)])
    assert "invalid choice: 'resnet'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["bert", "--profile", "huge", "--out", str(tmp_path)])
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_missing_data_dir_names_the_path(capsys, tmp_path):
    missing = tmp_path / "nope"
    code = bench.main(["bert", "--profile", "cpu", "--data", str(missing), "--out", str(tmp_path)])
    assert code == 2
    assert str(missing) in capsys.readouterr().err


def test_headline_is_time_to_target_for_cifar_and_throughput_for_bert():
    base = {"speedup": 1.5, "time_to_target_speedup": 3.0, "accuracy_delta_pp": 0.0}
    assert bench.headline(dict(base, workload="cifar"))["value"] == 3.0
    assert bench.headline(dict(base, workload="bert"))["value"] == 1.5
    assert bench.DEFAULT_PAIRS >= 6 and median_ci_coverage(bench.DEFAULT_PAIRS) >= 0.95


def test_the_idle_recipe_has_no_workers_running_while_the_other_is_timed():
    import multiprocessing

    from effkit.workloads import bert

    naive = bert.build("naive", "smoke", device="cpu")  # a DataLoader with 2 worker processes
    opt = bert.build("optimized", "smoke", device="cpu")  # no workers
    assert naive.describe()["workers"] == 2
    seen = []

    def opt_burst():
        seen.append(len(multiprocessing.active_children()))
        return opt.train_steps(1).samples

    res = bench.interleave(
        (naive, lambda: naive.train_steps(2).samples), (opt, opt_burst), "cpu", warmup=1, pairs=3
    )
    assert res.pairs == 3 and len(seen) == 4
    assert seen == [0, 0, 0, 0], seen  # the naive recipe's workers were shut down, not prefetching
    naive.resume()
    assert len(multiprocessing.active_children()) == 2  # and they come back when it resumes
    naive.pause()


def test_the_dashboard_reads_a_real_bench_result_and_counts_evaluations(bert_result, tmp_path):
    from effkit import dashboard

    out, res = bert_result
    page = dashboard.main([str(out), "--out", str(tmp_path / "dash"), "--price-per-hour", "2.0"])
    text = page.read_text()
    assert res["device"] in text and "naive" in text and "optimized" in text
    assert (tmp_path / "dash" / "cost_to_target.png").stat().st_size > 5_000
    assert (tmp_path / "dash" / "accuracy_vs_time.png").stat().st_size > 5_000
    for row in dashboard.rows(dashboard.find_results([out]), price_per_hour=2.0):
        rec = res["recipes"][row["recipe"]]
        if rec["time_to_target_s"] is None:
            assert row["seconds_to_target"] is None and "not reached" in text
            continue
        assert row["seconds_to_target"] == rec["time_to_target_s"]
        evals = rec["time_to_target_s"] - rec["time_to_target_train_only_s"]
        assert row["eval_seconds_to_target"] == pytest.approx(evals) and evals > 0
        assert row["cost"] == pytest.approx(rec["time_to_target_s"] / 3600 * 2.0)
        assert row["samples_to_target"] % rec["config"]["batch_size"] == 0


def test_trainer_compile_reaches_the_hf_trainer(tmp_path):
    """--trainer-compile turns on the Trainer's own torch_compile: with the recipe left eager, every
    graph dynamo compiles in this run is the Trainer's (none without the switch)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from effkit.workloads.bert import peer

    def graphs(trainer_compile: bool) -> int:
        torch._dynamo.reset()
        counters.clear()
        res = peer.run(
            "smoke",
            None,
            tmp_path / str(trainer_compile),
            device="cpu",
            pairs=2,
            progress=False,
            full_run=False,
            trainer_compile=trainer_compile,
        )
        assert res["hf_trainer_torch_compile"] is trainer_compile
        return counters["stats"]["unique_graphs"]

    assert graphs(False) == 0
    assert graphs(True) >= 1
