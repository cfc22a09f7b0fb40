"""Tamper resistance and bad input, end to end: real nbgrader autograde and the grader's protocol.

One ``nbgrader autograde`` run (through ``python -m grader autograde``) grades several students at
once in a temporary course root; the remaining submissions go straight through the grader's
performance protocol. Submissions live in tests/submissions/ (see its README).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import assignments
from grader.frontends.notebook import read_notebook, solution_ids, solution_sources
from grader.scoring.perf import feedback_text, grade
from grader.scoring.report import load_performance

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SUBMISSIONS = ROOT / "tests" / "submissions"
LESSON2 = assignments.get("lesson2")
# student -> submission graded through nbgrader in one batch
# eve carries both timed attacks (kernel-side tampering, worker-side escape): one timed grading, not two
STUDENTS = {
    "eve": "timed_escape",
    "lee": "locked_edit",
    "ray": "raises",
    "ivy": "infinite_loop",
    "mal": "malformed",
}


def _submission(name: str) -> Path:
    # The malformed notebook is stored under another extension: it is broken on purpose, and
    # tools that scan the repository for notebooks should not trip over it.
    broken = SUBMISSIONS / f"{name}.truncated-ipynb"
    return broken if broken.exists() else SUBMISSIONS / f"{name}.ipynb"


SPEC = "smoke"  # the CPU grading spec, as learners get it (grader/assignments/lesson2/checks.py)


def _env(root: Path) -> dict:
    env = dict(os.environ, EFFKIT_COURSE_ROOT=str(root), EFFKIT_GRADER_SPEC=SPEC)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A temporary course: generate the release from solutions/, submit, autograde everyone."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    env = _env(root)
    gen = subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", "lesson2", "--force"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert gen.returncode == 0, gen.stderr[-3000:]
    for student, name in STUDENTS.items():
        folder = root / "course" / "submitted" / student / "lesson2"
        folder.mkdir(parents=True)
        shutil.copy(_submission(name), folder / "lesson2.ipynb")
    run = subprocess.run(
        [sys.executable, "-m", "grader", "autograde", "lesson2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    return root, run


def _cell_scores(root: Path) -> dict[str, dict[str, float]]:
    from nbgrader.api import Gradebook, MissingEntry

    scores = {}
    with Gradebook(f"sqlite:///{root / 'course' / 'gradebook.db'}") as gb:
        for student in STUDENTS:
            try:
                nb = gb.find_submission_notebook("lesson2", "lesson2", student)
            except MissingEntry:
                continue
            scores[student] = {g.name: g.score for g in nb.grades}
    return scores


def _report(root: Path, student: str) -> dict:
    return json.loads(
        (root / "course" / "autograded" / student / "lesson2" / "lesson2.grader.json").read_text()
    )


def _outputs(root: Path, student: str, grade_id: str) -> str:
    nb = nbformat.read(
        root / "course" / "autograded" / student / "lesson2" / "lesson2.ipynb", as_version=4
    )
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(
        o.get("text", "") + o.get("ename", "") + ": " + o.get("evalue", "") + str(o.get("data", ""))
        for o in cell.outputs
    )


def test_autograde_ran_and_reports_the_cohort(course):
    root, run = course
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "mal " in run.stdout and "not a valid notebook" in run.stdout
    assert (root / "course" / "grades.csv").is_file()
    assert (root / "course" / "reports" / "lesson2_cohort.png").read_bytes()[:4] == b"\x89PNG"


def test_a_timed_workers_attacks_change_nothing_and_the_escape_is_flagged(course):
    """eve's pipeline is the correct one (the instructor cycle grades the plain reference); at import,
    in every worker, it overwrites the training inputs, looks for the baseline's weights, writes the
    targets file and starts a process in a new session that spins whenever its worker is paused,
    i.e. while the baseline is timed."""
    root, _ = course
    report = _report(root, "eve")
    scores = _cell_scores(root)["eve"]
    assert {k: scores[k] for k in ("test_contract", "test_augmentation", "test_quiz")} == {
        "test_contract": 3,
        "test_augmentation": 2,
        "test_quiz": 2,
    }
    assert "CPU" in report["device"] and report["target"]["device_class"] == "cpu"
    assert (
        report["target"]["source"] == "default"
        and not (root / "course" / "grader_targets.json").exists()
    )
    if any(f.startswith("protection unavailable here (timed worker)") for f in report["flags"]):
        assert (
            report["points"] == 0
        )  # no cgroup: a process outside the group is refused, not frozen
        return
    # the inputs were read-only and the baseline was not slowed: the gate passed on untouched
    # weights, and a spinner sharing the baseline's pinned core would have halved the baseline's
    # speed, i.e. about doubled eve's speed-up (the reference's is 1.5-2.2x here). The spinner does
    # share eve's own core while eve is timed (it spins 0.3 s whenever it sees its worker idle for
    # 20 ms, as at every chunk boundary): eve may lose speed to itself (1.29-1.33x in two CI runs,
    # under the 1.35x target), never gain it. So: no gain, and the points are exactly the credit of
    # the speed-up measured - the flag takes nothing away.
    assert report["gate"]["passed"] and not report["problems"], report["problems"]
    assert report["speedup"] < 3.0
    assert scores["test_speed"] == report["points"] == _credit_points(report) > 0
    assert any("left the worker's session" in f for f in report["flags"]), report["flags"]


def _credit_points(report: dict) -> float:
    """The speed points the report's own speed-up earns on its target (nothing deducted)."""
    from grader.scoring.targets import Target

    return round(Target(**report["target"]).credit(report["speedup"]) * 5.0, 2)


