"""The bottleneck doctor: its rules on plain data, and planted bottlenecks named on this machine."""

import json
from types import SimpleNamespace
from unittest import mock

import pytest
from other_host import as_on_another_machine, in_fp32  # noqa: E402  (tests/ is on sys.path)

from effkit import doctor
from effkit.amp import cpu_isa, cpu_native_bf16
from effkit.doctor import format_table, validate
from effkit.doctor_plants import bf16_plantable, planted_step, plants_here
from effkit.profiling import per_position, profile_training, work_median

CLEAN = {
    "step_ms": 10.0,
    "step_ms_unprofiled": 8.0,
    "batch_size": 32,
    "syncs_per_step": 0,
    "sync_ms": 0.0,
    "ops_per_step": 200,
    "ops_per_step_by_range": {
        "data": 3,
        "forward": 30,
        "backward": 100,
        "optimizer": 60,
        "other": 0,
    },
    "matmul_ms": 4.0,
    "matmul_calls_per_step": 27,
    "matmul_us_median": 150.0,
    "matmul_us_floor": 6.5,
    "compute_dtype": "float32",
    "bf16_hardware": False,
    "padding_share": 0.0,
    "ranges_ms": {"data": 0.2, "forward": 3.0, "backward": 5.0, "optimizer": 1.5, "other": 0.0},
    "optimizer": {"name": "Adam", "foreach": True, "fused": None, "param_tensors": 27},
    "memory_peak_bytes": None,
    "memory_limit_bytes": None,
}


def _with(**changes) -> dict:
    p = json.loads(json.dumps(CLEAN))
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(p.get(key), dict):
            p[key].update(value)
        else:
            p[key] = value
    return p


def _labels(p: dict) -> list[str]:
    return [f.label for f in doctor.diagnose(p)]


def test_each_rule_fires_on_its_evidence_and_only_then():
    assert _labels(CLEAN) == ["none"]
    assert _labels(_with(ranges_ms={"data": 4.0}))[0] == "data"
    assert _labels(_with(syncs_per_step=6))[0] == "sync"
    assert _labels(_with(syncs_per_step=1))[0] == "none"  # one loss.item() per step is tolerated
    assert _labels(_with(matmul_us_median=18.0))[0] == "overhead"  # 18 µs per matmul: fixed costs
    # 5% of the step in big matmul calls: the rest may be elementwise work, and a busy core dilutes shares
    assert _labels(_with(matmul_ms=0.5))[0] == "none"
    assert (
        _labels(_with(matmul_us_median=18.0, ops_per_step=20))[0] == "none"
    )  # a few operators: no overhead
    # a few big convolutions do the work beside many small calls: the work's calls decide, not the typical call
    assert _labels(_with(matmul_us_median=30.0, matmul_us_work=9400.0))[0] == "none"
    assert _labels(_with(matmul_us_median=150.0, matmul_us_work=28.0))[0] == "overhead"
    assert _labels(_with(padding_share=0.45))[0] == "padding"
    looped = {"optimizer": {"foreach": False}, "ops_per_step_by_range": {"optimizer": 243}}
    assert _labels(_with(**looped, ranges_ms={"optimizer": 2.0}))[0] == "optimizer"
    assert (
        _labels(_with(**looped, ranges_ms={"optimizer": 0.5}))[0] == "none"
    )  # a cheap loop is no bottleneck
    assert (
        _labels(_with(optimizer={"foreach": False}, ranges_ms={"optimizer": 2.0}))[0] == "none"
    )  # few ops
    assert _labels(_with(ranges_ms={"optimizer": 3.0}))[0] == "none"  # already foreach
    assert (
        _labels(_with(matmul_ms=6.0))[0] == "none"
    )  # fp32 on hardware without bf16 units is right
    assert _labels(_with(matmul_ms=6.0, bf16_hardware=True))[0] == "precision"
    assert _labels(_with(memory_peak_bytes=9e9, memory_limit_bytes=10e9)) == ["memory"]


