"""Each lesson's manifest (grader/assignments/<id>/manifest.py) against what it describes: the
instructor's notebook, effkit, the syllabus and the grader's own Assignment; and the registry's clear
error for a lesson package that forgot to declare one."""

import importlib
import inspect
import sys

import nbformat
import pytest

from effkit import syllabus
from grader import assignments
from grader.kit.manifest import Manifest
from grader.sandbox import learner_view

ROOT = learner_view.REPO_ROOT


@pytest.mark.parametrize("aid", assignments.known())
def test_a_manifest_says_what_its_lesson_is(aid):
    m, a = assignments.manifest(aid), assignments.get(aid)
    nb = nbformat.read(ROOT / "solutions" / aid / f"{a.notebook}.ipynb", as_version=4)
    graded = {
        c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    }
    assert graded == m.points  # the notebook gives the points the manifest declares
    assert m.syllabus.assignment == aid and m.syllabus in syllabus.ready()
    for name in m.modules:  # every worker-side module exists; the checks are never among them
        assert learner_view.module_file(name).is_file(), name
        assert not name.endswith(".checks"), name
    assert a.probes in m.modules and (not a.runtime_module or a.runtime_module in m.modules)
    for dotted in (*m.withheld, *m.tools):  # an effkit function or method that exists
        parts = dotted.split(".")
        at = next(i for i in range(len(parts) - 1, 0, -1) if _is_module(".".join(parts[:i])))
        found = importlib.import_module(".".join(parts[:at]))
        for name in parts[at:]:  # a method through its class
            found = getattr(found, name)
        assert inspect.isfunction(found), dotted
    if not m.clocked:  # graded on counts: no timed grading
        assert a.performance_cell is None and not a.specs


def _is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def test_the_sandbox_reads_the_registry():
    assert learner_view.WITHHELD == assignments.withheld()
    assert learner_view.TOOLS == assignments.tools()
    for m in assignments.manifests():
        assert set(m.modules) <= set(learner_view.WORKER_MODULES)


@pytest.fixture
def lesson99(tmp_path, monkeypatch):
    """A lesson package ``lesson99`` the registry finds (beside the real ones), without a manifest."""
    pkg = tmp_path / "lesson99"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A new lesson."""\n')
    monkeypatch.setattr(assignments, "__path__", [*assignments.__path__, str(tmp_path)])
    yield pkg
    for name in [n for n in sys.modules if n.startswith("grader.assignments.lesson99")]:
        del sys.modules[name]


def test_a_lesson_without_a_manifest_fails_with_a_clear_error(lesson99):
    assert "lesson99" in assignments.known()
    with pytest.raises(
        LookupError, match=r"grader/assignments/lesson99/ has no manifest.py: declare"
    ):
        assignments.manifest("lesson99")
    with pytest.raises(LookupError, match="lesson99/ has no manifest.py"):
        assignments.worker_modules()  # what learner_view computes its view from


def test_a_manifest_for_another_lesson_or_a_broken_one_is_refused(lesson99):
    (lesson99 / "manifest.py").write_text(
        "from grader.kit.manifest import Manifest\n"
        "MANIFEST = Manifest('lesson1', worker_modules=('probes',), points={'test_quiz': 2},\n"
        "                    reference_grading_s=10.0, stub_grading_s=5.0)\n"
    )
    with pytest.raises(TypeError, match=r"lesson99/manifest.py must define MANIFEST = Manifest\("):
        assignments.manifest("lesson99")
    (lesson99 / "manifest.py").write_text("from grader.kit.missing import Manifest\n")
    sys.modules.pop("grader.assignments.lesson99.manifest", None)
    with pytest.raises(ModuleNotFoundError, match="grader.kit.missing"):  # not "has no manifest"
        assignments.manifest("lesson99")


@pytest.mark.parametrize(
    "fields, error",
    [
        (dict(worker_modules=()), "worker_modules must name"),
        (dict(worker_modules=("probes.py",)), "worker_modules must name"),
        (dict(withheld=("doctor.diagnose",)), "effkit.module.function"),
        (dict(points={}), "positive score"),
        (dict(points={"test_quiz": 0}), "positive score"),
        (dict(stub_grading_s=0.0), "measured wall seconds"),
    ],
)
def test_a_malformed_manifest_says_what_is_wrong(fields, error):
    good = dict(
        worker_modules=("probes",),
        points={"test_quiz": 2},
        reference_grading_s=10.0,
        stub_grading_s=5.0,
    )
    with pytest.raises(ValueError, match=error):
        Manifest("lesson99", **(good | fields))