def test_clock_and_grader_tampering_is_flagged_and_has_no_effect(course):
    root, _ = course
    report = _report(root, "eve")
    # eve's pipeline is the correct one: the points of its measured speed-up, whatever the kernel's
    # patched clock said (a clock 10x slow would have claimed ~10x), and no more
    assert report["speedup"] < 3.0
    assert _cell_scores(root)["eve"]["test_speed"] == report["points"] == _credit_points(report) > 0
    flags = " ".join(report["flags"])
    for name in ("time.perf_counter", "time.time", "time.monotonic"):
        assert name in flags
    # the grader's own modules could not even be imported in the worker (grader.sandbox.learner_view), so
    # their replacements never happened; where the machine cannot hide them they are flagged instead
    hidden = not any("grader's own code" in f for f in flags)
    for name in ("grader.timed.protocol._clock", "grader.scoring.perf.grade"):
        assert (name in flags) != hidden
    # the measured speed is the real one: a 10x slower clock would have made it ~10x larger
    assert report["speedup"] < 5.0  # the reference measures ~1.7-2.2x here
    # the kernel's patched grade_performance returned 5.0; the grader's own output replaced it
    assert "== effkit grader" in _outputs(root, "eve", "test_speed")


@pytest.mark.parametrize(
    "student, scores, cell, output, problem",
    [
        # edited locked cells are restored by nbgrader: the contract's own test then fails
        (
            "lee",
            {"test_contract": 0, "test_augmentation": 0, "test_speed": 0, "test_quiz": 0},
            "test_contract",
            "expected x = (pixel / 255 - CIFAR_MEAN) / CIFAR_STD",
            "correctness checks",
        ),
        # a raising cell scores zero with the error, and the rest is graded
        (
            "ray",
            {"test_contract": 3, "test_augmentation": 0, "test_speed": 0, "test_quiz": 0},
            "test_augmentation",
            "RuntimeError",
            "RuntimeError",
        ),
        # an infinite loop times out per check
        (
            "ivy",
            {"test_contract": 3, "test_augmentation": 0, "test_speed": 0, "test_quiz": 0},
            "test_augmentation",
            "did not return within",
            "did not finish",
        ),
    ],
    ids=["edited_locked_cells", "raising_cell", "infinite_loop"],
)
def test_a_broken_submission_scores_what_it_earns_and_says_why(
    course, student, scores, cell, output, problem
):
    root, _ = course
    assert _cell_scores(root)[student] == scores
    assert output in _outputs(root, student, cell)
    assert problem in " ".join(_report(root, student)["problems"])


