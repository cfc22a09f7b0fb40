"""The bottleneck doctor: profile a few training steps, then name the next bottleneck with evidence.

`diagnose` is a pure function of :func:`effkit.profiling.profile_training`'s plain data: each rule reads
measured figures and every finding carries its evidence, an estimate of what its fix saves (a share of the
profiled step, for ranking), the fix and the lesson that shows it (none where no lesson does). ``python -m effkit.doctor cifar:naive`` profiles a course recipe; ``--validate`` plants
bottlenecks (:mod:`effkit.doctor_plants`) and prints the confusion table. Profile on a quiet core: per-call
times depend on the host, and a "none" under load is not evidence.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

from effkit import doctor_plants, profiling

# thresholds: a share of the profiled step time unless said otherwise; calibrated with --validate
DATA_SHARE = 0.25  # time waiting for the next batch
SYNCS_PER_STEP = 1.5  # more than the one loss.item() a logger may allow itself
# the work's matmul/conv calls within the profile's overhead_calls times the host's own cost of a call doing almost
# nothing (the profile's matmul_us_floor, measured beside the steps) are mostly fixed cost: dispatch, launch. The line
# is calibrated per class of kernels (effkit.profiling.overhead_line: 7x, 16x for bf16 on AVX512-BF16 without AMX)
# and holds as on hosts with twice or half the call overhead and 2x faster or slower kernels where the floor is the
# calls' fixed cost (tests/test_doctor.py). A line in µs belongs to one CPU: 40 µs, set on an AMX Xeon, read a clean
# step as overhead-bound on an AVX512 EPYC whose kernels are faster (benchmarks/results/doctor-calibration.md)
OVERHEAD_CALLS = profiling.OVERHEAD_CALLS  # the common line (overhead_line gives a class's own)
OVERHEAD_OPS = 50  # operators dispatched per step
MATMUL_SHARE = 0.3  # matmul/conv self time in fp32 on bf16 hardware
PADDING_SHARE = 0.3  # padded positions of the batches
# optimizer range, with a per-tensor loop (foreach/fused off): 12%, between lesson 10's planted loop (32.5% at least
# on its decoy's 256-token rows, AMX Xeon 2026-12-06) and its decoy (5.7% at most), 2.7x and 2.1x away. 8% (set for
# an older plant at 11.4%) sat 1.4x over the decoy: a CI host read the decoy as "optimizer" on a simulated host with
# 2x faster kernels, where it rises to 4.9-7.1% here and the plant at 2x slower falls to 22% (tests/other_host.py;
# benchmarks/results/lesson10-diagnose-optimizer-table-xeon-amx-2c.txt)
OPTIMIZER_SHARE = 0.12
OPTIMIZER_TENSORS = 8  # below this many parameter tensors a foreach kernel has little to batch
OPTIMIZER_OPS_PER_TENSOR = 4  # operators per parameter tensor: the loop's measured signature
MEMORY_SHARE = 0.85  # peak memory of the limit given
LABELS = ("data", "sync", "overhead", "precision", "padding", "optimizer", "memory", "none")


@dataclass
class Finding:
    label: str  # one of LABELS
    title: str
    # what the evidence costs, as a share of the *profiled* step: an estimate for ranking, not a bound. The
    # profiler slows a range of many small operators more than one of Python (the data range), and a fix can
    # remove more than its evidence counts (the NaN checks' own operators beside the syncs): lesson 10 prints both
    share: float
    evidence: str
    fix: str
    lesson: int | None  # the lesson that shows the fix; None where no lesson does

    def line(self) -> str:
        shown = f" (lesson {self.lesson})" if self.lesson else ""
        return (
            f"[{self.label}] {self.title} — evidence: {self.evidence}; fix: {self.fix}{shown}; "
            f"about {self.share:.0%} of the profiled step"
        )


def _get(p: dict, key: str, default=0.0):
    value = p.get(key, default)
    return default if value is None else value


def diagnose(profile: dict) -> list[Finding]:
    """Ranked findings for one profile (plain data from ``profile_training``); pure, no torch."""
    step = max(float(_get(profile, "step_ms")), 1e-9)
    ranges = profile.get("ranges_ms") or {}
    found: list[Finding] = []

    data = float(ranges.get("data", 0.0)) / step
    if data >= DATA_SHARE:
        found.append(
            Finding(
                "data",
                "data-bound: the step waits for its input",
                data,
                f"{data:.0%} of the step is in the data range ({ranges.get('data', 0):.1f} ms "
                f"of {step:.1f} ms)",
                "overlap loading with compute: DataLoader workers + pin_memory + prefetch, "
                "or batched augmentation on the device",
                2,
            )
        )

    syncs = float(_get(profile, "syncs_per_step"))
    if syncs >= SYNCS_PER_STEP:
        sync_ms = float(_get(profile, "sync_ms"))
        found.append(
            Finding(
                "sync",
                "host-device synchronisation inside the step",
                sync_ms / step,
                f"{syncs:.0f} device-to-host reads per step (.item(), bool(tensor), .tolist()), "
                f"{sync_ms:.2f} ms inside them, not their whole cost: on an accelerator each drains its "
                "queue and the device idles until the host queues more, and work done only to be read (a "
                "NaN check) is booked to its own operators, so the share below, the time inside the reads, "
                "can rank this finding too low: time the step without them to know",
                "keep metrics on the device and read them every N steps",
                None,
            )
        )

    ops, matmul = float(_get(profile, "ops_per_step")), float(_get(profile, "matmul_ms")) / step
    # the calls that do the work (time-weighted median), not the typical call: profiles saved before it existed
    # fall back to the plain median
    per_call = profile.get("matmul_us_work", profile.get("matmul_us_median"))
    per_call = float("inf") if per_call is None else float(per_call)
    floor = profile.get("matmul_us_floor")
    if floor is None or not float(floor) > 0:
        raise ValueError(
            "this profile has no matmul_us_floor (the host's fixed cost of a matmul call, measured beside "
            "the steps): profile again with effkit.profiling.profile_training; a fixed µs line would judge "
            "it by another machine's speed"
        )
    calls = per_call / float(floor)
    # a small matmul share alone is no evidence: the rest may be elementwise work (the clean step on a CPU
    # whose matmul kernels were 4x faster would spend 7% of it in matmuls), and a busy core dilutes shares
    line = profile.get("overhead_calls") or profiling.overhead_line(
        profile.get("compute_dtype"), profile.get("cpu_isa")
    )
    if calls < float(line) and ops >= OVERHEAD_OPS and data < DATA_SHARE:
        found.append(
            Finding(
                "overhead",
                "launch/overhead-bound: many small operators",
                max(0.0, 1.0 - matmul - data),
                f"{ops:.0f} operators per step; the matmuls/convolutions that do the work take "
                f"{per_call:.0f} µs per call (half their time in calls this short or shorter), "
                f"{calls:.1f}x this host's {float(floor):.1f} µs for a call that does almost nothing "
                f"(under {float(line):g}x, this class's line), "
                f"and {matmul:.0%} of the step (batch "
                f"{profile.get('batch_size')}): fixed per-operator costs rule",
                "fused or compiled operators (torch.compile: lesson 10, section 3), or a bigger batch, "
                "accumulating if memory says no",
                4,
            )
        )

    dtype = str(profile.get("compute_dtype", ""))
    if profile.get("bf16_hardware") and dtype == "float32" and matmul >= MATMUL_SHARE:
        found.append(
            Finding(
                "precision",
                "fp32 on hardware with bf16 units",
                matmul / 2,
                f"matmul/conv take {matmul:.0%} of the step in float32 on a device with bf16 units "
                "(lesson 3 measures bf16 autocast on BERT steps and wide Linears; whether it pays on this "
                "device is an A/B's to say)",
                "bf16 autocast",
                3,
            )
        )

    padding = profile.get("padding_share")
    if padding is not None and float(padding) >= PADDING_SHARE:
        compute = (float(ranges.get("forward", 0)) + float(ranges.get("backward", 0))) / step
        found.append(
            Finding(
                "padding",
                "padding waste",
                float(padding) * compute,
                f"{float(padding):.0%} of the token positions are padding; forward + backward "
                f"are {compute:.0%} of the step",
                "pad per batch and bucket by length",
                7,
            )
        )

    opt = profile.get("optimizer") or {}
    opt_share = float(ranges.get("optimizer", 0.0)) / step
    tensors = int(opt.get("param_tensors") or 0)
    opt_ops = float((profile.get("ops_per_step_by_range") or {}).get("optimizer", 0.0))
    looped = not opt.get("foreach") and not opt.get("fused") and tensors >= OPTIMIZER_TENSORS
    if looped and opt_ops >= OPTIMIZER_OPS_PER_TENSOR * tensors and opt_share >= OPTIMIZER_SHARE:
        found.append(
            Finding(
                "optimizer",
                "per-tensor optimizer loop",
                opt_share / 2,
                f"{opt.get('name', 'the optimizer')} runs {opt_ops:.0f} operators per step over "
                f"{tensors} parameter tensors, one tensor at a time (foreach and fused off), "
                f"{opt_share:.0%} of the step; on a GPU each operator is a kernel launch",
                "build the optimizer with fused=True where supported (in lesson 10's measurement on a CPU "
                "the fused kernel paid and foreach barely did), else foreach=True",
                None,
            )
        )

    peak, limit = profile.get("memory_peak_bytes"), profile.get("memory_limit_bytes")
    if peak and limit and float(peak) / float(limit) >= MEMORY_SHARE:
        found.append(
            Finding(
                "memory",
                "activation memory near the limit",
                0.0,
                f"peak {float(peak) / 2**30:.2f} GiB of {float(limit) / 2**30:.2f} GiB",
                "activation checkpointing to fit a bigger batch",
                5,
            )
        )

    found.sort(key=lambda f: f.share, reverse=True)
    if not found:
        found.append(
            Finding(
                "none",
                "no clear bottleneck",
                0.0,
                f"data {data:.0%}, optimizer {opt_share:.0%}, matmul/conv {matmul:.0%}, "
                f"{syncs:.0f} syncs per step: no rule passes its threshold",
                "no rule fired, which is not proof the step is compute-bound: read the top operators, "
                "then consider a smaller model or fewer steps",
                1,
            )
        )
    return found


def overhead_note(profile: dict) -> str:
    """The profiled / unprofiled ratio as an overhead ("x1.25"), or, where the profiled steps ran faster
    (a cost cannot be negative), that the profiler's cost was below this machine's noise."""
    overhead = float(_get(profile, "profiler_overhead", 0))
    inverted = profile.get("profiler_overhead_inverted")
    if inverted is None:  # profiles saved before the flag existed
        inverted = 0 < overhead < 1
    if inverted:
        return (
            "faster than unprofiled: the profiler's cost was below this machine's noise, "
            "no overhead to read here"
        )
    return f"x{overhead:.2f}"


def report(profile: dict) -> str:
    """The profile's headline figures and the ranked findings, as text."""
    r = profile.get("ranges_ms") or {}
    split = ", ".join(f"{k} {v:.1f}" for k, v in r.items())
    batch, step_ms = profile.get("batch_size"), _get(profile, "step_ms_unprofiled")
    rate = f" = {float(batch) / step_ms * 1e3:,.0f} samples/s" if batch and step_ms else ""
    head = (
        f"{profile.get('name', 'step')} (batch {batch}): {step_ms:.1f} ms per step unprofiled{rate}, "
        f"{_get(profile, 'step_ms'):.1f} ms profiled ({overhead_note(profile)}); ranges (ms) {split}"
    )
    return "\n".join([head] + [f"  {i}. {f.line()}" for i, f in enumerate(diagnose(profile), 1)])


