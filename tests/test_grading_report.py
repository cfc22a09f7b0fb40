"""The typed, versioned grading report: its one writer, its archived shapes, the device class.

No Ray and no grading here (about 5 s, torch's import included): ``perf.decide`` on a measurement
built by hand, the archived reports in ``benchmarks/results``, the node's device refusal.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from grader import assignments
from grader.frontends import farm_record, farm_task, leaderboard
from grader.kit.manifest import Manifest
from grader.scoring import perf, targets
from grader.scoring.report import (
    GradingReport,
    OutOfKernel,
    PerformanceReport,
    WorkCheck,
    load_grading,
    load_performance,
)
from grader.timed import gate as gates
from grader.timed.measurement import GradingSpec, Measurement, Timing

ROOT = Path(__file__).resolve().parents[1]
ARCHIVED = sorted(ROOT.glob("benchmarks/results/*/grading/*.json"))
# ``grader stress`` results kept as evidence, of the versions that recorded the work checks' rows
STRESSED = [
    p for p in sorted(ROOT.glob("benchmarks/results/*.json")) if '"work_checks"' in p.read_text()
]
DEVICE = "CPU AMD EPYC 7B13 [AVX2] (2 threads)"


def _decided(speed: float = 1.0, learner_acc: float = 0.8, work_problems=()) -> perf.PerfResult:
    spec = GradingSpec("smoke", "smoke", 10, 10, 10, 1, 2)
    m = Measurement(device=DEVICE, spec=spec, work_problems=list(work_problems))
    for r in range(2):
        m.runs += [
            Timing("baseline", r, 2.0, 10, 0.8),
            Timing("learner", r, speed, 10, learner_acc),
        ]
        m.chunks += [("baseline", r, c, 1.0) for c in (0, 1)]
        m.chunks += [("learner", r, c, speed / 2) for c in (0, 1)]
    target = targets.Target("lesson2", DEVICE, "cpu", 1.5, 1.0, "test", "cpu-fp32")
    return perf.decide(m, target, gates.Gate(2, 1.0), 5.0, "fallback", [], "lesson2")


def test_the_work_checks_verdict_is_said_beside_an_accuracy_drop_and_alone_costs_the_points():
    """A step on part of each batch loses accuracy too (CI, f71f2d5): the replay's finding, the
    cause, is in the feedback beside the gate's; with accuracy held it alone costs the points."""
    replay = "run 1, timed chunk 1: your weights changed unlike the grader's replay"
    both = _decided(learner_acc=0.7, work_problems=[replay])
    assert both.points == 0 and len(both.report.problems) == 2
    assert "below the gate" in both.report.problems[0] and both.report.problems[1] == replay
    alone = _decided(work_problems=[replay])
    assert alone.points == 0 and alone.report.problems == [replay]
    assert _decided(learner_acc=0.7).report.problems[0].startswith("no performance points: ")


def _job(**extra) -> dict:
    job = {"assignment": "lesson2", "student": "bob", "notebook": "lesson2", "sha256": "a" * 64}
    return job | {"grader_version": "v1"} | extra


def test_the_one_writer_makes_a_typed_report_that_survives_the_wire():
    result = _decided()
    assert isinstance(result.report, PerformanceReport)
    assert result.report.points == result.points == 5.0 and result.report.isa == "AVX2"
    report = farm_task.failed(_job(), "x").model_copy(
        update={"status": "graded", "reason": None, "performance": result.report}
    )
    back = GradingReport.model_validate_json(report.model_dump_json())
    assert back == report and back.schema_version == 2
    assert "points     5 / 5" in perf.feedback_text(back.performance)


def test_nan_stays_nan_on_the_wire():
    """A report with NaN (no speedup measured) loads back: pydantic's default writes null,
    which ``list[float]`` then refuses, so an honest grading would be refused on load."""
    report = _decided().report.model_copy(update={"speed_ratios": [math.nan, 1.0]})
    back = PerformanceReport.model_validate_json(report.model_dump_json())
    assert math.isnan(back.speed_ratios[0])