def test_a_malformed_notebook_leaves_the_gradebook_intact(course):
    root, run = course
    scores = _cell_scores(root)
    assert "mal" not in scores and {"eve", "lee", "ray", "ivy"} <= set(scores)
    assert not (root / "course" / "autograded" / "mal").exists()
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "check",
            str(_submission("malformed")),
            "--assignment",
            "lesson2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 2 and "is not a valid notebook file" in check.stdout


# -- the protocol directly (no kernel): speed and accuracy verdicts ----------------------------
def _cells(name: str) -> list[tuple[str, str]]:
    nb = read_notebook(SUBMISSIONS / f"{name}.ipynb")
    source = read_notebook(ROOT / "solutions" / "lesson2" / "lesson2.ipynb")
    return [(c.grade_id, c.source) for c in solution_sources(nb, solution_ids(source))]


def _grade(name: str, progress=lambda _: None) -> dict:
    """The performance report as it goes on the wire (and into the archive): its JSON."""
    report = grade(LESSON2, _cells(name), 5.0, spec_name=SPEC, progress=progress).report
    return report.model_dump(mode="json")


def _gate_has_a_second_look() -> bool:
    """Whether this host grades lesson 2 with the gate its measured gradings set (two looks)."""
    from effkit.measure import device_name
    from grader.scoring.perf import load_gate
    from grader.scoring.targets import target_for

    name = device_name("cpu")
    target = target_for(assignments.get("lesson2"), name)
    gate, _, _ = load_gate(
        "lesson2", LESSON2.spec("cpu", SPEC), target.table or target.device_class, name
    )
    return gate.from_gradings


def test_correct_but_no_faster_gets_no_performance_points():
    said: list[str] = []
    r = _grade("no_faster", said.append)
    assert r["points"] == 0 and not r["problems"] and r["gate"]["passed"]
    assert r["speedup"] < r["target"]["floor"]
    # Each phase is said as it ends: a grading killed from outside (an H200 lease cut lesson 3's
    # at 240 s twice) writes no report, and its log must still say where the time went.
    phases = ("initial weights are ready", "workers are ready", "warm-up done", "run 1/")
    where = [next((i for i, line in enumerate(said) if p in line), -1) for p in phases]
    assert -1 not in where and where == sorted(where), said


# the naive baseline handed in as the answer, by every road to it (the class of attack: effkit's own baseline as
# the learner's pipeline): 5 of 12 points (contract and augmentation) until 2026-12-07, a review
_FRESH_COPY = """import importlib.util

import effkit.workloads.cifar.pipelines as _pipes

_spec = importlib.util.spec_from_file_location("my_pipelines", _pipes.__file__)
_mine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mine)
FastPipeline = _mine.TorchvisionPipeline
"""
BASELINE_HANDED_IN = {
    "subclass": "class FastPipeline(cifar.TorchvisionPipeline):\n    pass\n",
    "built_name": 'FastPipeline = getattr(cifar, "Torchvision" + "Pipeline")\n',
    "fresh_copy_of_its_module": _FRESH_COPY,
}


def _with_pipeline(source: str) -> list[tuple[str, str]]:
    """The correct submission (its quiz answered) with ``source`` as its FastPipeline cell."""
    cells = _cells("correct")
    assert any(gid == "fast_pipeline" for gid, _ in cells)
    return [(gid, source if gid == "fast_pipeline" else s) for gid, s in cells]


