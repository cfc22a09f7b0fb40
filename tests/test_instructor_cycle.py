"""The instructor's whole nbgrader cycle on every exercise, with the real nbgrader 0.9.

generate_assignment -> two submissions per exercise (the reference solution and the untouched
student version) -> autograde (performance cells filled in by the grader) -> generate_feedback ->
export. Everything happens in a temporary course root, so the repository's own course/ and
exercises/ are never touched.

Two courses, built only when a selected test needs one: the exercises whose grading times
something (``TIMED``: marked ``timed``, run in the suite's timed lane, tests/lanes.py) and the
rest (lessons 8, 11, 12: memory, bytes on the wire and epochs are counted, never timed), marked
``system``: `make test-system` grades them (see PARAMS).
"""

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from exercise_cells import POINTS as CELL_POINTS  # noqa: E402  (tests/ is on sys.path)

from effkit import syllabus
from grader import assignments
from grader.sandbox import bwrap_view

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = sorted(
    p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file()
)
UNTIMED = tuple(m.id for m in assignments.manifests() if not m.clocked)  # counts, not a clock
TIMED = tuple(aid for aid in EXERCISES if aid not in UNTIMED)
# The untimed course (lessons 8, 11, 12: ~3 min to build) runs in `make test-system`, not in CI's 40
# minutes: CI's untimed lane was its critical path (2,346 s on a 2-core AMX Xeon, 2026-12-06); the
# timed course keeps the whole nbgrader cycle in CI, and each untimed lesson's grading has its own tests
PARAMS = [
    pytest.param(aid, marks=[pytest.mark.timed] if aid in TIMED else [pytest.mark.system])
    for aid in EXERCISES
]


