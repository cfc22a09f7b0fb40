"""Benchmark a workload's naive recipe against its optimized one, honestly.

    python -m effkit.bench {cifar,bert} --profile {smoke,cpu,gpu} [--data DIR] --out DIR
    python -m effkit.bench bert --against hf-trainer --profile cpu --data DIR --out DIR

Throughput: interleaved ABBA bursts after warm-up, the idle recipe paused (its workers off); then each recipe's
whole run from scratch for time to target and accuracy, evaluations on the clock. Writes ``result.json`` and
two plots to ``--out`` and prints a table led by the workload's headline; every figure names its device.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from itertools import islice
from pathlib import Path

# OpenMP threads that spin at barriers collapse when another process takes one of their cores (a shared
# machine): PASSIVE waits instead. Set before torch loads libgomp; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from importlib.metadata import PackageNotFoundError, version

import torch  # noqa: E402

from effkit import workloads  # noqa: E402
from effkit.abtest import ABResult, ab_result, speed_pairs, verdict  # noqa: E402
from effkit.amp import cpu_features  # noqa: E402
from effkit.measure import device_name, sync  # noqa: E402
from effkit.workloads.bert import peer  # noqa: E402
from effkit.workloads.bert.data import Sst2Unavailable  # noqa: E402
from effkit.workloads.common import train_to_target  # noqa: E402

# The figure a practitioner quotes, per workload. CIFAR's two recipes are different networks, so
# samples/s is beside the point: time to the target accuracy, every evaluation pass counted, is
# what matters. BERT's recipes train the same model on the same samples, so the throughput
# speedup at an accuracy delta within the gate is the quoted figure (time-to-target beside it).
HEADLINE = {"cifar": "time_to_target_speedup", "bert": "speedup"}
HEADLINE_TEXT = {
    "time_to_target_speedup": "time-to-target speedup (evaluations on the clock)",
    "speedup": "throughput speedup (samples/s, same model and data)",
}
DEFAULT_PAIRS = 9  # the first count whose order-statistic interval covers the median >= 95%


def _calibrate(trainer, burst_s: float) -> int:
    """Steps per burst so one burst lasts about ``burst_s`` (after one warm-up step)."""
    trainer.train_steps(1)
    sync(trainer.device)
    t0 = time.perf_counter()
    trainer.train_steps(2)
    sync(trainer.device)
    per_step = max((time.perf_counter() - t0) / 2, 1e-4)
    return max(1, round(burst_s / per_step))


def _pause(trainer) -> None:
    """Stop the idle recipe's background work (DataLoader workers) while the other is timed."""
    getattr(trainer, "pause", lambda: None)()


def _resume(trainer) -> None:
    getattr(trainer, "resume", lambda: None)()


def interleave(
    a,
    b,
    device,
    *,
    warmup: int = 2,
    pairs: int = DEFAULT_PAIRS,
    progress=None,
    confidence: float = 0.95,
) -> ABResult:
    """Time callables ``a`` and ``b`` (each returns the samples it trained) in ABBA pairs.

    Each is a pair (trainer, burst): the trainer is resumed untimed before its burst and paused
    after it, so only one recipe's processes run at a time. ``warmup`` rounds are discarded.
    ``progress(pair, ratio)`` gets each pair's own ratio.
    """
    start = time.perf_counter()
    trainers = {"a": a[0], "b": b[0]}
    _pause(a[0])
    _pause(b[0])
    speeds = speed_pairs(
        a[1],
        b[1],
        device=device,
        warmup=warmup,
        before=lambda side: _resume(trainers[side]),
        after=lambda side: _pause(trainers[side]),
    )
    a_speeds, b_speeds = [], []
    for i, (sa, sb) in enumerate(islice(speeds, pairs)):
        a_speeds.append(sa)
        b_speeds.append(sb)
        if progress is not None:
            progress(i + 1, sb / sa)
    return ab_result(a_speeds, b_speeds, confidence, seconds=time.perf_counter() - start)