def test_correct_but_no_faster_earns_every_other_point():
    """What `gpu_check`'s step grade-submissions-no_faster expects of it ("correctness only: no speed
    points"); on an H200 it got 5/12, not 7: its quiz was still the stub. Its pipeline is the learner's
    own per-image DataLoader (until 2026-12-07 it subclassed the naive one, which earns nothing now)."""
    from grader.scoring.checks import grade_cells

    assert "TorchvisionPipeline" not in dict(_cells("no_faster"))["fast_pipeline"]
    verdicts, _ = grade_cells(LESSON2, _cells("no_faster"))
    assert verdicts and all(v.passed for v in verdicts.values()), {
        g: v.reason for g, v in verdicts.items()
    }


@pytest.mark.parametrize("road", sorted(BASELINE_HANDED_IN))
def test_the_baseline_by_any_road_earns_no_pipeline_points(road):
    """A subclass or a built name meets the worker's refusal; a fresh copy of effkit's module gets past it and
    meets the parent's own run of the baseline: bit-identical batches for the same data and seed."""
    from grader.scoring.checks import grade_cells

    verdicts, _ = grade_cells(LESSON2, _with_pipeline(BASELINE_HANDED_IN[road]))
    reasons = {g: v.reason for g, v in verdicts.items()}
    assert verdicts["test_quiz"].passed, reasons  # the quiz is the learner's own: it still counts
    for gid in ("test_contract", "test_augmentation"):
        assert not verdicts[gid].passed, reasons
        said = verdicts[gid].reason
        want = "makes code from data" if road == "fresh_copy_of_its_module" else "naive baseline"
        assert want in said, said


def test_the_parent_refuses_batches_bit_identical_to_its_own_run_of_the_baseline():
    """What meets the baseline past the worker's tripwire and the cells' text (a copy of effkit's module
    loaded some other way): the parent's own run of it, same data and seed, bit for bit. Any pipeline of
    one's own, effkit's reference included, draws other batches and passes."""
    from effkit.workloads.cifar.pipelines import DevicePipeline, TorchvisionPipeline
    from grader.assignments.lesson2 import checks

    with pytest.raises(AssertionError, match="bit-identical to effkit's TorchvisionPipeline"):
        checks.contract(checks.not_the_baseline(checks.local(TorchvisionPipeline)))
    checks.contract(checks.not_the_baseline(checks.local(DevicePipeline)))


def _encoded_reference() -> str:
    """effkit's DevicePipeline re-seeded, renamed, zlib+base64 encoded and exec'd (a review, 2026-12-07: 12/12)."""
    import base64
    import inspect
    import zlib

    from effkit.workloads.cifar import pipelines

    source = inspect.getsource(pipelines.DevicePipeline).replace(
        "manual_seed(seed)", "manual_seed(seed + 1)"
    )
    source = source.replace("class DevicePipeline", "class FastPipeline")
    blob = base64.b64encode(zlib.compress(source.encode())).decode()
    return (
        "import base64, zlib\n"
        "from effkit.workloads.cifar.pipelines import *  # noqa\n"
        f"exec(zlib.decompress(base64.b64decode({blob!r})).decode())\n"
    )


def test_the_reference_encoded_and_run_from_data_earns_no_pipeline_points():
    from grader.scoring.checks import gate_problem, grade_cells

    cells = _with_pipeline(_encoded_reference())
    assert "DevicePipeline" not in dict(cells)["fast_pipeline"]
    verdicts, _ = grade_cells(LESSON2, cells)
    for gid in ("test_contract", "test_augmentation"):
        assert not verdicts[gid].passed and "makes code from data" in verdicts[gid].reason, (
            verdicts[gid]
        )
    assert "makes code from data" in gate_problem(LESSON2, cells)