def test_the_overhead_rule_reads_calls_against_this_hosts_own_floor():
    """40 µs, a line set on an AMX Xeon, called clean steps overhead-bound on an AVX512 EPYC whose kernels
    were faster: the same calls are overhead on one host and work on another, by their ratio to the floor."""
    assert _labels(_with(matmul_us_median=30.0, matmul_us_floor=3.0))[0] == "none"  # 10x: work
    assert _labels(_with(matmul_us_median=30.0, matmul_us_floor=9.0))[0] == "overhead"  # 3.3x
    assert (
        _labels(_with(matmul_us_median=60.0, matmul_us_floor=6.5))[0] == "none"
    )  # under 40 µs was 'overhead'
    line = doctor.diagnose(_with(matmul_us_median=13.0))[0].line()
    assert "2.0x this host's 6.5 µs" in line
    for missing in (None, 0.0):
        with pytest.raises(ValueError, match="matmul_us_floor"):
            doctor.diagnose(_with(matmul_us_floor=missing))


def test_findings_are_ranked_by_what_their_fix_may_save():
    both = _with(ranges_ms={"data": 5.0}, padding_share=0.35, syncs_per_step=4, sync_ms=0.1)
    labels = _labels(both)
    assert labels[0] == "data" and set(labels) == {"data", "padding", "sync"}
    shares = [f.share for f in doctor.diagnose(both)]
    assert shares == sorted(shares, reverse=True)
    assert (
        "lesson 2" in doctor.diagnose(both)[0].line() and "50%" in doctor.diagnose(both)[0].line()
    )


def test_the_report_reads_a_ratio_under_1_as_noise_not_as_an_overhead():
    """Lesson 10's reports printed "(x0.70)" and "(x0.86)" as the profiler's overhead: profiled steps
    that ran faster than unprofiled ones measure noise, not a cost. Profiles saved before
    profiler_overhead_inverted existed are read by their ratio."""
    slower = doctor.report(_with(profiler_overhead=1.25, profiler_overhead_inverted=False))
    assert "(x1.25)" in slower.splitlines()[0]
    for faster in (
        _with(profiler_overhead=0.7, profiler_overhead_inverted=True),
        _with(profiler_overhead=0.7),
    ):
        head = doctor.report(faster).splitlines()[0]
        assert "below this machine's noise" in head and "x0.70" not in head, head


def test_the_sync_finding_says_its_share_is_not_its_cost():
    """The sync plant read 0% of the profiled step while its fix saved about a third of the step (lesson
    10's recording): its share, the time inside the reads, ranks it, and the evidence says that is not its cost."""
    line = doctor.diagnose(_with(syncs_per_step=5, sync_ms=0.0))[0].line()
    assert (
        line.startswith("[sync]")
        and "not their whole cost" in line
        and "time the step without them" in line
    )


def test_the_profile_is_plain_data_and_counts_syncs_outside_the_optimizer():
    p = profile_training(planted_step(("sync",)), wait=0, active=2, warmup=1, timed=3)
    assert json.loads(json.dumps(p)) == p
    assert p["syncs_per_step"] == pytest.approx(
        5
    )  # 4 NaN checks + loss.item(); Adam's step counts excluded
    assert 0 < p["sync_ms"] < p["step_ms"]
    assert (
        p["ranges_ms"]["forward"] > 0 and p["ranges_ms"]["backward"] > 0 and p["ops_per_step"] > 50
    )
    assert p["compute_dtype"] == (
        "bfloat16" if bf16_plantable() else "float32"
    )  # bf16 only where it pays here and has its line
    assert p["optimizer"]["foreach"] is True
    assert p["matmul_us_work"] >= p["matmul_us_median"] > 0


