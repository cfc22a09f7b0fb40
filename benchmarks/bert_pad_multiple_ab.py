"""The optimized BERT recipe against itself: batch widths exact vs rounded up to a multiple of 8.

Usage: ``python benchmarks/bert_pad_multiple_ab.py --data ../shared/data/sst2 [--profile cpu] [--pairs 9]
[--steps 15] [--out FILE.json]``

Why: lesson 7 measured exact widths faster than rounding on a CPU (bucketed batches are narrow, so the
rounding triples their padding), and the recipe now pads exact widths on a CPU (``default_pad_multiple``).
This measures that choice in the recipe itself, not in the lesson's set-up: two trainers from the same seed
see the same rows in the same order (only the widths differ), bursts of ``--steps`` steps alternate ABBA
after a warm-up pair, and the ratio is the median of per-pair ratios with an order-statistic interval whose
real coverage is printed (``effkit.abtest``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from effkit.abtest import ab_result, speed_pairs, verdict  # noqa: E402
from effkit.measure import device_name  # noqa: E402
from effkit.workloads.bert import recipes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="folder with SST-2's train/dev/test files")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--steps", type=int, default=15, help="steps per timed burst")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    build = lambda multiple: recipes.build(  # noqa: E731
        "optimized", args.profile, data_dir=args.data, device=args.device, pad_multiple=multiple
    )
    rounded, exact = build(8), build(1)
    pairs = speed_pairs(
        lambda: rounded.train_steps(args.steps).samples,
        lambda: exact.train_steps(args.steps).samples,
        device=args.device,
    )
    speeds = []
    for i, pair in enumerate(itertools.islice(pairs, args.pairs)):
        speeds.append(pair)
        print(f"pair {i + 1}: /8 {pair[0]:.0f}, exact {pair[1]:.0f} samples/s", flush=True)
    result = ab_result([a for a, _ in speeds], [b for _, b in speeds], 0.95, seconds=0.0)
    said = verdict(result, "widths rounded to 8", "exact widths")
    device = device_name(args.device)
    print(f"{device}: {said}")
    if args.out:
        summary = {
            "device": device,
            "profile": args.profile,
            "mean_padded_length": {
                "rounded to 8": rounded.settings["mean_padded_length"],
                "exact": exact.settings["mean_padded_length"],
            },
            "ratio_exact_over_rounded": result.ratio,
            "interval": [result.ci_low, result.ci_high],
            "real_coverage": result.coverage,
            "pairs": result.pairs,
            "samples_per_s": {"rounded to 8": result.a_speeds, "exact": result.b_speeds},
            "verdict": str(said),
            "load_average_after": os.getloadavg(),
            "command": "python " + " ".join(sys.argv),
        }
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