# A constructor any learner would write: the device, the images, the labels, the seeded generator the exercise
# prescribes. It shared 4 statements with DevicePipeline.__init__ and read as a copy (10 of 12 points lost).
HONEST_INIT = """class FastPipeline:
    def __init__(self, dataset, batch_size, device, seed):
        self.device = torch.device(device)
        images = np.asarray(dataset.data)
        self.labels = torch.as_tensor(dataset.targets, dtype=torch.int64).to(self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.images = torch.as_tensor(images, device=self.device)
        self.batch_size = batch_size
"""


def test_a_constructor_like_the_references_is_no_copy_and_a_paste_of_the_class_is():
    import inspect

    from effkit.workloads.cifar import pipelines
    from grader.assignments.lesson2 import checks
    from grader.sandbox.answer_closure import copies_in

    assert copies_in(HONEST_INIT, checks.TWIN_SEEDS, checks.REPO) == []
    pasted = inspect.getsource(pipelines.DevicePipeline).replace("DevicePipeline", "FastPipeline")
    served = {answer for _, answer in copies_in(pasted, checks.TWIN_SEEDS, checks.REPO)}
    assert any(a.endswith((".__iter__", ".augment")) for a in served), served


def test_a_comment_naming_the_reference_is_no_use_of_it():
    """The name check reads code and strings, not comments: "# unlike DevicePipeline" cost the speed points."""
    from grader.scoring.checks import gate_problem

    correct = dict(_cells("correct"))["fast_pipeline"]
    assert (
        gate_problem(
            LESSON2, _with_pipeline("# unlike effkit's DevicePipeline, one gather\n" + correct)
        )
        == ""
    )
    used = gate_problem(LESSON2, _with_pipeline(correct + '\n_ = "DevicePipeline"\n'))
    assert "uses effkit's DevicePipeline" in used


def test_a_correct_per_image_pipeline_of_ones_own_earns_the_correctness_points():
    """`per_image_own.ipynb` crops and flips one image at a time in Python (numpy, no workers, no PIL): the
    refusal is of the course's baseline, not of per-image work. Its speed, measured (the grader README):
    on a CPU as fast as a batched pipeline, since the one-core setting charges naive for workers and PIL."""
    from grader.scoring.checks import grade_cells

    verdicts, _ = grade_cells(LESSON2, _cells("per_image_own"))
    assert all(v.passed for v in verdicts.values()), {g: v.reason for g, v in verdicts.items()}


@pytest.mark.untimed
def test_an_accuracy_drop_gets_no_performance_points_and_says_why():
    said: list[str] = []
    r = _grade("accuracy_drop", said.append)
    assert r["points"] == 0 and not r["gate"]["passed"]
    assert "below the gate" in " ".join(r["problems"]) and r["gate"]["mean_diff_pp"] < -5
    repeats = r["spec"]["repeats"]
    if not _gate_has_a_second_look():
        # Another CPU than the one lesson 2's gradings were measured on (an AMX Xeon, say): the gate
        # is the widened single-look model (its report says so); one look, scored as it is.
        assert len(r["accuracy_diffs_pp"]) == repeats and len(r["gate"]["look_means_pp"]) == 1, r[
            "gate"
        ]
        assert not any("more on fresh data" in line for line in said), said
        assert any("was measured on" in f and "widened" in f for f in r["flags"]), r["flags"]
        return
    # lesson 2's gate is set by measured gradings: below it, a second look on fresh data, scored alone
    assert len(r["accuracy_diffs_pp"]) == 2 * repeats and len(r["gate"]["look_means_pp"]) == 2, r[
        "gate"
    ]
    assert (
        all(d < -5 for d in r["accuracy_diffs_pp"])
        and "both below the gate" in r["gate"]["message"]
    )
    assert len(r["speed_ratios"]) == repeats * r["spec"]["epochs"] * r["spec"]["chunks_per_epoch"]
    assert any("more on fresh data before deciding" in line for line in said), said
    assert "the gate's second look" in feedback_text(load_performance(r))


