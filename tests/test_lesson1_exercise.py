"""Lesson 1's exercise (measure first): the grader's checks pass the reference solution and fail
the classic mistakes with messages that say what was expected and what came out.

The checks are called directly on functions taken from the notebooks (fast); one test executes
the solution notebook in a kernel, as nbgrader does, and scores it with nbgrader's own code.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from effkit.measure import sync
from grader import lesson1

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "lesson1" / "lesson1.ipynb"
EXERCISE = ROOT / "exercises" / "lesson1" / "lesson1.ipynb"
POINTS = {"test_throughput": 4, "test_data_wait": 2, "test_bottleneck": 4}


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _functions(path: Path) -> dict:
    """The setup and solution cells of a notebook, executed: what the test cells see."""
    nb = nbformat.read(path, as_version=4)
    namespace: dict = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") == "setup" or meta.get("solution"):
            exec(compile(cell.source, f"{path.name}:{meta['grade_id']}", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def solution() -> dict:
    return _functions(SOLUTION)


# -- fast: the notebooks' structure ------------------------------------------------------------


def test_source_notebook_is_an_nbgrader_assignment():
    nb = nbformat.read(SOLUTION, as_version=4)
    cells = {_grade_id(c): c for c in nb.cells if _grade_id(c)}
    setup = cells["setup"]
    assert setup.metadata.nbgrader["locked"] and not setup.metadata.nbgrader["grade"]
    # the grader's clock is captured when this cell imports it, before any learner code runs
    assert "from grader.lesson1 import" in setup.source
    meta = {gid: cell.metadata.nbgrader for gid, cell in cells.items()}
    graded = {gid: m["points"] for gid, m in meta.items() if m["grade"]}
    assert graded == POINTS
    assert all(cells[g].metadata.nbgrader["locked"] for g in POINTS)
    assert "BEGIN HIDDEN TESTS" in cells["test_throughput"].source + cells["test_bottleneck"].source
    for gid in ("measure_throughput", "data_wait_share", "name_bottleneck"):
        assert cells[gid].metadata.nbgrader["solution"]
        assert "### BEGIN SOLUTION" in cells[gid].source
    text = "".join(c.source for c in nb.cells)
    assert f"±{lesson1.TOLERANCE:.0%}" in text, "the notebook must state the tolerance"


def test_exercise_has_stubs_and_no_solutions_or_hidden_tests():
    text = EXERCISE.read_text()
    assert "BEGIN SOLUTION" not in text and "HIDDEN" not in text
    assert "check_throughput_hidden" not in text and "work.samples / " not in text
    stubs = _functions(EXERCISE)
    with pytest.raises(NotImplementedError):
        stubs["measure_throughput"](None, 1, 0)


def test_hints_name_the_likely_mistake():
    assert "count samples" in lesson1._throughput_hint(1 / 32, 32)
    assert "warm-up" in lesson1._throughput_hint(0.5, 32)
    assert "Too high" in lesson1._throughput_hint(2.0, 32)


def test_burn_cpu_spends_cpu_time_not_just_wall_time():
    start = time.thread_time()
    lesson1.burn_cpu(0.05)
    assert time.thread_time() - start >= 0.05


# -- slow: the checks on real trainers ---------------------------------------------------------


@pytest.mark.slow
def test_reference_solution_passes_every_check(solution, capsys):
    lesson1.check_throughput(solution["measure_throughput"])
    lesson1.check_throughput_hidden(solution["measure_throughput"])
    lesson1.check_data_wait(solution["data_wait_share"])
    lesson1.check_bottleneck(solution["name_bottleneck"])
    lesson1.check_bottleneck_hidden(solution["name_bottleneck"])
    out = capsys.readouterr()
    assert out.out.count("  ok  ") == 8 and "[captured stderr]" not in out.out
    assert out.err == ""


def _steps_not_samples(trainer, steps, warmup):
    trainer.train_steps(warmup)
    sync(trainer.device)
    start = time.perf_counter()
    trainer.train_steps(steps)
    sync(trainer.device)
    return steps / (time.perf_counter() - start)


def _no_warmup(trainer, steps, warmup):
    sync(trainer.device)
    start = time.perf_counter()
    work = trainer.train_steps(steps)
    sync(trainer.device)
    return work.samples / (time.perf_counter() - start)


def _times_warmup(trainer, steps, warmup):
    sync(trainer.device)
    start = time.perf_counter()
    trainer.train_steps(warmup)
    work = trainer.train_steps(steps)
    sync(trainer.device)
    return work.samples / (time.perf_counter() - start)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mistake", "hint"),
    [(_steps_not_samples, "count samples"), (_no_warmup, "warm-up"), (_times_warmup, "warm-up")],
    ids=["steps-not-samples", "no-warmup", "times-warmup"],
)
def test_wrong_throughput_fails_with_a_hint(mistake, hint):
    with pytest.raises(AssertionError) as err:
        lesson1.check_throughput(mistake)
    message = str(err.value)
    assert "expected your throughput within ±25% of the grader's measurement" in message
    assert "the grader's" in message and "median ratio" in message and hint in message


@pytest.mark.slow
def test_throughput_off_by_two_fails(solution):
    def doubled(trainer, steps, warmup):
        return 2 * solution["measure_throughput"](trainer, steps, warmup)

    with pytest.raises(AssertionError, match=r"median ratio (1\.[6-9]|2\.\d)\d*\. Too high"):
        lesson1.check_throughput(doubled)


@pytest.mark.slow
@pytest.mark.parametrize("answer", ["compute", "input pipeline"])
def test_always_the_same_bottleneck_fails(answer):
    other = "input pipeline" if answer == "compute" else "compute"
    wrong = f"-bound trainer .*expected '{other}', got '{answer}'"
    with pytest.raises(AssertionError, match=wrong):
        lesson1.check_bottleneck(lambda trainer: answer)


@pytest.mark.slow
def test_a_name_outside_the_choices_fails():
    choices = r"to return one of \('input pipeline', 'compute'\), got 'data'"
    with pytest.raises(AssertionError, match=choices):
        lesson1.check_bottleneck(lambda trainer: "data")


@pytest.mark.slow
def test_compute_share_instead_of_data_share_fails(solution):
    def compute_share(trainer, steps):
        return 1 - solution["data_wait_share"](trainer, steps)

    with pytest.raises(AssertionError, match=r"data-wait share <= 35%, got \d+%"):
        lesson1.check_data_wait(compute_share)


@pytest.mark.slow
def test_one_disturbed_measurement_does_not_decide(solution, capsys):
    """A load burst spoils one call: the checks measure again instead of failing a right answer."""
    calls = {"throughput": 0, "share": 0, "name": 0}

    def spiked_throughput(trainer, steps, warmup):
        calls["throughput"] += 1
        value = solution["measure_throughput"](trainer, steps, warmup)
        return value * 10 if calls["throughput"] == 2 else value

    def spiked_share(trainer, steps):
        calls["share"] += 1
        return 0.9 if calls["share"] == 1 else solution["data_wait_share"](trainer, steps)

    def spiked_name(trainer):
        calls["name"] += 1
        return "compute" if calls["name"] == 1 else solution["name_bottleneck"](trainer)

    lesson1.check_throughput(spiked_throughput)
    lesson1.check_data_wait(spiked_share)
    lesson1.check_bottleneck(spiked_name)
    out = capsys.readouterr().out
    spiked = re.search(r"ratios [\d.]+, ([\d.]+), [\d.]+\): median ratio", out)
    assert spiked and float(spiked.group(1)) > 5, out  # the 10x call was seen, and outvoted
    assert calls["throughput"] == lesson1.CALLS
    assert calls["share"] == 1 + lesson1.RETRIES and calls["name"] == 1 + lesson1.RETRIES


@pytest.mark.slow
def test_untouched_exercise_fails_every_check_with_the_stub_error():
    stubs = _functions(EXERCISE)
    checks = [(lesson1.check_throughput, "measure_throughput"),
              (lesson1.check_data_wait, "data_wait_share"),
              (lesson1.check_bottleneck, "name_bottleneck")]  # fmt: skip
    for check, name in checks:
        stub = rf"{name}\(trainer.*\) raised NotImplementedError"
        with pytest.raises(AssertionError, match=stub):
            check(stubs[name])


@pytest.mark.slow
def test_nbgrader_autograde_scores_the_solution_full_and_the_untouched_exercise_zero(tmp_path):
    """The real `nbgrader autograde`: the reference solution, and the exercise as handed out."""
    from nbgrader.api import Gradebook

    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    env = dict(os.environ, EFFKIT_COURSE_ROOT=str(tmp_path))
    # nbgrader runs its `alembic` executable: put the interpreter's bin folder on PATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    nbgrader = [sys.executable, "-m", "nbgrader"]
    gen = subprocess.run([*nbgrader, "generate_assignment", "lesson1", "--force"], cwd=ROOT,
                         env=env, capture_output=True, text=True)  # fmt: skip
    assert gen.returncode == 0, gen.stderr[-3000:]
    for student, notebook in {"ada": SOLUTION, "una": EXERCISE}.items():
        folder = tmp_path / "course" / "submitted" / student / "lesson1"
        folder.mkdir(parents=True)
        shutil.copy(notebook, folder / "lesson1.ipynb")
    run = subprocess.run([*nbgrader, "autograde", "lesson1", "--force"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    with Gradebook(f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}") as gb:
        scores = {s: {g.name: g.score
                      for g in gb.find_submission_notebook("lesson1", "lesson1", s).grades}
                  for s in ("ada", "una")}  # fmt: skip
    assert scores["ada"] == POINTS
    assert scores["una"] == dict.fromkeys(POINTS, 0)


@pytest.mark.slow
def test_solution_notebook_runs_cleanly_and_scores_full_marks():
    """As nbgrader autograde executes it: every test cell full marks, nothing on stderr."""
    from nbclient import NotebookClient
    from nbgrader.utils import determine_grade

    nb = nbformat.read(SOLUTION, as_version=4)
    client = NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(ROOT)}})  # fmt: skip
    client.execute(env=dict(os.environ, NBGRADER_EXECUTION="autograde"))
    scores = {}
    for cell in nb.cells:
        if _grade_id(cell) in POINTS:
            streams = [o.get("name") for o in cell.outputs if o.output_type == "stream"]
            assert "stderr" not in streams, json.dumps(cell.outputs)[-2000:]
            scores[_grade_id(cell)] = determine_grade(cell)[0]
    assert scores == POINTS
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors


@pytest.mark.slow
def test_a_made_up_figure_fails_naming_what_was_expected():
    with pytest.raises(AssertionError, match=r"to run 2 warm-up steps, then \d+ timed steps, with "
                                             r"trainer.train_steps; it ran 0 steps"):  # fmt: skip
        lesson1.check_throughput(lambda trainer, steps, warmup: 1000.0)
