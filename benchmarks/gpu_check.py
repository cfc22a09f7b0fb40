"""`make gpu-check`: everything the course claims about a GPU, measured in one command.

    python benchmarks/gpu_check.py --sst2 DIR            # on a CUDA machine (> 30 min on an H100)
    python benchmarks/gpu_check.py --sst2 DIR --only 'bench-cifar|lesson-01' --step-timeout 300
    python benchmarks/gpu_check.py --dry-run --out DIR   # on a CPU, tiny sizes (CI runs this)

Steps, each in its own process with its log, exit code and seconds in ``summary.json``:

1. both workloads' ``gpu`` profile through ``effkit.bench`` (time-to-target with every
   evaluation on the clock, throughput A/B, MFU against the GPU's peak in the precision used);
2. the peer benchmark ``effkit.bench bert --against hf-trainer``;
3. every lesson (``notebooks/*.ipynb``) executed with nbclient under ``EFFKIT_PROFILE=gpu``;
4. every reference solution and the no-faster submission graded (``python -m grader check``);
5. a short ``grader stress`` and ``grader calibrate`` (which sets the GPU targets).

Offline by design (the GPU machine reaches no hub): SST-2 comes from the TSVs passed with
``--sst2``; CIFAR-10 is *synthetic at full size* (50,000 + 10,000 images in the official format),
so its accuracies only show that training works: 94% on real CIFAR-10 cannot be verified
offline; BERT trains from scratch when no local ``bert-base-uncased`` weights exist (the bench
says so). Everything lands in ``benchmarks/results/<device-slug>/``.

Measured on an H100 (``benchmarks/results/nvidia-h100-80gb-hbm3/``): bench-cifar 199 s, lessons 1, 3, 4,
5 and 6 99, 56, 223, 70 and 129 s; bench-bert and lesson 2 each need more than 4 minutes. Under a per-call limit, run
the check in parts with ``--only`` (``summary.json`` keeps the rows of earlier parts).

``--dry-run`` runs the same plan on a CPU at tiny sizes: the benchmark steps for real on tiny
synthetic data, and the lesson / grading / stress / calibrate steps as their command lines'
``--help`` and a notebook read (executing them is minutes each; CI runs them elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def device_slug() -> str:
    import torch

    if not torch.cuda.is_available():
        return "cpu-dry-run"
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip("-")


def plan(out: Path, sst2: Path, cifar: Path, dry: bool) -> list[dict]:
    """The steps: name, argv, extra environment, time limit (s)."""
    profile = "smoke" if dry else "gpu"
    tiny = ["--pairs", "2", "--burst", "0.2", "--quiet"] if dry else ["--quiet"]
    bench = [PY, "-m", "effkit.bench"]
    steps = [
        {"name": "bench-cifar", "argv": bench + ["cifar", "--profile", profile, "--data",
                                                 str(cifar), "--out", str(out / "cifar")] + tiny},
        {"name": "bench-bert", "argv": bench + ["bert", "--profile", profile, "--data", str(sst2),
                                                "--out", str(out / "bert")] + tiny},
        {"name": "peer-hf-trainer", "argv": bench + ["bert", "--against", "hf-trainer",
                                                     "--profile", profile, "--data", str(sst2),
                                                     "--out", str(out / "peer")] + tiny},
    ]
    # Lessons and gradings read data from the effkit cache, not from --data: give them a cache
    # holding the same data (the first GPU run lost two lessons to a download attempt offline).
    cache = {"EFFKIT_DATA": str(lesson_cache(out, sst2, cifar))}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        argv = [PY, "-c", _EXECUTE, str(nb), str(out / "lessons" / nb.name)]
        steps.append({"name": f"lesson-{nb.stem}", "argv": argv + (["--read-only"] if dry else []),
                      "env": {"EFFKIT_PROFILE": "gpu", **cache}})
    # (notebook, assignment): named explicitly, since a submission's file name need not be the
    # assignment's notebook name (no_faster.ipynb is a lesson 2 submission)
    graded = [(nb, nb.parent.name) for nb in sorted((ROOT / "solutions").glob("lesson*/lesson*.ipynb"))]
    graded.append((ROOT / "tests" / "submissions" / "no_faster.ipynb", "lesson2"))
    for nb, assignment in graded:
        name = f"grade-{nb.parent.name}-{nb.stem}"
        argv = [PY, "-m", "grader", "check", str(nb), "--assignment", assignment,
                "--json", str(out / "grading" / f"{name}.json")]
        steps.append({"name": name, "argv": argv, "env": cache})
    steps.append({"name": "grader-stress", "argv": [PY, "-m", "grader", "stress", "--times", "3",
                                                    "--json", str(out / "stress.json")], "env": cache})
    steps.append({"name": "grader-calibrate", "argv": [PY, "-m", "grader", "calibrate", "--pairs",
                                                       "6", "--json", str(out / "calibrate.json")],
                  "env": cache})
    if dry:  # the expensive steps: check their command line parses and their inputs exist
        for s in steps[3:]:
            if s["argv"][1] == "-m":
                s["inputs"] = [a for a in s["argv"] if a.endswith(".ipynb")]
                s["argv"] = s["argv"][:4] + ["--help"]
    return steps


def lesson_cache(out: Path, sst2: Path, cifar: Path) -> Path:
    """An ``EFFKIT_DATA`` folder whose cifar/real and bert/sst2 are links to the check's data."""
    cache = out / "data" / "effkit-cache"
    for link, target in ((cache / "cifar" / "real", cifar), (cache / "bert" / "sst2", sst2)):
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path(target).resolve(), target_is_directory=True)
    return cache


