"""From a measurement to points: speed credit, accuracy gate, feedback block and JSON report.

``grade`` runs the correctness gate and the timed protocol, then decides: no performance points
when the learner's code raised, timed out, diverged, failed the audit or the work check, reused
the reference answer, or failed the accuracy gate; otherwise the speed credit of
:mod:`grader.scoring.targets`. :class:`GradingError` means the grader itself could not run (the
baseline failed): report it as such, never as zero points.
"""

from __future__ import annotations

import datetime as dt
import importlib
import re
import statistics
from dataclasses import asdict, dataclass

from effkit.measure import device_name
from grader.common.device import default_device
from grader.scoring.checks import gate_problem
from grader.scoring.report import PerformanceReport
from grader.scoring.targets import NO_NATIVE_BF16, Target, target_for
from grader.timed import gate as gates
from grader.timed.protocol import Measurement, WorkerFailed, measure

FALLBACK_SD_PAIR_PP = 1.0  # used (and flagged) when no calibration exists for a device class


class GradingError(RuntimeError):
    """The grader itself could not run (not the learner's fault)."""


@dataclass
class PerfResult:
    points: float
    max_points: float
    feedback: str
    report: PerformanceReport


def load_gate(
    assignment_id: str, spec, table: str, device: str | None = None
) -> tuple[gates.Gate, str, list[str]]:
    """The gate for the targets row ``table`` (device class, or ``cpu-fp32``: see
    :func:`grader.scoring.targets.table_for`). ``cpu-fp32`` falls back to the ``cpu`` calibration when it
    has none of its own (said in the report): its noise was measured with bf16 on a CPU that has
    it, a wider gate than fp32's on one without.

    A calibration measured on another device model (``device``, e.g. an AMX Xeon's, used on an
    EPYC) says nothing about this one's noise: reduced-precision kernels differ between CPUs, so
    a recipe that matched fp32 to the last example on one can differ by several examples on the
    other. Its per-pair SD is then widened to at least :data:`FALLBACK_SD_PAIR_PP` (flagged), so
    correct work is never failed on noise the calibration never saw."""
    name = f"{assignment_id}-{spec.calibration_name}-{table}"
    notes = []
    if table == NO_NATIVE_BF16 and not (gates.calibration_dir(name) / f"{name}.json").is_file():
        fallback = f"{assignment_id}-{spec.calibration_name}-cpu"
        notes.append(
            f"the accuracy gate has no calibration {name} (a CPU without native bf16); using {fallback}"
        )
        name = fallback
    try:
        cal = gates.Calibration.load(name)
        if (
            device is not None
            and _model(cal.device) != _model(device)
            and cal.sd_pair_pp < FALLBACK_SD_PAIR_PP
        ):
            notes.append(
                f"the accuracy gate's calibration {name} was measured on {cal.device}, not this "
                f"{device}: its per-pair SD {cal.sd_pair_pp:.2f} pp widened to {FALLBACK_SD_PAIR_PP} pp "
                "(instructors: python -m grader calibrate on this machine)"
            )
            return gates.Gate(spec.repeats, FALLBACK_SD_PAIR_PP), f"{name} (widened)", notes
        return gates.Gate.from_calibration(spec.repeats, cal), name, notes
    except FileNotFoundError:
        note = (
            f"the accuracy gate is not calibrated for {name}; using a conservative "
            f"{FALLBACK_SD_PAIR_PP} pp per-pair SD (instructors: python -m grader calibrate)"
        )
        return gates.Gate(spec.repeats, FALLBACK_SD_PAIR_PP), "fallback", [*notes, note]


def _model(device: str) -> str:
    """The device's model, without effkit.measure.device_name's thread count: accuracy noise
    depends on the kernels a model runs, not on how many threads run them."""
    return re.sub(r" \(\d+ threads?\)$", "", device)