def _env(root: Path) -> dict:
    # the same out-of-kernel draws every run (grader.scoring.checks.TEST_SEED_ENV): a reference must not
    # fail CI on an unlucky task
    env = dict(os.environ, EFFKIT_COURSE_ROOT=str(root), EFFKIT_GRADER_TEST_SEED="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _run(root: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=_env(root),
        text=True,
        capture_output=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def courses(tmp_path_factory):
    built: dict[bool, tuple[Path, dict]] = {}

    def course(aid: str) -> tuple[Path, dict]:
        timed = aid in TIMED
        if timed not in built:
            built[timed] = _cycle(tmp_path_factory, TIMED if timed else UNTIMED)
        return built[timed]

    return course


@pytest.fixture
def cycle(courses, aid):
    return courses(aid)


def _cycle(tmp_path_factory, exercises) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    logs = {}
    # One nbgrader process for every assignment where nbgrader takes a glob ("*"): each start
    # costs ~5 s on the CI machine, twice per exercise otherwise.
    _run(root, "-m", "nbgrader", "generate_assignment", "*", "--force")
    for aid in exercises:
        for student, source in (("ref", root / "solutions"), ("weak", root / "exercises")):
            folder = root / "course" / "submitted" / student / aid
            folder.mkdir(parents=True)
            shutil.copy(source / aid / f"{aid}.ipynb", folder / f"{aid}.ipynb")
        t0 = time.perf_counter()
        logs[aid] = _run(root, "-m", "grader", "autograde", aid).stdout
        print(
            f"[instructor cycle] autograde {aid} (reference + stub): {time.perf_counter() - t0:.0f} s"
        )  # -s shows it
    _run(root, "-m", "nbgrader", "generate_feedback", "*", "--force")
    _run(root, "-m", "nbgrader", "export", f"--to={root / 'course' / 'grades.csv'}")
    return root, logs


def _max_score(aid: str) -> float:
    import nbformat

    nb = nbformat.read(ROOT / "solutions" / aid / f"{aid}.ipynb", as_version=4)
    return sum(c.metadata.get("nbgrader", {}).get("points", 0) for c in nb.cells)


def _grades(root: Path) -> dict[tuple[str, str], float]:
    with (root / "course" / "grades.csv").open() as fh:
        return {
            (r["assignment"], r["student_id"]): float(r["raw_score"]) for r in csv.DictReader(fh)
        }


def _cells_report(root: Path, student: str, aid: str) -> dict:
    """The out-of-kernel verdicts the cycle's autograde kept (grader.frontends.nbgrader_plugin)."""
    path = root / "course" / "autograded" / student / aid / f"{aid}.cells.json"
    return json.loads(path.read_text())


def _cell_scores(root: Path, student: str, aid: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'course' / 'gradebook.db'}") as gb:
        return {g.name: g.score for g in gb.find_submission_notebook(aid, aid, student).grades}


def test_every_ready_lesson_has_an_exercise():
    """The syllabus's ready lessons, the grader's registry and the instructor's notebooks agree."""
    assert EXERCISES == sorted(assignments.known())
    assert EXERCISES == sorted(lesson.assignment for lesson in syllabus.ready())


@pytest.mark.parametrize("aid", PARAMS)
def test_exercises_are_generated_from_solutions(cycle, aid):
    """exercises/ must be exactly what `nbgrader generate_assignment` makes of solutions/."""
    import nbformat

    root, _ = cycle
    fresh = nbformat.read(root / "exercises" / aid / f"{aid}.ipynb", as_version=4)
    stored = nbformat.read(ROOT / "exercises" / aid / f"{aid}.ipynb", as_version=4)

    def strip(nb):
        return [(c.cell_type, c.source, c.metadata.get("nbgrader")) for c in nb.cells]

    assert strip(fresh) == strip(stored), f"exercises/{aid} is stale: run `make exercises`"
    text = json.dumps(strip(stored))
    assert "BEGIN SOLUTION" not in text and "HIDDEN" not in text


@pytest.mark.parametrize("aid", PARAMS)
def test_reference_gets_full_marks_and_untouched_version_nothing(cycle, aid):
    root, logs = cycle
    grades = _grades(root)
    assert grades[(aid, "ref")] == pytest.approx(_max_score(aid)), logs[aid][-3000:]
    assert grades[(aid, "weak")] == 0, logs[aid][-3000:]


@pytest.mark.parametrize("aid", PARAMS)
def test_feedback_html_shows_the_graders_report(cycle, aid):
    root, _ = cycle
    weak_html = (root / "course" / "feedback" / "weak" / aid / f"{aid}.html").read_text()
    assert "output_error" in weak_html and "NotImplementedError" in weak_html  # why it scored 0
    ref_html = (root / "course" / "feedback" / "ref" / aid / f"{aid}.html").read_text()
    assert "output_error" not in ref_html
    assert "EFFKIT_GRADER_TEST_SEED fixes the checks" in ref_html  # a seeded grading says so
    try:
        a = assignments.get(aid)
    except ValueError:
        return  # no performance cell: the check messages above are the report
    if a.performance_cell:
        report = json.loads(
            (root / "course" / "autograded" / "ref" / aid / f"{a.notebook}.grader.json").read_text()
        )
        assert report["points"] > 0
        weak = json.loads(
            (
                root / "course" / "autograded" / "weak" / aid / f"{a.notebook}.grader.json"
            ).read_text()
        )
        assert weak["points"] == 0 and "still raise NotImplementedError" in weak["problems"][0]
        # The grader's feedback block, with the device and the measured speedup, reached the HTML.
        assert report["device"] in ref_html
        assert f"{report['speedup']:.2f}x" in ref_html


# The lessons whose own tests graded the reference and the stub a second time, in CI's timed lane
# (tests/test_lesson{1,4,5}_exercise.py, and test_lesson1's nbgrader run of both): what they
# asserted is asserted here, on this cycle's grading of the same notebooks at the same seed.
SECOND_GRADING_FOLDED = ("lesson1", "lesson4", "lesson5")
REFERENCE_LINES = {"lesson4": ("test_recipe", "wall time to it")}  # the recipe's verdict says it
NO_FLAGS = ("lesson5",)  # its reference's grading raises no flag at all
SEED_NOTE = "secret draws: EFFKIT_GRADER_TEST_SEED"  # the cycle's seeded gradings say so


@pytest.mark.parametrize("aid", [p for p in PARAMS if p.values[0] in SECOND_GRADING_FOLDED])
def test_every_check_passes_on_the_reference_and_fails_on_the_stub_for_its_reason(cycle, aid):
    root, logs = cycle
    points = CELL_POINTS[aid]
    ref = _cells_report(root, "ref", aid)
    assert {g: v["passed"] for g, v in ref["cells"].items()} == dict.fromkeys(points, True), ref
    assert _cell_scores(root, "ref", aid) == points, logs[aid][-3000:]
    flags = ref["flags"]
    assert not [f for f in flags if "replaced" in f or "frames" in f], flags
    assert not (aid in NO_FLAGS and flags), flags
    if aid in REFERENCE_LINES:
        gid, words = REFERENCE_LINES[aid]
        assert any(words in line for line in ref["cells"][gid]["lines"]), ref["cells"][gid]
    if os.geteuid() == 0:  # the probe worker ran as nobody, and said what it could not have
        assert ref["worker_uid"] == 65534
        unavailable = [u for u in ref["unavailable"] if not u.startswith(SEED_NOTE)]
        assert unavailable == bwrap_view.unavailable_here(), ref["unavailable"]
    weak = _cells_report(root, "weak", aid)
    assert sorted(weak["cells"]) == sorted(points), weak
    for gid, v in weak["cells"].items():
        assert not v["passed"] and "NotImplementedError" in v["reason"], (gid, v)
    assert _cell_scores(root, "weak", aid) == dict.fromkeys(points, 0), logs[aid][-3000:]