# Executes one notebook with nbclient (kernel from the current environment); --read-only only
# reads and validates it (dry run). Each cell's printed output and seconds are appended to
# DST's ``.outputs.txt`` as soon as the cell finishes, so a step killed at its time limit
# still shows how far it got and where the time went.
_EXECUTE = """
import sys, time, pathlib, nbformat
src, dst = sys.argv[1], pathlib.Path(sys.argv[2])
nb = nbformat.read(src, as_version=4)
nbformat.validate(nb)
if '--read-only' not in sys.argv:
    from nbclient import NotebookClient
    dst.parent.mkdir(parents=True, exist_ok=True)
    log = dst.with_suffix('.outputs.txt').open('w')
    clock = [time.perf_counter()]
    def on_cell_executed(cell, cell_index, **_):
        now = time.perf_counter()
        text = ''.join(o.get('text', '') or o.get('data', {}).get('text/plain', '') + chr(10)
                       for o in cell.get('outputs', []) if o.get('output_type') != 'error')
        log.write(f'--- cell {cell_index} ({now - clock[0]:.1f} s)' + chr(10) + text)
        log.flush(); clock[0] = now
    NotebookClient(nb, timeout=1200, kernel_name='python3', resources={'metadata': {'path': '.'}},
                   on_cell_executed=on_cell_executed).execute()
"""


def run_steps(steps: list[dict], out: Path, step_timeout: float | None = None) -> list[dict]:
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    rows = []
    for s in steps:
        log = logs / f"{s['name']}.log"
        t0 = time.perf_counter()
        print(f"[gpu-check] {s['name']} ...", flush=True)
        with log.open("w") as fh:
            try:
                rc = subprocess.run(s["argv"], cwd=ROOT, env=dict(env, **s.get("env", {})),
                                    stdout=fh, stderr=subprocess.STDOUT,
                                    timeout=step_timeout).returncode
            except subprocess.TimeoutExpired:  # a step over its limit fails; the next one runs
                rc = 124
                fh.write(f"\n[gpu-check] killed after {step_timeout} s\n")
        missing = [p for p in s.get("inputs", []) if not Path(p).is_file()]
        rows.append({"name": s["name"], "rc": rc if not missing else 2, "missing": missing,
                     "seconds": round(time.perf_counter() - t0, 1), "log": str(log)})
        print(f"[gpu-check] {s['name']}: exit {rows[-1]['rc']} in {rows[-1]['seconds']} s",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sst2", type=Path, help="folder with SST-2 train/dev/test.tsv (required on GPU)")
    p.add_argument("--out", type=Path, help="default: benchmarks/results/<device-slug>/")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: check the plan runs")
    p.add_argument("--only", default="", help="run only the steps whose name matches this regex "
                   "(rows of earlier runs stay in summary.json): split the check over several calls")
    p.add_argument("--step-timeout", type=float, default=None, help="seconds per step (exit 124)")
    args = p.parse_args(argv)
    import torch

    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        print("gpu-check: no CUDA device; use --dry-run on a CPU", file=sys.stderr)
        return 2
    out = args.out or ROOT / "benchmarks" / "results" / device_slug()
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    from effkit.workloads.bert.data import make_synthetic_sst2
    from effkit.workloads.cifar.data import has_cifar, make_synthetic_cifar

    cifar = data / ("cifar-tiny" if dry else "cifar-synthetic-full")
    if not has_cifar(cifar):  # full size on a GPU: 50,000 train + 10,000 test images
        make_synthetic_cifar(cifar, *((512, 256) if dry else (50_000, 10_000)), 0)
    if dry:
        sst2 = args.sst2 or make_synthetic_sst2(data / "sst2-tiny", n_train=320, n_eval=128)
    elif args.sst2 is None:
        print("gpu-check: pass --sst2 DIR (real SST-2 TSVs; the GPU machine is offline)",
              file=sys.stderr)
        return 2
    else:
        sst2 = args.sst2
    steps = [s for s in plan(out, Path(sst2), cifar, dry) if re.search(args.only, s["name"])]
    if not steps:
        print(f"gpu-check: no step matches --only {args.only!r}", file=sys.stderr)
        return 2
    rows = run_steps(steps, out, args.step_timeout)
    earlier = out / "summary.json"
    if args.only and earlier.is_file():  # keep the rows of the steps this call did not run
        ran = {r["name"] for r in rows}
        rows = [r for r in json.loads(earlier.read_text())["steps"] if r["name"] not in ran] + rows
    summary = {"device": device_slug(), "dry_run": dry, "steps": rows,
               "cifar_data": "synthetic CIFAR-10 in the official format, "
                             + ("tiny" if dry else "full size (50,000 + 10,000): accuracies only "
                                "show training works; 94% on real CIFAR-10 is not verified"),
               "sst2": str(sst2), "failed": [r["name"] for r in rows if r["rc"] != 0]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"[gpu-check] {len(rows) - len(summary['failed'])}/{len(rows)} steps passed; "
          f"results in {out}", flush=True)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