@pytest.mark.untimed
def test_skipped_training_and_hard_coded_accuracy_are_caught():
    r = _grade("skip_training")
    assert r["points"] == 0
    text = " ".join(r["problems"])
    assert "iterated for 0 epoch(s)" in text  # the audit: no sample went through the pipeline
    assert r["gate"]["mean_diff_pp"] < -50  # the grader's own evaluation: near chance, not 99%
    assert "NaiveTrainer.evaluate" in " ".join(r["flags"])


def test_nan_loss_gets_a_clear_message():
    # The parent's correctness gate (out of every timed worker) sees the inf/NaN batches first,
    # so no timed worker is started for it.
    r = _grade("nan_loss")
    assert r["points"] == 0 and r["error"] is None
    text = " ".join(r["problems"])
    assert "correctness checks" in text and "NaN" in text and "normalisation" in text


@pytest.mark.system
def test_same_verdict_with_a_busy_core():
    """Robustness under load, bounded: 3 gradings of the reference while a process spins."""
    from grader.cli import tools

    summary = tools.stress("lesson2", times=3, busy=1, spec_name=SPEC)
    assert summary["same_verdict"], summary["verdicts"]
    assert summary["verdicts"] == [(5.0, True)], summary["verdicts"]


def _correct_cells() -> list[tuple[str, str]]:
    """(grade id, source) of the correct lesson-2 submission's solution cells."""
    source = read_notebook(ROOT / "solutions" / "lesson2" / "lesson2.ipynb")
    return [
        (c.grade_id, c.source)
        for c in solution_sources(
            read_notebook(SUBMISSIONS / "correct.ipynb"), solution_ids(source)
        )
    ]


def test_reaching_the_reference_without_naming_it_earns_no_speed_points():
    """The source check sees names only (`reference_names`); the behaviour check sees batches:
    effkit's DevicePipeline reached through getattr is still the reference answer."""
    from grader.scoring.checks import gate_problem

    cells = _correct_cells()
    # through the setup cell's module: importlib, which built the module's name before, is refused as text
    hidden = "FastPipeline = getattr(cifar, 'Device' + 'Pipeline')\n"
    sneaky = [(g, hidden if g == "fast_pipeline" else s) for g, s in cells]
    assert "DevicePipeline" not in hidden
    assert (
        gate_problem(LESSON2, cells) == ""
    )  # a learner's own device pipeline is not the reference
    problem = gate_problem(LESSON2, sneaky)
    # withheld by content in lesson 2's workers (its manifest): it raises, whatever its seed
    assert problem.startswith("test_contract:") and "lesson2's reference answer" in problem, problem


def test_a_renamed_reseeded_copy_of_the_reference_earns_no_speed_points():
    """effkit's DevicePipeline pasted as FastPipeline with its seed moved by one draws other batches, so
    the bit-identical judge passed it (12/12, a review): the cells are read for a twin of the withheld
    answer (copies_in, parsed, never run), whatever its names and seed."""
    import inspect

    from effkit.workloads.cifar import pipelines
    from grader.scoring.checks import gate_problem

    cells = _correct_cells()
    paste = (
        inspect.getsource(pipelines.DevicePipeline)
        .replace("class DevicePipeline", "class FastPipeline")
        .replace(".manual_seed(seed)", ".manual_seed(seed + 1)")
    )
    assert "DevicePipeline" not in paste and "seed + 1" in paste
    header = (
        "import math\nfrom collections.abc import Iterator\nimport numpy as np\nimport torch\n"
        "from effkit.workloads.cifar.pipelines import Batch, normalize\n"
    )
    copied = [(g, header + paste if g == "fast_pipeline" else s) for g, s in cells]
    problem = gate_problem(LESSON2, copied)
    # read as text before the contract is judged (own_plain_cells), and again by the speed gate
    assert problem.startswith("test_contract:") and "is a copy of" in problem, problem
    assert "not_the_reference:" in problem, problem
    assert gate_problem(LESSON2, cells) == ""  # the learner's own pipeline still counts


