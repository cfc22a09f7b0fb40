"""Lesson 1's exercise, graded out of the kernel: the parent serves the trainer's device and knows
the truth; the learner's functions run in a sandboxed worker and only their return values cross.

Each grading starts one worker (~2-3 s) and runs the checks (parent-side waits, ~10 s for all).
"""

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from exercise_cells import POINTS as EXERCISE_POINTS  # noqa: E402  (tests/ is on sys.path)
from exercise_cells import grade, grade_id, reference_cells  # noqa: E402

from grader.assignments.lesson1 import checks as lesson1
from grader.scoring.quiz import load_key

LESSON = "lesson1"
ROOT = Path(__file__).resolve().parents[1]
SUBMISSIONS = ROOT / "tests" / "submissions" / "lesson1"
POINTS = EXERCISE_POINTS[LESSON]


# -- gradings (each one sandboxed worker) ------------------------------------------------------


# The reference's and the stub's gradings (every check passes / fails for NotImplementedError, no
# tampering flag, the worker's uid and what it lacked) are asserted on the instructor cycle's
# grading of both: tests/test_instructor_cycle.py::test_every_check_passes_on_the_reference_and_fails_on_the_stub_for_its_reason.


MISTAKES = {
    "timed_warmup": (
        """def measure_throughput(trainer, steps, warmup):
    start = time.perf_counter()
    trainer.train_steps(warmup)
    work = trainer.train_steps(steps)
    return work.samples / (time.perf_counter() - start)""",
        "Too low",
    ),
    "counts_batches": (
        """def measure_throughput(trainer, steps, warmup):
    trainer.train_steps(warmup)
    start = time.perf_counter()
    trainer.train_steps(steps)
    return steps / (time.perf_counter() - start)""",
        "Off by the batch size",
    ),
    "made_up": (
        """def measure_throughput(trainer, steps, warmup):
    return 1000.0""",
        "it ran 0 steps",
    ),
}


@pytest.mark.slow
def test_throughput_mistakes_fail_with_a_hint():
    for name, (source, hint) in MISTAKES.items():
        verdicts, _ = grade(
            LESSON, reference_cells(LESSON, measure_throughput=source), only=["test_throughput"]
        )
        v = verdicts["test_throughput"]
        assert not v.passed and hint in v.reason, (name, v.reason)


