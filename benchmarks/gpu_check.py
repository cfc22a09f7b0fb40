"""`make gpu-check` / `make gpu-check-lessons`: everything the course claims about a GPU, measured.

    python benchmarks/gpu_check.py --sst2 DIR                  # suite "check", every part in turn
    python benchmarks/gpu_check.py --sst2 DIR --part 2         # one part (<= 9 min planned): one call
    python benchmarks/gpu_check.py --sst2 DIR --suite lessons  # every lesson under EFFKIT_PROFILE=gpu
    python benchmarks/gpu_check.py --list                      # the parts, their steps and plans
    python benchmarks/gpu_check.py --dry-run --out DIR         # on a CPU, tiny sizes (CI runs this)

Suite ``check`` (``make gpu-check``, ``make gpu-check-N``): both workloads' ``gpu`` profile through
``effkit.bench`` (time-to-target with every evaluation on the clock, throughput A/B, MFU), the peer
benchmark ``effkit.bench bert --against hf-trainer``, ``grader calibrate`` of each timed assignment
(saves its GPU gate), and ``python -m grader check`` on every reference solution (full marks),
every untouched stub (0) and the no-faster submission (no speed points). Suite ``lessons``
(``make gpu-check-lessons``, ``make gpu-check-lessons-N``): every ``notebooks/*.ipynb`` executed
with nbclient. Each step runs in its own process with its log; ``summary.json`` and a table in
``README.md`` (both under ``benchmarks/results/<device-slug>/``) hold its exit code, seconds
against its plan and, for a grading, its points against what it must score. The split into
parts and the plan per step: ``gpu_check_plan.py``.

Offline by design (the GPU machine reaches no hub): SST-2 comes from the TSVs passed with
``--sst2``; CIFAR-10 is *synthetic at full size* (50,000 + 10,000 images in the official format),
the *hard* variant (``effkit.workloads.cifar.hard``: on the easy one every recipe ends near its
ceiling within an epoch, so no accuracy check could fail), but still not CIFAR-10: 94% on
real CIFAR-10 cannot be verified offline; BERT fine-tunes the packaged encoder when no local
``bert-base-uncased`` exists.

``--dry-run`` runs the same steps through the same code on a CPU at tiny sizes (see
``gpu_check_plan``): a grading that writes its report, a calibration, a lesson execution.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the plan and report beside this file
import gpu_check_plan  # noqa: E402
import gpu_check_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIN_STEP_S = 20  # under --deadline, a step is not started with less time than this left


def device_slug() -> str:
    import torch

    if not torch.cuda.is_available():
        return "cpu-dry-run"
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip("-")


def plan(out: Path, sst2: Path, cifar: Path, dry: bool) -> list[dict]:
    """Every step of both suites in plan order (``gpu_check_plan.steps``), with its part."""
    steps = gpu_check_plan.steps(out, sst2, cifar, lesson_cache(out, sst2, cifar), dry)
    for suite in ("check", "lessons"):
        for i, part in enumerate(gpu_check_plan.parts(steps, suite), 1):
            for step in part:
                step["part"] = i
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


def run_steps(
    steps: list[dict], out: Path, step_timeout: float | None = None, deadline: float | None = None
) -> list[dict]:
    """Run ``steps`` (one part, or any selection) in order. A step's limit is ``step_timeout``,
    else what the part has left of PART_S after the plans of the steps still to come (never less
    than its own plan), and never past ``deadline`` (a ``time.perf_counter()`` instant): a step
    that would start with under ``MIN_STEP_S`` left is not run, so a lease's last call still ends
    with its summary written."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    )
    rows, start = [], time.perf_counter()
    for i, s in enumerate(steps):
        log = logs / f"{s['name']}.log"
        t0 = time.perf_counter()
        later = sum(x["planned_s"] for x in steps[i + 1 :])
        limit = step_timeout or max(s["planned_s"], gpu_check_plan.PART_S - (t0 - start) - later)
        if deadline is not None:
            if deadline - t0 < MIN_STEP_S:
                print(
                    f"[gpu-check] deadline: {len(steps) - i} step(s) not run: "
                    + ", ".join(x["name"] for x in steps[i:]),
                    flush=True,
                )
                break
            limit = min(limit, deadline - t0)
        print(
            f"[gpu-check] {s['name']} (plan {s['planned_s']} s, limit {limit:.0f} s) ...",
            flush=True,
        )
        if "--json" in s["argv"]:  # an earlier run's report must not stand in for this one's
            Path(s["argv"][s["argv"].index("--json") + 1]).unlink(missing_ok=True)
        with log.open("w") as fh:
            try:
                rc = subprocess.run(
                    s["argv"],
                    cwd=ROOT,
                    env=dict(env, **s.get("env", {})),
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    timeout=limit,
                ).returncode
            except subprocess.TimeoutExpired:  # a step over its limit fails; the next one runs
                rc = 124
                fh.write(f"\n[gpu-check] killed after {limit:.0f} s\n")
        row = {
            "name": s["name"],
            "suite": s["suite"],
            "part": s["part"],
            "rc": rc,
            "seconds": round(time.perf_counter() - t0, 1),
            "planned_s": s["planned_s"],
            "limit_s": round(limit),
            "log": str(log.relative_to(out)),
        }
        if "expect" in s:
            report = Path(s["argv"][s["argv"].index("--json") + 1])
            row |= gpu_check_report.grading_verdict(s, report)
        rows.append(row)
        print(
            f"[gpu-check] {s['name']}: exit {rc} in {row['seconds']} s"
            + (f"; {row['verdict']}" if "verdict" in row else ""),
            flush=True,
        )
    return rows