def test_other_shapes_are_refused_not_misread():
    data = _decided().report.model_dump(mode="json")
    with pytest.raises(ValueError):
        PerformanceReport.model_validate({k: v for k, v in data.items() if k != "points"})
    with pytest.raises(ValueError):  # a field nobody reads is a field somebody forged
        PerformanceReport.model_validate(data | {"bonus": 5})
    with pytest.raises(ValueError):  # a future format
        load_performance(data | {"schema_version": 3})
    with pytest.raises(ValueError):
        load_grading(farm_task.failed(_job(), "x").model_dump(mode="json") | {"status": "ok"})


@pytest.mark.parametrize("path", ARCHIVED, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_archived_grading_in_the_repo_still_loads(path):
    """``grader check --json`` reports kept as evidence (H100, H200) load as version 2."""
    data = json.loads(path.read_text())
    report = load_grading(data)
    assert report.total == data["total"] and report.schema_version == 2
    assert [c.model_dump() for c in report.cells] == data["cells"]
    assert report.out_of_kernel.model_dump() == data["out_of_kernel"]  # typed, nothing lost
    if data["performance"]:
        assert report.performance.speedup == data["performance"]["speedup"]


def test_the_work_checks_and_the_out_of_kernel_report_are_typed_and_survive_the_wire():
    """Each row shape the replay writes (against the baseline, a replay with its most-apart tensor
    and its losses) and a cell report load typed and come back equal; other shapes are refused."""
    rows = [
        {"run": 0, "chunk": 0, "against": "baseline", "cosine": 0.99, "ratio": 1.0, "untouched": 0},
        {"run": 0, "chunk": 1, "against": "replay", "cosine": math.nan, "ratio": math.inf},
        {"run": 1, "chunk": 2, "against": "replay of your batches", "cosine": 0.97, "ratio": 0.8}
        | {"tensor": ["encoder.w", 0.88, 0.72], "losses": "step 3: 0.6931, the replay's 0.6812"},
    ]
    cells = {"cells": {"quiz": {"passed": False, "reason": "why", "lines": ["a"]}}, "flags": ["f"]}
    report = farm_task.failed(_job(), "x").model_copy(
        update={
            "status": "graded",
            "reason": None,
            "performance": _decided().report.model_copy(
                update={"work_checks": [WorkCheck.model_validate(r) for r in rows]}
            ),
            "out_of_kernel": OutOfKernel.model_validate(cells),
        }
    )
    back = GradingReport.model_validate_json(report.model_dump_json())
    checks = back.performance.work_checks
    assert checks[2].tensor == ("encoder.w", 0.88, 0.72) and checks[0].untouched == 0
    assert math.isnan(checks[1].cosine) and checks[1].ratio == math.inf and checks[1].tensor is None
    assert (
        back.out_of_kernel.cells["quiz"].reason == "why" and back.out_of_kernel.worker_uid is None
    )
    for bad in (rows[0] | {"against": "nothing"}, rows[0] | {"cosine": "high"}, rows[0] | {"x": 1}):
        with pytest.raises(ValueError):
            WorkCheck.model_validate(bad)
    with pytest.raises(ValueError):  # a verdict without its pass/fail is not a verdict
        OutOfKernel.model_validate({"cells": {"quiz": {"reason": "why"}}})


@pytest.mark.parametrize("path", STRESSED, ids=lambda p: p.name)
def test_every_archived_work_check_row_loads_typed(path):
    """``grader stress`` results kept as evidence: every row of their work checks is a WorkCheck."""
    rows = [w for r in json.loads(path.read_text())["results"] for w in r.get("work_checks", [])]
    assert rows and all(
        WorkCheck.model_validate(w).model_dump(mode="json", exclude_none=True) == w for w in rows
    )


def test_a_version_1_ledger_entry_loads():
    v2 = farm_task.failed(_job(), "x").model_copy(
        update={"status": "graded", "reason": None, "performance": _decided().report}
    )
    v1 = v2.model_dump(mode="json", exclude={"device"}) | {"schema_version": 1}
    del v1["performance"]["schema_version"]
    assert load_grading(v1) == v2


def test_the_leaderboard_races_cpus_only_against_the_same_isa():
    avx2 = _decided().report.model_copy(update={"student": "bob"})
    avx512 = avx2.model_copy(update={"device": "CPU AMD EPYC 9B14 [AVX512] (2 threads)"})
    old = avx2.model_copy(update={"device": "CPU AMD EPYC 7B13 (2 threads)"})  # before the ISA
    boards = [
        leaderboard.grading_of(r.model_dump(mode="json"), "sig").device_class
        for r in (avx2, avx512, old)
    ]
    assert boards == ["cpu-fp32 [AVX2]", "cpu-fp32 [AVX512]", "cpu-fp32"]


def test_each_manifest_names_a_device_class_its_checks_agree_with():
    for m in assignments.manifests():
        assert m.device in ("any", "cpu", "gpu")
        assert (m.device == "cpu") == assignments.get(m.id).cpu_only, m.id
    with pytest.raises(ValueError, match="device is one of"):
        Manifest("x", ("probes",), {"a": 1}, 1, 1, device="tpu")


def test_a_cpu_only_slot_refuses_a_gpu_grading_and_names_its_device(tmp_path):
    """The node's own check (the driver asks first): a job sent for CUDA to a slot without a GPU
    comes back refused, with this slot's device class, and is not graded on the CPU."""
    assert farm_task.device_refusal(_job(needs="gpu", device="cpu")).startswith("not graded")
    assert farm_task.device_refusal(_job(needs="gpu", device="cuda")) is None
    assert farm_task.device_refusal(_job(needs="any", device="cpu")) is None
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the slot is not CPU-only")
    job = _job(needs="gpu", device="cuda", notebook_text="{}", meta={"host": "h"})
    job["grader_version"] = farm_task.grader_version()
    (tmp_path / "job.json").write_text(json.dumps(job))
    report = farm_task.grade_folder(tmp_path)
    assert report.status == "refused" and "GPU only" in report.reason
    assert report.device.kind == "cpu" and report.device.isa
    assert not (tmp_path / "submission").exists()  # nothing was graded
    assert "REFUSED" in farm_record.line(report) and report.device.label in farm_record.line(report)


def test_progress_names_each_running_grading_its_slot_and_time():
    running = {"bob": (100.0, "node-b slot 1", 7), "alice": (40.0, "node-a slot 0", 8)}
    assert farm_record.slot_lines(running, 142.0) == [
        "  node-a slot 0: alice, 102 s",
        "  node-b slot 1: bob, 42 s",
    ]


def test_stress_summarises_the_typed_report():
    from grader.cli import tools

    rep = _decided().report
    row = {"points": 5.0, "speedup": rep.speedup, "gate": True, "look_means_pp": [0.0]}
    summary = tools._stress_summary("lesson2", 1, 0, rep, [row])
    assert (summary["spec"], summary["repeats"], summary["table"]) == ("smoke", 2, "cpu-fp32")
    assert summary["device"] == DEVICE and summary["same_verdict"]


def test_a_slot_refuses_timed_work_its_gate_was_never_calibrated_for():
    """Lesson 2's "gpu" spec has no calibration for a CPU: timing it would judge accuracy with a
    gate nobody measured, so the slot refuses unless the instructor says otherwise; the smoke
    spec (calibrated) and an untimed lesson go ahead."""
    job = _job(timed=True, device="cpu", spec="gpu")
    why = farm_task.calibration_refusal(job)
    assert why and "no calibration" in why and "--uncalibrated" in why
    assert farm_task.calibration_refusal(job | {"uncalibrated_ok": True}) is None
    assert farm_task.calibration_refusal(job | {"spec": None}) is None
    assert farm_task.calibration_refusal(_job(assignment="lesson1", timed=False)) is None


def test_the_farm_says_each_gradings_device_time_and_the_total():
    """Issue 54 §7: per grading its wall time times what its slot held (GPUs, else cores)."""
    assert farm_record.device_time(10.0, "0,1", [0, 1, 2]) == {"gpu_s": 20.0, "core_s": None}
    assert farm_record.device_time(10.0, None, [2, 3]) == {"gpu_s": None, "core_s": 20.0}
    assert farm_record.device_time(10.0, "", []) == {"gpu_s": None, "core_s": 10.0}
    assert farm_record.device_time(None, "0", [1]) == {"gpu_s": None, "core_s": None}