def grade(
    assignment,
    cells: list[tuple[str, str]],
    max_points: float,
    *,
    device: str | None = None,
    spec_name: str | None = None,
    progress=print,
    gate_verdicts: dict | None = None,
) -> PerfResult:
    device = device or default_device()
    if assignment.performance_grader:  # the lesson scores its own way, on the same protocol
        custom = importlib.import_module(assignment.performance_grader)
        return custom.grade(
            assignment,
            cells,
            max_points,
            device=device,
            spec_name=spec_name,
            progress=progress,
            gate_verdicts=gate_verdicts,
        )
    name = device_name(device)
    target = target_for(assignment, name)
    spec = assignment.spec(device, spec_name)
    gate, calibration, notes = load_gate(
        assignment.id, spec, target.table or target.device_class, name
    )
    progress(f"Measuring on {name}: baseline vs your code, {spec.repeats} paired runs ...")
    if not cells:
        m = Measurement(device=name, spec=spec)
        m.problems.append(
            f"no solution cell found: keep the cell that defines {assignment.object_name} "
            "(with its nbgrader metadata) in the notebook"
        )
    else:
        try:
            m = measure(
                assignment,
                cells,
                spec,
                device,
                progress=progress,
                correctness=lambda: gate_problem(assignment, cells, gate_verdicts),
                second_look=gate.needs_second_look,
                speed_look=lambda ratios: speed_inconclusive(ratios, target.target),
            )
        except WorkerFailed as err:
            what = (
                "the grader could not run"
                if err.role == "grader"
                else "the grader could not run the baseline"
            )
            raise GradingError(f"{what}: {err}\n{err.detail}".rstrip()) from err
    m.device = name
    return decide(m, target, gate, max_points, calibration, notes, assignment.id)


def speed_inconclusive(ratios: list[float], target: float) -> bool:
    """A median below the target with chunk pairs at or above it: worth a second look."""
    return bool(ratios) and statistics.median(ratios) < target <= max(ratios)