# Routes past the cells without the measurement they ask for (a review, 2026-12-07, traced by hand): the record was
# the truth of whatever ran, so a window of sleep, batches never trained on, or passes on one batch matched it.
WHAT_RAN = {
    "throughput: two batches around a sleep": (
        "measure_throughput",
        """def measure_throughput(trainer, steps, warmup):
    trainer.train_steps(warmup)
    batches = iter(trainer.pipeline)
    next(batches)
    time.sleep(2)
    next(batches)
    return 2 * trainer.pipeline.batch_size / 2""",
        "test_throughput",
        "not each a batch then a forward pass",
    ),
    "throughput: the steps run, a known sleep as the clock": (
        "measure_throughput",
        """def measure_throughput(trainer, steps, warmup):
    trainer.train_steps(warmup)
    work = trainer.train_steps(steps // 2)
    time.sleep(10)
    work2 = trainer.train_steps(steps - steps // 2)
    return (work.samples + work2.samples) / 10""",
        "test_throughput",
        "sat idle",
    ),
    "throughput: a figure guessed from a typical step": (
        "measure_throughput",
        """def measure_throughput(trainer, steps, warmup):
    trainer.train_steps(warmup)
    work = trainer.train_steps(steps)
    return work.samples / (steps * 0.165)""",
        "test_throughput",
        "in every call",
    ),
    "data wait: read off one next()": (
        "data_wait_share",
        """def data_wait_share(trainer, steps):
    batches = iter(trainer.pipeline)
    start = time.perf_counter()
    x, y = next(batches)
    wait = time.perf_counter() - start
    trainer.model(x)
    for x, y in itertools.islice(batches, steps - 1):
        trainer.model(x)
    return 0.735 if wait > 0.043 else 0.07""",
        "test_data_wait",
        "data-wait share",
    ),
    "data wait: batches fetched, none trained on": (
        "data_wait_share",
        """def data_wait_share(trainer, steps):
    for _ in itertools.islice(trainer.pipeline, steps):
        pass
    return 1.0""",
        "test_data_wait",
        "did not run a forward pass after each",
    ),
    "data wait: passes on one batch drown the record": (
        "data_wait_share",
        """def data_wait_share(trainer, steps):
    x, y = next(iter(trainer.pipeline))
    for _ in range(200):
        trainer.model(x)
    return 0.05""",
        "test_data_wait",
        "did not run a forward pass after each",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("route", sorted(WHAT_RAN))
def test_what_ran_is_checked_not_only_what_came_back(route):
    name, source, cell, reason = WHAT_RAN[route]
    verdicts, _ = grade(LESSON, reference_cells(LESSON, **{name: source}), only=[cell])
    v = verdicts[cell]
    assert not v.passed and reason in v.reason, (route, v.reason)


def test_a_name_is_confirmed_right_or_wrong():
    """Every scripted run of answers: a first answer is never final on its own, and a coin (every
    sequence of three names equally likely) names a trainer right exactly half the time."""
    import itertools as it

    def scripted(names):
        answers = iter(names)
        return lesson1.confirmed_answer(lambda: next(answers))

    assert scripted(["compute", "input pipeline", "input pipeline"]) == "input pipeline"
    assert scripted(["input pipeline", "compute", "compute"]) == "compute"
    assert scripted(["compute", "compute", "never asked"]) == "compute"
    runs = list(it.product(lesson1.BOTTLENECKS, repeat=3))
    right = sum(scripted(r) == "compute" for r in runs)
    assert right * 2 == len(runs)


def test_device_server_knows_training_steps_and_idle_time(monkeypatch):
    t = [0.0]
    monkeypatch.setattr(lesson1.time, "perf_counter", lambda: t[0])
    monkeypatch.setattr(lesson1.time, "sleep", lambda s: t.__setitem__(0, t[0] + s))
    server = lesson1.DeviceServer(data_s=0.01, compute_s=0.09)
    for kind in ("data", "compute") * 3:
        server({"kind": kind, "n": 8})
    assert server.training_steps() == 3 and server.idle_share(warmup=1) == pytest.approx(0.0)
    t[0] += 0.2  # a learner's sleep inside the window
    server({"kind": "data", "n": 8})
    server({"kind": "compute", "n": 8})
    assert server.idle_share(warmup=1) == pytest.approx(0.2 / 0.5)
    server({"kind": "data", "n": 8})  # a loop that stops on its next next()
    assert server.training_steps() is None and server.training_steps(trailing_batch=True) == 4
    server({"kind": "compute", "n": 8})
    server({"kind": "compute", "n": 8})  # a pass with no batch of its own
    assert server.training_steps(trailing_batch=True) is None


@pytest.mark.slow
def test_a_fixed_bottleneck_and_the_compute_share_fail():
    fixed = 'def name_bottleneck(trainer):\n    return "compute"'
    inverted = """def data_wait_share(trainer, steps):
    split = DataWaitSplit(trainer.device)
    for x, y in split.wrap(itertools.islice(trainer.pipeline, steps)):
        trainer.loss_fn(trainer.model(x), y).backward()
    return 1 - split.data_share"""
    verdicts, _ = grade(
        LESSON,
        reference_cells(LESSON, name_bottleneck=fixed, data_wait_share=inverted),
        only=["test_bottleneck", "test_data_wait"],
    )
    assert (
        not verdicts["test_bottleneck"].passed and "expected" in verdicts["test_bottleneck"].reason
    )
    assert "compute share" in verdicts["test_data_wait"].reason, verdicts["test_data_wait"].reason


@pytest.mark.slow
def test_a_bottleneck_named_from_the_data_wait_share_fails():
    """Lesson 1 shows a data-wait timer undercounts a pipeline whose workers share the model's cores;
    the old reference decided from it. One input-bound trainer hides its pipeline time there."""
    from_share = (
        "def name_bottleneck(trainer):\n"
        '    return "input pipeline" if data_wait_share(trainer, steps=5) > 0.5 else "compute"'
    )
    verdicts, _ = grade(
        LESSON, reference_cells(LESSON, name_bottleneck=from_share), only=["test_bottleneck"]
    )
    v = verdicts["test_bottleneck"]
    assert not v.passed and "data-wait timer cannot see it" in v.reason, v.reason


# Two shortcuts that read the bottleneck off one absolute duration (each once passed test_data_wait
# and test_bottleneck, 6 of the 10 function points): five whole steps against 0.13 s, and one forward
# pass on a batch fetched once against 0.093 s (the compute time).
STEP_TIME_SHORTCUT = """def _seconds(trainer):
    start = time.perf_counter()
    trainer.train_steps(5)
    return (time.perf_counter() - start) / 5

def data_wait_share(trainer, steps):
    return 0.75 if _seconds(trainer) > 0.13 else 0.07

def name_bottleneck(trainer):
    return "input pipeline" if _seconds(trainer) > 0.13 else "compute"
"""
COMPUTE_TIME_SHORTCUT = """def _seconds(trainer):
    x, y = next(iter(trainer.pipeline))
    for _ in range(5):
        start = time.perf_counter()
        trainer.loss_fn(trainer.model(x), y).backward()
    return time.perf_counter() - start

def data_wait_share(trainer, steps):
    return 0.75 if _seconds(trainer) < 0.093 else 0.07

def name_bottleneck(trainer):
    return "input pipeline" if _seconds(trainer) < 0.093 else "compute"
"""


def test_no_single_duration_names_the_bottleneck():
    """The checks' trainers come in matched pairs: a compute-bound and an input-bound one with the same
    compute time, and a compute-bound and a hidden-pipeline (or input-bound) one with the same step time
    (and the same next() time where hidden). A line on any one duration answers both of a pair alike."""

    class Ctx:
        rng = random.Random(0)

    def durations(server):
        return {
            "step": server.data_s + server.compute_s + server.hidden_s,
            "compute": server.compute_s,
            "next": server.data_s,
        }

    for hidden in (True, False):
        for _ in range(200):
            (c1, m1), (i1, n1), (c2, m2), (i2, n2) = [
                (kind, make()) for kind, _, make in lesson1.matched_trainers(Ctx, hidden)
            ]
            assert (c1, i1, c2, i2) == ("compute", "input pipeline", "compute", "input pipeline")
            a, b, c, d = (durations(s) for s in (m1, n1, m2, n2))
            assert a["compute"] == pytest.approx(b["compute"], rel=1e-12)
            assert c["step"] == pytest.approx(d["step"], rel=1e-12)
            if hidden:
                assert c["next"] == pytest.approx(d["next"], rel=1e-12)
            # the real measurement still tells them apart: a step with the pipeline over one without
            for server, kind in ((m1, c1), (n1, i1), (m2, c2), (n2, i2)):
                ratio = durations(server)["step"] / server.compute_s
                assert (ratio > 2.5) == (kind == "input pipeline"), (kind, ratio)
            assert min(a["step"], c["step"]) >= 0.06  # the channel's delay stays a small share
    # the data-wait check's third pair: the same next() time, shares far apart
    for _ in range(200):
        (kc, mc), (ki, mi) = [(kind, make()) for kind, _, make in lesson1.next_matched_pair(Ctx)]
        assert (kc, ki) == ("compute", "input pipeline") and mc.data_s == mi.data_s
        share = {k: m.data_s / (m.data_s + m.compute_s) for k, m in ((kc, mc), (ki, mi))}
        assert share["compute"] < 0.11 and share["input pipeline"] > 0.66
        assert mi.data_s + mi.compute_s >= 0.037


@pytest.mark.slow
@pytest.mark.parametrize("shortcut", ["step time", "compute time"])
def test_a_bottleneck_and_share_read_off_one_duration_fail(shortcut):
    source = STEP_TIME_SHORTCUT if shortcut == "step time" else COMPUTE_TIME_SHORTCUT
    verdicts, _ = grade(
        LESSON,
        reference_cells(LESSON, data_wait_share=source, name_bottleneck="# in the cell above"),
        only=["test_bottleneck", "test_data_wait"],
    )
    for check in ("test_bottleneck", "test_data_wait"):
        assert not verdicts[check].passed, (check, verdicts[check].lines)


@pytest.mark.slow
def test_in_process_forgery_is_flagged_and_earns_nothing():
    """Clock patching, a method planted on the grader's trainer, frames walked: reported as flags,
    and the made-up figure still fails (the parent's record has no steps)."""
    forged = """import sys
time.perf_counter = lambda: 0.0
def measure_throughput(trainer, steps, warmup):
    sys._getframe(1)
    trainer.train_steps = lambda n: None
    trainer.train_steps(warmup + steps)
    return 32 * 40.0"""
    verdicts, report = grade(
        LESSON, reference_cells(LESSON, measure_throughput=forged), only=["test_throughput"]
    )
    assert not verdicts["test_throughput"].passed
    flags = " | ".join(report["flags"])
    assert (
        "time.perf_counter" in flags
        and "RemoteTrainer: train_steps" in flags
        and "stack frames" in flags
    )


@pytest.mark.slow
def test_nbgrader_autograde_never_runs_the_kernel_and_ignores_forged_outputs(tmp_path):
    """The real `nbgrader autograde` on a stub whose saved outputs and extra cells forge points (0).
    The reference (full) and the exercise as handed out (0) through nbgrader, cell by cell: the
    instructor cycle's grading of both (tests/test_instructor_cycle.py)."""
    from nbgrader.api import Gradebook

    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    env = dict(os.environ, EFFKIT_COURSE_ROOT=str(tmp_path))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])

    def nbgrader(command: str, timeout: float | None = None):  # on lesson1, in the copied course
        return subprocess.run(
            [sys.executable, "-m", "nbgrader", command, "lesson1", "--force"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    gen = nbgrader("generate_assignment")
    assert gen.returncode == 0, gen.stderr[-3000:]
    subs = {"eve": SUBMISSIONS / "forged_outputs.forged-ipynb"}
    for student, notebook in subs.items():
        folder = tmp_path / "course" / "submitted" / student / "lesson1"
        folder.mkdir(parents=True)
        shutil.copy(notebook, folder / "lesson1.ipynb")
    run = nbgrader("autograde", timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    with Gradebook(f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}") as gb:
        scores = {
            s: {
                g.name: g.score for g in gb.find_submission_notebook("lesson1", "lesson1", s).grades
            }
            for s in subs
        }
    assert scores["eve"] == dict.fromkeys(POINTS, 0)
    assert not (tmp_path / "course" / "pwned").exists()  # eve's extra cell never ran
    graded = nbformat.read(
        tmp_path / "course" / "autograded" / "eve" / "lesson1" / "lesson1.ipynb", as_version=4
    )
    test = next(c for c in graded.cells if grade_id(c) == "test_throughput")
    assert any(o.output_type == "error" and "NotImplementedError" in o.evalue for o in test.outputs)


def test_device_server_records_the_truth():
    server = lesson1.DeviceServer(data_s=0.01, compute_s=0.02, cold_s=0.05)
    for _ in range(3):
        server({"kind": "data", "n": 8})
        server({"kind": "compute", "n": 8})
    assert server.steps() == 3
    share = server.data_share()
    assert 0.4 < share < 0.75  # the cold start is data time too
    thr = server.throughput(warmup=1)
    # two steps of 30 ms asked for: a busy machine only oversleeps (a lower figure), never under
    assert 16 / 0.2 < thr < 16 / 0.055


def test_a_hidden_pipeline_costs_the_next_forward_pass_not_next(monkeypatch):
    """Workers preparing batches slow the model, not ``next()``: a step on a batch fetched once
    pays nothing extra. The waits asked for are recorded instead of slept (no timing in the test)."""
    asked = []
    monkeypatch.setattr(lesson1.time, "sleep", asked.append)
    server = lesson1.DeviceServer(data_s=0.001, compute_s=0.005, hidden_s=0.03)
    for kind in ("data", "compute", "compute", "data", "compute"):
        server({"kind": kind, "n": 8})
    assert asked == pytest.approx([0.001, 0.035, 0.005, 0.001, 0.035])


@pytest.mark.slow
def test_a_wrong_quiz_choice_is_told_why_it_is_wrong():
    # q1 wrong, the rest right
    wrong = 'QUIZ_ANSWERS = {"q1": "b", "q2": "b", "q3": "b", "q4": "c"}'
    key, why = load_key("lesson1")
    assert key == {"q1": "c", "q2": "b", "q3": "b", "q4": "c"}  # keep `wrong` in step
    verdicts, _ = grade(LESSON, reference_cells(LESSON, quiz=wrong), only=["test_quiz"])
    v = verdicts["test_quiz"]
    assert not v.passed and "3 of 4 answers right" in v.reason, v.reason
    assert f"q1: (b) — {why['q1']['b']}" in v.reason, v.reason
    for question, choices in why.items():  # feedback only for wrong choices
        assert key[question] not in choices and choices, question