def validate(quick: bool = False) -> dict:
    """Planted versus diagnosed: each plant alone, the clean step, then (unless ``quick``) pairs and
    the optimized CIFAR recipe. A case is right when the doctor's first finding is one of the plants
    (or "none" when nothing was planted); ``found_all`` also asks every plant to be found."""
    cases = [("plant:clean", ())] + [(f"plant:{p}", (p,)) for p in doctor_plants.plants_here()]
    if not quick:
        # the course's own recipes: optimized ones must be clean; naive BERT pads every row to 128
        # tokens (lesson 7's fix), its one pathology on a CPU without bf16 units
        cases += [(f"plant:{a}+{b}", (a, b)) for a, b in doctor_plants.PAIRS] + [
            ("cifar:optimized", ()),
            ("bert:naive", ("padding",)),
            ("bert:optimized", ()),
        ]
    rows = []
    for name, planted in cases:
        profile = doctor_plants.profile_named(name)
        findings = diagnose(profile)
        labels = [f.label for f in findings]
        expected = set(planted) or {"none"}
        rows.append(
            {
                "case": name,
                "planted": sorted(expected),
                "first": labels[0],
                "all": labels,
                "right": labels[0] in expected,
                "found_all": expected <= set(labels),
                "step_ms": round(profile["step_ms_unprofiled"], 2),
            }
        )
    return {
        "rows": rows,
        "correct": sum(r["right"] for r in rows),
        "total": len(rows),
        "found_all": sum(r["found_all"] for r in rows),
    }