def list_parts(steps: list[dict]) -> None:
    for suite in ("check", "lessons"):
        cut = gpu_check_plan.parts(steps, suite)
        total = sum(s["planned_s"] for part in cut for s in part)
        print(f"suite {suite}: {len(cut)} parts, planned {total / 60:.1f} min on one H100")
        for i, part in enumerate(cut, 1):
            print(
                f"  part {i} ({sum(s['planned_s'] for s in part)} s): "
                + ", ".join(f"{s['name']} {s['planned_s']}" for s in part)
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--sst2", type=Path, help="folder with SST-2 train/dev/test.tsv (required on GPU)"
    )
    p.add_argument("--out", type=Path, help="default: benchmarks/results/<device-slug>/")
    p.add_argument(
        "--dry-run", action="store_true", help="CPU, tiny sizes: the same steps, same code"
    )
    p.add_argument(
        "--rehearse",
        action="store_true",
        help="CPU, the gpu spec's sizes, a few steps (benchmarks/gpu_rehearsal.py)",
    )
    p.add_argument("--suite", choices=("check", "lessons", "all"), default="check")
    p.add_argument("--part", type=int, help="run only this part of the suite (<= 9 min planned)")
    p.add_argument(
        "--list", action="store_true", help="print the parts and their plans, run nothing"
    )
    p.add_argument("--only", default="", help="run only the steps whose name matches this regex")
    p.add_argument(
        "--step-timeout",
        type=float,
        default=None,
        help="seconds per step (exit 124); default: what the part has left",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds from now after which no "
        "step runs (a running one is stopped): the summary is still written",
    )
    args = p.parse_args(argv)
    deadline = None if args.deadline is None else time.perf_counter() + args.deadline
    import torch

    dry = args.dry_run
    if args.rehearse:  # the gpu spec's sizes on the CPU, in fresh processes like every other step
        return subprocess.call([sys.executable, str(ROOT / "benchmarks" / "gpu_rehearsal.py")])
    if args.list:
        tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "gpu-check-list"
        list_parts(plan(tmp, tmp / "sst2", tmp / "cifar", dry=False))
        return 0
    if not dry and not torch.cuda.is_available():
        print("gpu-check: no CUDA device; use --dry-run on a CPU", file=sys.stderr)
        return 2
    out = args.out or ROOT / "benchmarks" / "results" / device_slug()
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    from effkit.workloads.bert.data import make_synthetic_sst2
    from effkit.workloads.cifar.data import has_cifar, make_synthetic_cifar

    # Tiny (dry run): the easy set the smoke profile is calibrated on. Full size: the hard set, in
    # its own folder so that an easy set cached by an older gpu-check is not reused.
    cifar = data / ("cifar-tiny" if dry else "cifar-synthetic-full-hard")
    if dry:
        sst2 = args.sst2 or make_synthetic_sst2(data / "sst2-tiny", n_train=320, n_eval=128)
    elif args.sst2 is None:
        print(
            "gpu-check: pass --sst2 DIR (real SST-2 TSVs; the GPU machine is offline)",
            file=sys.stderr,
        )
        return 2
    else:
        sst2 = args.sst2
    steps = plan(out, Path(sst2), cifar, dry)
    chosen = [
        s
        for s in steps
        if args.suite in ("all", s["suite"])
        and (args.part is None or s["part"] == args.part)
        and re.search(args.only, s["name"])
    ]
    if not chosen:
        print(
            f"gpu-check: no step in suite {args.suite!r} part {args.part} matches "
            f"--only {args.only!r}",
            file=sys.stderr,
        )
        return 2
    if not has_cifar(cifar) and any(
        s["name"] == "bench-cifar"
        or s["suite"] == "lessons"
        or s["name"].startswith(("grade-", "calibrate-"))
        for s in chosen
    ):
        sizes = (512, 256) if dry else (50_000, 10_000)
        make_synthetic_cifar(cifar, *sizes, 0, difficulty="easy" if dry else "hard")
    rows = []
    for suite in ("check", "lessons"):  # part by part: each part's limits count from its start
        for part in sorted({s["part"] for s in chosen if s["suite"] == suite}):
            rows += run_steps(
                [s for s in chosen if (s["suite"], s["part"]) == (suite, part)],
                out,
                args.step_timeout,
                deadline,
            )
    meta = {
        "device": device_slug(),
        "torch": torch.__version__,
        "dry_run": dry,
        "sst2": str(sst2),
        "outside_declared": gpu_check_report.outside_declared(ROOT / "pyproject.toml"),
        "cifar_data": "synthetic CIFAR-10 in the official format, "
        + (
            "tiny"
            if dry
            else "full size (50,000 + 10,000), the hard variant: "
            "94% on real CIFAR-10 is not verified"
        ),
    }
    summary = gpu_check_report.summarise(out, rows, meta)
    print(
        f"[gpu-check] {len(summary['steps']) - len(summary['failed'])}/{len(summary['steps'])} "
        f"steps passed; results in {out}",
        flush=True,
    )
    return 1 if any(r["name"] in summary["failed"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