@pytest.mark.untimed
def test_training_off_the_clock_then_no_op_timed_steps_earns_no_speed_points():
    """Issue 41: the timed worker trains where nothing is timed (the grader's sets and initial weights
    if it can read them before its runs, else its own data) and makes every timed step a no-op.
    The parent ties the weights to work done in the timed chunks: no speed points, and it says why."""
    r = _grade("timed_forgery")
    assert r["points"] == 0, (r["speedup"], r["problems"])
    assert "timed chunk" in " ".join(r["problems"]), r["problems"]


# Issue 52 §1: honest where the probe worker checks, something else in the timed worker (told apart
# by the size of its training set: no environment variable or folder needed). The correctness
# checks pass each of them; what the timed run trained on is judged in the parent.
def _timed_attack(name: str) -> dict:
    r = _grade(name)
    assert not any("correctness checks" in p for p in r["problems"]), r["problems"]
    assert r["points"] == 0, (r["speedup"], r["problems"], r["error"])
    return r


@pytest.mark.untimed
def test_a_timed_step_on_part_of_each_batch_earns_no_speed_points():
    """(a) the grader's trainer steps on 40% of each batch (an instance attribute) while every sample
    is yielded once with its label: 12/12 at 2.3x before; the replay of its own kept batches (cosine
    1.0000000 for honest runs here) differs."""
    r = _timed_attack("timed_partial_step")
    assert "unlike the grader's replay" in " ".join(r["problems"]), r["problems"]


@pytest.mark.untimed
def test_no_augmentation_in_the_timed_run_earns_no_speed_points():
    """(b) no crop and no flip where it is timed: 12/12 before; the parent's judge of the batches."""
    r = _timed_attack("timed_no_augment")
    assert "random crops and flips expected" in " ".join(r["problems"]), r["problems"]


@pytest.mark.untimed
def test_the_reference_pipeline_in_the_timed_run_earns_no_speed_points():
    """(c) effkit's DevicePipeline in the timed worker only: by getattr it raises there. A fresh copy
    of its module (past that tripwire) needs importlib, which the cells' text check refuses before any
    worker judges it (were it to pass, the worker's view withholds lesson 2's answer, so the copy raises
    too; the parent's bit-identical judge: test_timed_batches)."""
    r = _timed_attack("timed_getattr_reference")
    assert "DevicePipeline is the reference answer" in str(r["error"]), r["error"]
    r = _grade("timed_fresh_reference")
    assert r["points"] == 0, (r["speedup"], r["problems"], r["error"])
    said = " ".join(r["problems"]) + str(r["error"])
    assert "makes code from data" in said and "importlib" in said, said


@pytest.mark.untimed
def test_the_baseline_pipeline_in_the_timed_run_earns_no_speed_points():
    """(c'') effkit's naive TorchvisionPipeline (without workers) in the timed worker only: the contract
    worker refused it, the timed judge accepts naive's batches, and one-core PIL without worker processes
    reached partial credit in lesson 14's gradings (1.13-1.22x). It raises in the timed worker now."""
    cell = dict(_cells("timed_getattr_reference"))["fast_pipeline"]
    attack = cell.replace(
        'getattr(_MODULE, "Device" + "Pipeline")(dataset, batch_size, device, seed)',
        'getattr(_MODULE, "Torchvision" + "Pipeline")(dataset, batch_size, device, seed, num_workers=0)',
    )
    assert attack != cell
    r = grade(LESSON2, _with_pipeline(attack), 5.0, spec_name=SPEC).report.model_dump(mode="json")
    assert not any("correctness checks" in p for p in r["problems"]), r["problems"]
    assert r["points"] == 0 and "TorchvisionPipeline is the naive baseline" in str(r["error"]), (
        r["speedup"],
        r["error"],
    )