def format_table(table: dict) -> str:
    """The confusion table (planted rows x first-finding columns) and the per-case list, as Markdown."""
    labels = sorted({x for r in table["rows"] for x in r["planted"] + [r["first"]]})
    counts: dict[tuple[str, str], int] = {}
    for r in table["rows"]:
        key = ("+".join(r["planted"]), r["first"])
        counts[key] = counts.get(key, 0) + 1
    planted = list(dict.fromkeys("+".join(r["planted"]) for r in table["rows"]))
    lines = [
        "| planted \\ first finding | " + " | ".join(labels) + " |",
        "|---" * (len(labels) + 1) + "|",
    ]
    for p in planted:
        lines.append(f"| {p} | " + " | ".join(str(counts.get((p, c), "")) for c in labels) + " |")
    lines += [
        "",
        "| case | step ms (unprofiled) | findings, ranked | first right | all planted found |",
        "|---|---|---|---|---|",
    ]
    for r in table["rows"]:
        lines.append(
            f"| {r['case']} | {r['step_ms']} | {', '.join(r['all'])} | {'yes' if r['right'] else 'NO'} | "
            f"{'yes' if r['found_all'] else 'no'} |"
        )
    lines.append(
        f"\nfirst finding right in {table['correct']} of {table['total']} cases; every plant found in "
        f"{table['found_all']} of {table['total']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m effkit.doctor", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "recipes", nargs="*", help="e.g. cifar:naive cifar:optimized, or a planted case: plant:data"
    )
    ap.add_argument(
        "--validate", action="store_true", help="plant pathologies and print the confusion table"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="with --validate: single plants only (the unit test's run)",
    )
    ap.add_argument("--json", help="write the profiles (plain data) to this file")
    args = ap.parse_args(argv)
    if args.validate:
        table = validate(quick=args.quick)
        print(format_table(table))
        return 0 if table["correct"] == table["total"] else 1
    profiles = []
    for name in args.recipes or ["cifar:naive", "cifar:optimized"]:
        profile = doctor_plants.profile_named(name)
        profiles.append(profile)
        print(report(profile), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(profiles, f, indent=1)
    return 0


def to_plain(findings: list[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]


if __name__ == "__main__":
    raise SystemExit(main())