def decide(
    m: Measurement,
    target: Target,
    gate: gates.Gate,
    max_points: float,
    calibration: str,
    notes: list[str],
    assignment_id: str,
) -> PerfResult:
    reasons = list(m.problems)
    if m.error is not None:
        reasons.insert(0, str(m.error))
    stub = (m.error is not None and str(m.error).startswith("NotImplementedError")) or any(
        "NotImplementedError" in p for p in m.problems
    )  # the released stub, untouched (the speed gate says so)
    if stub:
        reasons.insert(
            0,
            "no performance points: your solution cells still raise NotImplementedError "
            "- replace each `raise NotImplementedError()` stub with your code",
        )
    diffs = m.accuracy_diffs_pp()
    verdict = gate.decide(diffs) if diffs else None
    speedup = m.speedup()
    credit = 0.0
    if not reasons and verdict is not None:
        if not verdict.passed:
            reasons.append("no performance points: " + verdict.message)
        # what the parent found wrong with the timed work is said whatever the accuracy did:
        # a step on part of each batch also costs accuracy, and the replay names the cause
        reasons += m.work_problems
        if verdict.passed and not m.work_problems:
            credit = target.credit(speedup)
    flags = list(m.flags) + notes
    if verdict is not None and verdict.suspiciously_high:
        flags.append(
            f"your accuracy is {verdict.mean_diff_pp:+.2f} pp above the baseline: not penalised, "
            "but unusual for a pipeline change - check you did not change the training"
        )
    points = round(credit * max_points, 2)
    # the one writer of a performance report: typed and validated here, read as attributes
    report = PerformanceReport.model_validate(
        {
            "assignment": assignment_id,
            "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": m.device,
            "device_class": target.device_class,
            "spec": asdict(m.spec),
            "target": target.to_dict(),
            "runs": [asdict(t) | {"samples_per_s": t.samples / t.seconds} for t in m.runs],
            "warmup_s": m.warmup_s,
            "speed_ratios": m.speed_ratios(),
            "speedup": speedup if m.pairs() else None,
            "accuracy_diffs_pp": diffs,
            "gate": verdict.to_dict() if verdict else None,
            "gate_calibration": calibration,
            "credit": credit,
            "points": points,
            "max_points": max_points,
            "problems": reasons,
            "flags": flags,
            "error": (
                {"kind": m.error.kind, "message": str(m.error), "detail": m.error.detail}
                if m.error
                else None
            ),
            "phases_s": m.phases_s,
            "work_checks": m.work_checks,
            "work_problems": m.work_problems,
        }
    )
    return PerfResult(points, max_points, feedback_text(report), report)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def feedback_text(r: PerformanceReport) -> str:
    t = r.target
    lines = [
        f"== effkit grader: {r.assignment} performance ==",
        f"device     {r.device}  (class {r.device_class})",
    ]
    spec = r.spec
    pairs = sum(x.role == "baseline" for x in r.runs)
    for_speed = any(f.startswith("a second look for speed") for f in r.flags)
    second = (
        f" (+{pairs - spec.repeats} on fresh data: "
        + ("a second look for speed, scored alone)" if for_speed else "the gate's second look)")
        if pairs > spec.repeats
        else ""
    )
    lines.append(
        f"protocol   {spec.repeats} paired runs{second} of {spec.epochs} epochs x "
        f"{spec.n_train} samples of the grader's own data, {spec.chunks_per_epoch} chunks per epoch "
        "interleaved ABBA; warm-up excluded; timed by the grader"
    )
    for role, label in (("baseline", "baseline"), ("learner", "yours")):
        runs = [x for x in r.runs if x.role == role]
        if runs:
            secs = [x.seconds for x in runs]
            lines.append(
                f"{label:10s} {_median(secs):7.2f} s/run ({_median([x.samples_per_s for x in runs]):7.0f} "
                f"samples/s)   runs: " + " ".join(f"{s:.2f}" for s in secs)
            )
    if r.speedup is not None:
        ratios = r.speed_ratios
        of = " of the second look" if second else ""
        lines.append(
            f"speedup    {r.speedup:.2f}x (median of {len(ratios)} back-to-back chunk pairs{of}, range {min(ratios):.2f}-"
            f"{max(ratios):.2f}); target {t.target:.2f}x, floor {t.floor:.2f}x ({t.source})"
        )
        if t.table == "cpu-fp32":
            lines.append(
                "note       this CPU has no native bf16 (no AMX / AVX512-BF16): fp32 is the right policy "
                "here and 16-bit cannot pay, so full points mean your choice did not slow training "
                "(targets row cpu-fp32)"
            )
    g = r.gate
    if g:
        accs = [(x.role, x.accuracy) for x in r.runs if x.accuracy is not None]
        base = _median([a for role, a in accs if role == "baseline"]) * 100
        mine = _median([a for role, a in accs if role == "learner"]) * 100
        looks = g.look_means_pp
        mean = (
            " then ".join(f"{m:+.2f}" for m in looks) + " pp (two looks)"
            if len(looks) > 1
            else f"{g.mean_diff_pp:+.2f} pp"
        )
        lines.append(
            f"accuracy   baseline {base:.2f}%, yours {mine:.2f}% on the grader's held-out set; "
            f"paired mean {mean}, gate {g.threshold_pp:+.2f} pp: "
            + ("pass" if g.passed else "FAIL")
        )
    for p in r.problems:
        lines.append(f"problem    {p}")
    if r.error and r.error.detail:
        lines.append("           " + r.error.detail.replace("\n", "\n           "))
    for f in r.flags:
        lines.append(f"flag       {f}")
    lines.append(
        f"points     {r.points:g} / {r.max_points:g}"
        + (f"  (speed credit {r.credit:.0%})" if not r.problems else "")
    )
    return "\n".join(lines)