def measure_throughput(
    mod, profile, data, device, seed, burst_s, pairs, progress, hooks=None
) -> dict:
    hooks = hooks or {}
    naive = mod.build("naive", profile, data_dir=data, device=device, seed=seed, **hooks)
    opt = mod.build("optimized", profile, data_dir=data, device=device, seed=seed, **hooks)
    k_naive = _calibrate(naive, burst_s)
    _pause(naive)
    k_opt = _calibrate(opt, burst_s)
    _pause(opt)
    tokens = {"naive": [], "optimized": []}

    def burst(trainer, k, name):
        work = trainer.train_steps(k)
        tokens[name].append((work.samples, work.tokens))
        return work.samples

    def report(i, ratio):
        if progress:
            print(f"  A/B pair {i}: optimized/naive = {ratio:.2f}x", flush=True)

    warmup = 2
    res = interleave(
        (naive, lambda: burst(naive, k_naive, "naive")),
        (opt, lambda: burst(opt, k_opt, "optimized")),
        device,
        warmup=warmup,
        pairs=pairs,
        progress=report,
    )
    out = {
        "speedup": res.ratio,
        "speedup_ci": [res.ci_low, res.ci_high],
        "speedup_ci_coverage": res.coverage,
        "speedup_spread": list(res.spread),
        "pairs": res.pairs,
        "warmup_rounds": warmup,
        "verdict": verdict(res, "naive", "optimized").sentence,
        "steps_per_burst": {"naive": k_naive, "optimized": k_opt},
    }
    for name, speeds in (("naive", res.a_speeds), ("optimized", res.b_speeds)):
        work = tokens[name][warmup:]  # the first calls were warm-up
        per_sample_tokens = [t / s for s, t in work if s]
        tps = [v * r for v, r in zip(speeds, per_sample_tokens, strict=False)]
        out[name] = {
            "samples_per_s": sorted(speeds)[len(speeds) // 2],
            "samples_per_s_all": speeds,
            "tokens_per_s": sorted(tps)[len(tps) // 2] if any(tps) else None,
        }
    _pause(naive)  # no worker outlives the A/B phase
    _pause(opt)
    return out


def run(
    workload: str,
    profile: str,
    data: str | None,
    out: Path,
    *,
    device=None,
    seed=0,
    burst_s: float = 1.0,
    pairs: int = DEFAULT_PAIRS,
    progress: bool = True,
    hooks: dict | None = None,
) -> dict:
    """``hooks`` go to both recipes' ``build`` (e.g. ``{"model": "scratch"}`` for BERT)."""
    hooks = hooks or {}
    mod = workloads.get(workload)
    if profile not in mod.PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(mod.PROFILES)}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    name = device_name(device)
    data_dir = mod.prepare_data(profile, data)
    print(f"[effkit.bench] {workload}/{profile} on {name}, data {data_dir}", flush=True)
    print("1/3 throughput A/B (interleaved, warm-up discarded)", flush=True)
    load = {"ab": [_load()]}
    tp = measure_throughput(mod, profile, data_dir, device, seed, burst_s, pairs, progress, hooks)
    load["ab"].append(_load())
    runs = {}
    for i, recipe in enumerate(("naive", "optimized"), start=2):
        print(f"{i}/3 {recipe}: full run to target", flush=True)
        trainer = mod.build(recipe, profile, data_dir=data_dir, device=device, seed=seed, **hooks)
        # Both recipes run their whole schedule: the accuracy delta then compares finished
        # recipes, not a run stopped at the target against one that kept improving. The time to
        # target is read from the same run (first evaluation at or above the target).
        trainer.stop_at_target = False
        load[recipe] = [_load()]
        runs[recipe] = train_to_target(trainer, progress=progress, device_label=name).to_dict()
        load[recipe].append(_load())
    result = _assemble(workload, profile, name, tp, runs)
    # The A/B bursts are interleaved, so load hits both recipes alike; the whole runs are not
    # (naive, then optimized): a change in load between them lands in time-to-target alone.
    result["load_average"] = load
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    _plots(result, out)
    print(table(result))
    return result


def _assemble(workload, profile, name, tp, runs) -> dict:
    recipes = {}
    for recipe, r in runs.items():
        recipes[recipe] = {
            "samples_per_s": tp[recipe]["samples_per_s"],
            "tokens_per_s": tp[recipe]["tokens_per_s"],
            "samples_per_s_all": tp[recipe]["samples_per_s_all"],
            "train_samples_per_s": r["samples_per_s"],
            "time_to_target_s": r["time_to_target_s"],
            "time_to_target_train_only_s": r["time_to_target_train_only_s"],
            "train_seconds": r["train_seconds"],
            "eval_seconds": r["eval_seconds"],
            "wall_seconds": r["wall_seconds"],
            "final_accuracy": r["accuracy"],
            "target": r["target"],
            "peak_memory_bytes": r["peak_memory_bytes"],
            "flops_per_sample": r["flops_per_sample"],
            "mfu": r["mfu"],
            "history": r["history"],
            "config": r["config"],
        }
    ttt_n, ttt_o = (recipes[k]["time_to_target_s"] for k in ("naive", "optimized"))
    tto_n, tto_o = (recipes[k]["time_to_target_train_only_s"] for k in ("naive", "optimized"))
    result = {
        "workload": workload,
        "profile": profile,
        "device": name,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": _cpu_features(),
        "transformers": _version("transformers"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "recipes": recipes,
        "speedup": tp["speedup"],
        "speedup_ci": tp["speedup_ci"],
        "speedup_ci_coverage": tp["speedup_ci_coverage"],
        "speedup_spread": tp["speedup_spread"],
        "ab_pairs": tp["pairs"],
        "ab_warmup_rounds": tp["warmup_rounds"],
        "speedup_verdict": tp["verdict"],
        "time_to_target_speedup": (ttt_n / ttt_o) if ttt_n and ttt_o else None,
        "time_to_target_speedup_train_only": (tto_n / tto_o) if tto_n and tto_o else None,
        "accuracy_delta_pp": 100
        * (recipes["optimized"]["final_accuracy"] - recipes["naive"]["final_accuracy"]),
    }
    result["headline"] = headline(result)
    return result


def headline(result: dict) -> dict:
    """The workload's quoted figure (see ``HEADLINE``), with what it is."""
    key = HEADLINE[result["workload"]]
    return {"metric": key, "what": HEADLINE_TEXT[key], "value": result.get(key)}


def _fmt(v, spec=".1f", none="—"):
    return none if v is None else format(v, spec)


def table(result: dict) -> str:
    head = result.get("headline") or headline(result)
    weights = (result["recipes"].get("naive", {}).get("config") or {}).get("model")
    opt = result["recipes"].get("optimized", {}).get("config") or {}
    # The recipe's per-host choices (effkit.precision_probe, effkit.batch_probe, the evaluation batch).
    choices = [
        opt[k] for k in ("precision_choice", "batch_choice", "evaluation_batch") if opt.get(k)
    ]
    rows = [
        f"{result['workload']} / {result['profile']} on {result['device']}"
        + (f", {weights}" if weights else "")
        + (" — synthetic stand-in data, not CIFAR-10" if opt.get("data") == "synthetic" else ""),
        *(["optimized recipe's choices on this host: " + "; ".join(choices)] if choices else []),
        f"HEADLINE: {head['what']}: {_fmt(head['value'], '.2f')}x "
        f"(Δacc {result['accuracy_delta_pp']:+.2f} pp)",
        f"{'recipe':<10} {'samples/s':>10} {'tokens/s':>10} {'t→target s':>10} "
        f"{'eval s':>7} {'accuracy':>9} {'peak MiB':>9}",
    ]
    for name, r in result["recipes"].items():
        rows.append(
            f"{name:<10} {r['samples_per_s']:>10.1f} {_fmt(r['tokens_per_s'], '.0f'):>10} "
            f"{_fmt(r['time_to_target_s']):>10} {_fmt(r.get('eval_seconds')):>7} "
            f"{100 * r['final_accuracy']:>8.2f}% {r['peak_memory_bytes'] / 2**20:>9.0f}"
        )
    lo, hi = result["speedup_ci"]
    cov = result.get("speedup_ci_coverage")
    rows.append(
        f"throughput speedup {result['speedup']:.2f}x (interval {lo:.2f}-{hi:.2f}, real "
        f"coverage {_fmt(cov and 100 * cov, '.1f')}%, {result['ab_pairs']} pairs); "
        f"time-to-target speedup {_fmt(result['time_to_target_speedup'], '.2f')}x with "
        f"evaluations counted ({_fmt(result.get('time_to_target_speedup_train_only'), '.2f')}x"
        f" without); Δacc {result['accuracy_delta_pp']:+.2f} pp"
    )
    rows += counted(result)
    return "\n".join(rows)


def whole_run_ratio(result: dict) -> float | None:
    """Optimized / naive training samples/s over the whole runs (first chunk excluded)."""
    r = result["recipes"]
    try:
        return r["optimized"]["train_samples_per_s"] / r["naive"]["train_samples_per_s"]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def counted(result: dict) -> list[str]:
    """What each figure counts, and a warning when the whole runs disagree with the A/B bursts.

    samples/s is from the interleaved A/B bursts; time-to-target from the two whole runs, run one
    after the other (each from scratch: build, whitening, every evaluation on the clock). A load
    that changes between them shows in time-to-target only: when the whole-run throughput ratio
    falls outside the A/B interval, the table says so instead of letting the headline hide it.
    """
    r, load = result["recipes"], result.get("load_average") or {}

    def la(key: str) -> str:
        v = load.get(key)
        return f", load {v[0]:.1f}→{v[1]:.1f}" if v and None not in v else ""

    lines = [
        "counted: samples/s = interleaved A/B bursts after warm-up"
        + la("ab")
        + "; t→target = each recipe's"
        " whole run from scratch, one after the other (setup, every evaluation counted)"
    ]
    whole = [
        f"{k} {_fmt(r[k].get('train_samples_per_s'))} samples/s{la(k)}"
        for k in ("naive", "optimized")
        if k in r
    ]
    lines.append("whole runs' training throughput (first chunk excluded): " + ", ".join(whole))
    ratio, (lo, hi) = whole_run_ratio(result), result["speedup_ci"]
    if ratio is not None and not lo <= ratio <= hi:
        lines.append(
            f"WARNING: whole-run throughput ratio {ratio:.2f}x lies outside the A/B interval {lo:.2f}-{hi:.2f}: "
            "the sequential whole runs did not run under the same conditions (load average above), so "
            "time-to-target is confounded; trust the A/B figure, re-run on a quiet machine"
        )
    return lines


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not on every platform
        return None


def _plots(result: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # effkit's core install has no matplotlib: the JSON still carries it all
        print("matplotlib not installed: skipping plots (pip install 'effkit[plot]')")
        return
    names = list(result["recipes"])
    fig, ax = plt.subplots(figsize=(5, 3.2))
    meds = [result["recipes"][n]["samples_per_s"] for n in names]
    alls = [result["recipes"][n]["samples_per_s_all"] for n in names]
    err = [
        [m - min(a) for m, a in zip(meds, alls, strict=True)],
        [max(a) - m for m, a in zip(meds, alls, strict=True)],
    ]
    ax.bar(names, meds, yerr=err, capsize=6, color=["#999999", "#2a7ab0"])
    ax.set_ylabel("samples / s (median, min-max)")
    ax.set_title(
        f"{result['workload']} {result['profile']}: {result['speedup']:.2f}x\n{result['device']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for n in names:
        h = result["recipes"][n]["history"]
        ax.plot([p["seconds"] for p in h], [100 * p["accuracy"] for p in h], marker="o", label=n)
    target = result["recipes"][names[0]]["target"]
    ax.axhline(100 * target, ls="--", c="k", lw=0.8, label=f"target {100 * target:.0f}%")
    ax.set_xlabel("wall-clock, training + evaluation (s)")
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_title(f"accuracy vs time — {result['device']}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_time.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m effkit.bench", description=__doc__.split("\n")[0])
    p.add_argument("workload", choices=workloads.WORKLOADS)
    p.add_argument("--profile", default="smoke", choices=workloads.PROFILES)
    p.add_argument("--data", default=None, help="data directory (SST-2 TSVs or CIFAR root)")
    p.add_argument("--out", default="runs/bench", type=Path)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: best available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, help="A/B pairs after warm-up")
    p.add_argument(
        "--against",
        default=None,
        choices=["hf-trainer"],
        help="bert only: optimized recipe vs the Hugging Face Trainer's own switches",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="with --against: torch.compile the optimized recipe (ablation)",
    )
    p.add_argument(
        "--trainer-compile",
        action="store_true",
        help="with --against: the Trainer's own torch_compile=True (the peer of --compile)",
    )
    p.add_argument(
        "--ab-only",
        action="store_true",
        help="with --against: the throughput A/B only, no full runs (ablation rows)",
    )
    p.add_argument("--burst", type=float, default=1.0, help="seconds per timed burst")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--model",
        default=None,
        help="bert only: weights to start from: a folder, a hub name, 'packaged' (the "
        "course's all-MiniLM-L6-v2) or 'scratch' (default: the profile's choice)",
    )
    args = p.parse_args(argv)
    if args.model and args.workload != "bert":
        p.error("--model applies to the bert workload only")
    model_hooks = {"model": args.model} if args.model else {}
    # What both benchmarks take alike: which profile, data and output folder, and how to run.
    where = (args.profile, args.data, args.out)
    how = dict(device=args.device, seed=args.seed, pairs=args.pairs, progress=not args.quiet)
    try:
        if args.against:
            if args.workload != "bert":
                raise ValueError("--against hf-trainer compares BERT recipes only")
            peer.run(
                *where,
                **how,
                hooks={**model_hooks, **({"compile": True} if args.compile else {})},
                full_run=not args.ab_only,
                trainer_compile=args.trainer_compile,
            )
            return 0
        run(args.workload, *where, **how, burst_s=args.burst, hooks=model_hooks)
    except (ValueError, FileNotFoundError, Sst2Unavailable) as e:  # no data, bad args: one line
        print(f"effkit.bench: error: {e}", file=sys.stderr)
        return 2
    return 0


def _cpu_features() -> dict:
    """The CPU's vector ISA and bf16 units (recorded with every result: CPU figures depend on them)."""
    return cpu_features()


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
