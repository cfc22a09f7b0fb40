"""Cost-to-target dashboard: every recorded run's time, samples and device to target, side by side.

``python -m effkit.dashboard [PATHS...] --out DIR`` reads the ``result.json`` files ``effkit.bench`` wrote and
writes ``index.html`` (one row per recipe, evaluations counted, cost at a price per device-hour),
``cost_to_target.png`` and ``accuracy_vs_time.png``. Runs on different devices are shown, never merged.
"""

from __future__ import annotations

import argparse
import html
import json
from pathlib import Path

COLUMNS = (
    "run",
    "recipe",
    "device",
    "samples/s",
    "samples to target",
    "s to target",
    "of which eval",
    "final acc",
    "peak MiB",
    "cost to target",
)


def find_results(paths: list[str | Path]) -> list[Path]:
    """Every ``result.json`` (or bench-style ``*.json`` with ``recipes``) under ``paths``."""
    found: list[Path] = []
    for p in map(Path, paths):
        candidates = sorted(p.rglob("*.json")) if p.is_dir() else [p]
        for c in candidates:
            try:
                data = json.loads(c.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("recipes"), dict):
                found.append(c)
    return found


def _samples_to_target(rec: dict) -> int | None:
    """Training samples seen at the first evaluation at or above the target (steps x batch)."""
    target, batch = rec.get("target"), (rec.get("config") or {}).get("batch_size")
    for point in rec.get("history") or []:
        if target is not None and point.get("accuracy", -1) >= target:
            return (
                point["samples"]
                if "samples" in point
                else (point["step"] * batch if batch else None)
            )
    return None


def rows(results: list[Path], price_per_hour: float | None = None) -> list[dict]:
    """One row per recipe of every run, in file order."""
    table = []
    for path in results:
        run = json.loads(path.read_text())
        label = f"{run.get('workload', '?')}/{run.get('profile', '?')} ({path.stem})"
        for name, rec in run["recipes"].items():
            ttt = rec.get("time_to_target_s")
            ttt_train = rec.get("time_to_target_train_only_s")
            table.append(
                {
                    "run": label,
                    "recipe": name,
                    "device": run.get("device", "unknown device"),
                    "samples_per_s": rec.get("samples_per_s"),
                    "samples_to_target": _samples_to_target(rec),
                    "seconds_to_target": ttt,
                    "eval_seconds_to_target": (ttt - ttt_train)
                    if ttt is not None and ttt_train is not None
                    else None,
                    "final_accuracy": rec.get("final_accuracy"),
                    "target": rec.get("target"),
                    "peak_mib": (rec.get("peak_memory_bytes") or 0) / 2**20 or None,
                    "cost": ttt / 3600 * price_per_hour
                    if ttt is not None and price_per_hour
                    else None,
                    "history": rec.get("history") or [],
                }
            )
    return table


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def write_html(table: list[dict], out: Path, price_per_hour: float | None) -> Path:
    cells = []
    for r in table:
        share = (
            r["eval_seconds_to_target"] / r["seconds_to_target"]
            if r["eval_seconds_to_target"] is not None and r["seconds_to_target"]
            else None
        )
        values = (
            r["run"],
            r["recipe"],
            r["device"],
            _fmt(r["samples_per_s"], ",.1f"),
            _fmt(r["samples_to_target"], ","),
            _fmt(r["seconds_to_target"], ",.1f", "not reached"),
            _fmt(share, ".0%"),
            _fmt(r["final_accuracy"], ".2%"),
            _fmt(r["peak_mib"], ",.0f"),
            _fmt(r["cost"], ".4f") if price_per_hour else "-",
        )
        cells.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in values) + "</tr>")
    price = (
        f"${price_per_hour:.2f} per device-hour"
        if price_per_hour
        else "no price given (--price-per-hour)"
    )
    page = f"""<!doctype html><meta charset="utf-8"><title>effkit: cost to target</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}}
td:nth-child(-n+3),th:nth-child(-n+3){{text-align:left}}</style>
<h1>Cost to target</h1>
<p>Seconds to target count every evaluation up to the one that reached it; cost: {html.escape(price)}.
Rows from different devices or profiles are different currencies: compare within a run.</p>
<table><tr>{"".join(f"<th>{c}</th>" for c in COLUMNS)}</tr>{"".join(cells)}</table>
<p><img src="cost_to_target.png" alt="seconds to target per recipe"></p>
<p><img src="accuracy_vs_time.png" alt="accuracy over wall time per recipe"></p>
"""
    path = out / "index.html"
    path.write_text(page)
    return path


def write_plots(table: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(dict.fromkeys(r["run"] for r in table))
    fig, axes = plt.subplots(1, len(runs), figsize=(3.6 * len(runs), 3.4), squeeze=False)
    for ax, run in zip(axes[0], runs, strict=True):
        mine = [r for r in table if r["run"] == run]
        names = [r["recipe"] for r in mine]
        total = [r["seconds_to_target"] or 0.0 for r in mine]
        evals = [r["eval_seconds_to_target"] or 0.0 for r in mine]
        train = [t - e for t, e in zip(total, evals, strict=True)]
        ax.bar(names, train, color="tab:blue", label="training")
        ax.bar(names, evals, bottom=train, color="tab:orange", label="evaluating")
        for i, r in enumerate(mine):
            shown = (
                "not reached"
                if r["seconds_to_target"] is None
                else f"{r['seconds_to_target']:,.1f} s"
            )
            ax.text(i, total[i], shown, ha="center", va="bottom", fontsize=8)
        ax.set(title=f"{run}\n{mine[0]['device']}", ylabel="seconds to target")
        ax.title.set_fontsize(8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    bars = out / "cost_to_target.png"
    fig.savefig(bars, dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(runs), figsize=(3.6 * len(runs), 3.4), squeeze=False)
    for ax, run in zip(axes[0], runs, strict=True):
        for r in (r for r in table if r["run"] == run):
            points = [(p["seconds"], p["accuracy"]) for p in r["history"] if "seconds" in p]
            if points:
                ax.plot(*zip(*points, strict=True), marker=".", label=r["recipe"])
            if r["target"] is not None:
                ax.axhline(r["target"], color="gray", ls="--", lw=0.8)
        ax.set(title=run, xlabel="wall seconds (evaluations included)", ylabel="held-out accuracy")
        ax.title.set_fontsize(8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    curves = out / "accuracy_vs_time.png"
    fig.savefig(curves, dpi=110)
    plt.close(fig)
    return [bars, curves]


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[1].replace("**What it does.** ", "")
    )
    parser.add_argument(
        "paths",
        nargs="*",
        default=["benchmarks/results", "runs"],
        help="result.json files or folders (default: benchmarks/results and runs)",
    )
    parser.add_argument("--out", default="runs/dashboard")
    parser.add_argument("--price-per-hour", type=float, default=None, help="$ per device-hour")
    args = parser.parse_args(argv)
    results = find_results([p for p in args.paths if Path(p).exists()])
    if not results:
        parser.error(
            f"no benchmark result.json under {', '.join(args.paths)}: run python -m effkit.bench first"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = rows(results, args.price_per_hour)
    write_plots(table, out)
    page = write_html(table, out, args.price_per_hour)
    print(f"{len(results)} runs, {len(table)} recipes -> {page}")
    return page


if __name__ == "__main__":
    main()