def test_the_work_median_is_the_call_that_half_the_time_is_spent_in():
    cifar_like = [30.0] * 30 + [
        9000.0
    ] * 4  # the typical call is small; the time is in the four big ones
    assert work_median(cifar_like) == 9000.0 and sorted(cifar_like)[len(cifar_like) // 2] == 30.0
    assert work_median([10.0, 10.0, 10.0]) == 10.0 and work_median([]) is None
    assert work_median([1.0, 2.0, 3.0, 4.0]) == 3.0  # 1+2+3 = 6 >= half of 10


def test_a_call_descheduled_in_one_step_does_not_make_a_small_step_look_like_work():
    """A busy core hands out ~3 ms time slices: three landing inside 28 µs matmuls would make one of them the work
    median of an overhead-bound step (5 steps x 45 calls: 7.1 ms of matmuls) and hide its overhead."""
    step = [28.0] * 40 + [60.0] * 5
    calls = step * 5
    for k, i in ((0, 7), (2, 20), (4, 33)):  # descheduled in steps 1, 3 and 5
        calls[k * 45 + i] = 3000.0
    starts = [k * 1000.0 + i for k in range(5) for i in range(45)]
    steps = [k * 1000.0 for k in range(5)]
    assert work_median(calls) == 3000.0  # what the pooled calls would say
    assert (
        per_position(calls, starts, steps) == step
        and work_median(per_position(calls, starts, steps)) == 28.0
    )
    assert per_position(calls[:-1], starts[:-1], steps) == calls[:-1]  # uneven steps: unchanged
    assert per_position(calls, starts, steps[:1]) == calls  # one step: unchanged
    p = _with(matmul_us_median=28.0, matmul_us_work=work_median(per_position(calls, starts, steps)))
    assert _labels(p)[0] == "overhead"


def test_the_clean_step_runs_in_the_courses_precision_and_fp32_is_planted_only_on_bf16_units(
    monkeypatch,
):
    """On an AVX512-BF16 CPU an fp32 clean step was itself a bottleneck (bf16 autocast: 1.14-1.22x faster): the
    doctor said "precision" on it, and lesson 10's "nothing planted" cases carried a real finding."""
    import effkit.amp as amp
    import effkit.doctor_plants as dp
    from effkit.profiling import _compute_dtype

    for units in (False, True):
        monkeypatch.setattr(amp, "cpu_native_bf16", lambda units=units: units)
        monkeypatch.setattr(dp, "cpu_native_bf16", lambda units=units: units)
        monkeypatch.setattr(dp, "bf16_pays_here", lambda units=units: units)  # measured: see below
        monkeypatch.setattr(dp, "bf16_line_known", lambda: True)  # a calibrated class: see below
        clean = planted_step(())
        batch = clean.next_batch()
        assert _compute_dtype(clean, batch) == ("bfloat16" if units else "float32")
        if units:
            assert "precision" in dp.plants_here()
            assert _compute_dtype(planted_step(("precision",)), batch) == "float32"
        else:
            assert "precision" not in dp.plants_here()
            with pytest.raises(ValueError, match="bf16 units"):
                planted_step(("precision",))


def test_where_bf16_pays_but_has_no_calibrated_line_the_plants_run_in_fp32(monkeypatch):
    """A fresh review (2026-12-06): on an AMX Xeon where bf16 pays, the plants would have run in bf16, where
    the overhead plant measured 15.6-22.8 floors against the 7x line (a clean step 27): the reference, and
    every learner, would miss it. A class without a calibrated bf16 line plants in fp32, where every class
    measured has its line, and plants no precision finding."""
    import effkit.amp as amp
    import effkit.doctor_plants as dp
    from effkit.profiling import _compute_dtype

    monkeypatch.setattr(amp, "cpu_native_bf16", lambda: True)
    monkeypatch.setattr(dp, "cpu_native_bf16", lambda: True)
    monkeypatch.setattr(dp, "bf16_pays_here", lambda: True)
    monkeypatch.setattr(dp, "cpu_isa", lambda: "AMX")
    assert not dp.bf16_plantable() and "precision" not in dp.plants_here()
    assert dp.cpu_mode() == "off"
    clean = planted_step(())
    assert _compute_dtype(clean, clean.next_batch()) == "float32"
    monkeypatch.setattr(dp, "cpu_isa", lambda: "AVX512-BF16")  # the class with its own line
    assert dp.bf16_plantable() and "precision" in dp.plants_here() and dp.cpu_mode() == "bf16"


def test_precision_is_planted_only_where_bf16_measurably_pays(monkeypatch):
    """bf16 units alone do not make fp32 a bottleneck: on a 2-core AMX Xeon the clean step ran only
    1.03-1.19x faster in bf16, its fp32 matmuls 26% of the step, and the doctor rightly named nothing
    on the precision plant. Without bf16 units nothing is measured; with them, the median ratio decides."""
    import effkit.doctor_plants as dp

    # the step measured is the clean step it decides for: its optimizer too (foreach, not the per-tensor loop)
    clean = planted_step(()).optimizer
    bare = dp._bare_step("off").optimizer
    assert bare.param_groups[0]["foreach"] is clean.param_groups[0]["foreach"] is True
    assert type(bare) is type(clean) and bare.defaults == clean.defaults
    monkeypatch.setattr(dp, "cpu_native_bf16", lambda: False)
    monkeypatch.setattr(dp, "_bare_step", lambda mode: pytest.fail("measured without bf16 units"))
    assert not dp.bf16_pays_here.__wrapped__()
    monkeypatch.setattr(dp, "cpu_native_bf16", lambda: True)
    # a clock the fake steps advance: slept steps overshot by a busy core's scheduling latency (ms) read a 1.25x
    # ratio under the line in a make test beside two gradings (load 7)
    clock = [0.0]
    monkeypatch.setattr(dp, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    for fp32_s, pays in ((1.25, True), (1.05, False)):

        def bare_step(mode, s=fp32_s):
            def run(n):
                clock[0] += 0.001 * n * (s if mode == "off" else 1.0)

            return run

        monkeypatch.setattr(dp, "_bare_step", bare_step)
        assert dp.bf16_pays_here.__wrapped__(rounds=3, steps=10) is pays


def test_each_decoy_sets_its_plants_tell_tale_field_without_the_plant():
    """Lesson 10's decoys: the field a flag-reading judge names (one sync, some padding, foreach off, batch 1)
    on a step that lacks the plant's cost (no NaN checks; at most an eighth of a row padded; long rows). Whether they cost little is
    measured by grader/assignments/lesson10/calibration/lesson10_calibrate.py; here, that each is what it claims and refuses what it cannot be."""
    from effkit.doctor_plants import LENGTH, LONG_ROWS, SHORT_ROWS

    sync = planted_step((), decoys=("sync",))
    batch = sync.next_batch()
    loss = sync.loss(batch)
    assert not sync.model.nan_checks
    sync.after(loss)  # the one read per step
    padding = planted_step((), decoys=("padding",))
    assert 0.0 < padding.padding(padding.next_batch()) < 0.1
    assert planted_step(("padding",)).padding(planted_step(("padding",)).next_batch()) > 0.3
    optimizer = planted_step((), decoys=("optimizer",))
    assert optimizer.optimizer.param_groups[0]["foreach"] is False
    assert optimizer.next_batch()[0].shape == (32, LONG_ROWS["optimizer"])
    # the optimizer plant is its decoy but for the loop's cost (a big embedding table, which no field counts): the
    # same rows and batch, as many parameter tensors, so that no proxy (a review: the rows' length, read as the
    # work's matmul calls, 20.8-38.4 floors against 199 and up) tells them apart, only the optimizer's time
    plant = planted_step(("optimizer",))
    assert plant.optimizer.param_groups[0]["foreach"] is False
    assert plant.next_batch()[0].shape == optimizer.next_batch()[0].shape
    assert plant.model.embed.num_embeddings > 64 * optimizer.model.embed.num_embeddings
    assert [p.dim() for p in plant.model.parameters()] == [
        p.dim() for p in optimizer.model.parameters()
    ]
    # the padding decoy stays far under the 30% rule on every row length, the overhead plant's 8 tokens too (3
    # missing tokens of 8 reached 37.5% a row, and a profile's 5 batch-1 rows averaged 30% or more in ~5%)
    for plants, rows in ((("overhead",), SHORT_ROWS), ((), LENGTH), (("optimizer",), 256)):
        for seed in range(20):
            step = planted_step(plants, seed, decoys=("padding",))
            shares = [step.padding(step.next_batch()) for _ in range(64)]
            assert step.next_batch()[0].shape[1] == rows
            assert 0.0 < max(shares) <= 0.125 and sum(shares) / len(shares) < 0.1, (plants, seed)
    # the data decoy tokenises documents DATA_DECOY_SHORTER times shorter than the plant's, rows of LENGTH
    data = planted_step((), decoys=("data",))
    assert data.next_batch()[0].shape == (32, LENGTH) and not planted_step(()).model.nan_checks
    overhead = planted_step(("sync",), decoys=("overhead",))
    assert overhead.batch_size == 1 and overhead.next_batch()[0].shape == (1, LONG_ROWS["overhead"])
    # the plant's own rows are short: its calls mostly the host's fixed cost (doctor_plants.SHORT_ROWS)
    assert planted_step(("overhead",)).next_batch()[0].shape == (1, SHORT_ROWS)
    for plants, decoys in (
        (("sync",), ("sync",)),  # a decoy is never its own plant
        ((), ("optimizer", "overhead")),  # batch 1 would make the optimizer a big share again
        (("optimizer",), ("overhead",)),  # the optimizer plant has its decoy's rows
        (("data",), ("optimizer",)),  # the data plant tokenises rows of LENGTH tokens
        (("overhead",), ("optimizer",)),  # long rows would cure batch 1
        (
            ("overhead",),
            ("data",),
        ),  # the data decoy tokenises rows of LENGTH, not the plant's short ones
        (("optimizer",), ("data",)),  # nor the optimizer plant's long ones
        ((), ("data", "optimizer")),
        ((), ("precision",)),
    ):
        with pytest.raises(ValueError):
            planted_step(plants, decoys=decoys)


@pytest.fixture(scope="module")
def planted_profiles() -> dict[str, dict]:
    """Every single plant, the clean step and the clean step at batch 1 of long rows (lesson 10's decoy for the
    overhead rule: its calls do the clean step's work), profiled once here as a grading profiles them."""
    from effkit.doctor_plants import profile_named

    with in_fp32():  # where the floor is the calls' fixed cost (tests/other_host.py)
        return {p: profile_named(f"plant:{p}") for p in ("clean", "clean~overhead", *plants_here())}


@pytest.mark.slow
@pytest.mark.skipif(
    cpu_isa() != "AVX512-BF16" or not cpu_native_bf16(),
    reason="bf16 on an AVX512-BF16 CPU without AMX: the class with a line of its own",
)
def test_every_plant_is_named_in_bf16_on_an_avx512_bf16_cpu():
    """The class whose floor misses oneDNN's per-call cost: in bf16 here the overhead plant sat at 9-10x the floor
    and every other step at 26-30x, so the common 7x line called the overhead plant clean (lesson 10's reference
    scored 7/12 in CI on an AMD EPYC Zen 4). Its own line, 16x, names every plant, the pair and the batch-1 decoy."""
    from effkit import doctor_plants

    with mock.patch.object(doctor_plants, "bf16_pays_here", lambda *a, **k: True):
        names = ("clean", "clean~overhead", "overhead+sync", *doctor_plants.plants_here())
        profiles = {p: doctor_plants.profile_named(f"plant:{p}") for p in names}
    wrong = {}
    for planted, p in profiles.items():
        line = 16.0 if p["compute_dtype"] == "bfloat16" else 7.0  # the precision plant runs fp32
        assert p["cpu_isa"] == "AVX512-BF16" and p["overhead_calls"] == line, p
        want = "none" if planted.startswith("clean") else planted.split("+")[0]
        first = doctor.diagnose(p)[0].label
        if first != want or (planted != "precision" and p["compute_dtype"] != "bfloat16"):
            ratio = p["matmul_us_work"] / p["matmul_us_floor"]
            wrong[planted] = (first, p["compute_dtype"], round(ratio, 1))
    assert not wrong, wrong


@pytest.mark.slow
def test_validation_names_every_single_plant_and_no_false_alarm_on_the_clean_step():
    table = validate(quick=True)
    text = format_table(table)
    assert table["total"] == len(plants_here()) + 1
    assert table["correct"] == table["total"], text


@pytest.mark.slow
@pytest.mark.parametrize(
    "overhead, kernels",
    [(2.0, 1.0), (0.5, 1.0), (1.0, 2.0), (1.0, 0.5)],
    ids=[
        "twice-the-call-overhead",
        "half-the-call-overhead",
        "kernels-2x-faster",
        "kernels-2x-slower",
    ],
)
def test_every_plant_is_named_as_on_another_machine(planted_profiles, overhead, kernels):
    """The rules hold on machines this suite never ran on: each profile measured here (the batch-1 decoy too),
    moved to a host with twice or half the fixed cost per call, or 2x faster or slower kernels. A fixed µs line cannot
    pass this everywhere (40 µs: a clean step whose calls take 60 µs here reads as overhead on a host
    with kernels 2x faster); the ratio to the floor measured beside the steps moves with the host."""
    wrong = {}
    for planted, p in planted_profiles.items():
        moved = as_on_another_machine(p, overhead, kernels)
        first = doctor.diagnose(moved)[0].label
        if first != ("none" if planted.startswith("clean") else planted):
            wrong[planted] = (first, round(moved["matmul_us_work"], 1), moved["matmul_us_floor"])
    assert not wrong, wrong


def test_the_floor_is_measured_beside_the_steps_and_is_a_small_call():
    """The floor is a real measurement on this host: positive, below the clean step's work calls (which
    do 16x the overhead plant's work), and the overhead plant's calls sit near it."""
    from effkit.profiling import call_floor_us

    floor = call_floor_us()
    clean = profile_training(planted_step(()), wait=0, active=2, warmup=1, timed=3)
    assert 0 < floor < clean["matmul_us_work"]
    assert 0 < clean["matmul_us_floor"] < clean["matmul_us_work"] / clean["overhead_calls"]


@pytest.mark.slow
def test_the_course_bert_recipes_naive_pads_and_optimized_is_clean(tmp_path, monkeypatch):
    """The doctor on the course's own BERT recipes (smoke profile, synthetic SST-2 in the real TSV format):
    the naive recipe pads every row to max_length, which the doctor must name first; the optimized one
    (dynamic padding, bucketing, fused AdamW) must get "no clear bottleneck"."""
    from effkit.doctor_plants import profile_named

    monkeypatch.setenv("EFFKIT_DATA", str(tmp_path))
    naive, optimized = profile_named("bert:naive"), profile_named("bert:optimized")
    first = [f for f in doctor.diagnose(naive)][0]
    assert first.label == "padding" and naive["padding_share"] > 0.5, doctor.report(naive)
    assert first.lesson == 7
    assert [f.label for f in doctor.diagnose(optimized)] == ["none"], doctor.report(optimized)
    assert optimized["padding_share"] < 0.3


def test_the_command_line_prints_the_diagnosis_and_writes_the_plain_profiles(tmp_path, capsys):
    out = tmp_path / "profiles.json"
    assert doctor.main(["plant:overhead", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "plant:overhead" in printed and "1. [overhead]" in printed and "lesson 4" in printed
    saved = json.loads(out.read_text())
    assert [f.label for f in doctor.diagnose(saved[0])][0] == "overhead"
    with pytest.raises(ValueError, match="unknown workload"):
        doctor.main(["mnist:naive"])


def test_a_cpu_step_on_a_cuda_host_is_profiled_as_a_cpu_step(monkeypatch):
    """On an H100 host lesson 10's planted steps (CPU tensors) were profiled as GPU steps: their matmuls'
    device time read 0 ms, every step looked overhead-bound and the reference named 4 of 8. Here a
    stand-in torch says CUDA is available; any CUDA call the profile then makes fails."""
    import types

    import torch

    import effkit.profiling as profiling

    shim = types.SimpleNamespace(
        **{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")}
    )
    shim.cuda = types.SimpleNamespace(is_available=lambda: True)
    monkeypatch.setattr(profiling, "torch", shim)
    # bf16_hardware as profile_named says it: the clean step runs in the precision that pays here
    p = profiling.profile_training(
        planted_step(()), wait=0, active=2, warmup=1, timed=3, bf16_hardware=bf16_plantable()
    )
    assert p["matmul_ms"] > 0.1 * p["step_ms"] and p["matmul_us_median"] > 0
    assert p["memory_peak_bytes"] is None and p["memory_limit_bytes"] is None
    assert doctor.diagnose(p)[0].label == "none"
