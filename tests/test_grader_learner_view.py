"""The grader's own answers, attacked from inside a learner's worker (issue 41, class 9).

A learner's ``choose_recipe`` (lesson 4's probe worker, sandboxed exactly as in a grading) tries to
import every grader module that is not worker-side, to read their sources, the repository's
``tests/``, ``solutions/`` and ``.git``, and any other copy of the grader the import system knows;
it returns what it got as JSON. The static tests keep ``grader.sandbox.learner_view.WORKER_MODULES`` honest:
everything a worker imports is listed, and nothing listed holds an answer.
"""

import ast
import json
import os

import pytest

from grader import assignments
from grader.sandbox import bwrap_view, learner_view
from grader.sandbox.answer_closure import answer_closure
from grader.sandbox.launch import is_root
from grader.sandbox.learner_view import REPO_ROOT, WORKER_MODULES, module_file
from grader.sandbox.probe import ProbeSession

ROOT_ONLY = pytest.mark.skipif(not is_root(), reason="needs root: reported as unavailable instead")
ALL_MODULES = sorted(
    ".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in (REPO_ROOT / "grader").rglob("*.py")
)
PARENT_SIDE = [m for m in ALL_MODULES if m not in WORKER_MODULES]
# the reference results a learner would copy, by the name the parent computes them under
ANSWER_NAMES = ("reference_grad", "wrong_grads", "QUIZ_KEY", "quiz_check_key", "check_accumulation")

ATTACK = """
def choose_recipe(micro_batch, base_batch, base_lr, budget_samples):
    import importlib, os, sys
    from pathlib import Path
    got = {"imported": [], "answers": [], "read": [], "listed": [], "copies": []}
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except BaseException:
            continue
        got["imported"].append(name)
    for name, mod in list(sys.modules.items()):  # whatever is loaded, by any route
        got["answers"] += [f"{name}.{a}" for a in ANSWERS if name.startswith("grader") and hasattr(mod, a)]
    for path in FILES:
        try:
            with open(path, "rb") as f:
                f.read(1)
            got["read"].append(path)
        except OSError:
            pass
    for path in DIRS:
        try:
            os.listdir(path)
            got["listed"].append(path)
        except OSError:
            try:
                open(path, "rb").close()  # a worktree's .git is a file
                got["listed"].append(path)
            except OSError:
                pass
    roots = [Path(p) / "grader" for p in sys.path if p]
    roots += [Path(m.MAPPING["grader"]) for m in list(sys.modules.values())
              if isinstance(getattr(m, "MAPPING", None), dict) and "grader" in m.MAPPING]
    for r in roots:
        try:
            with open(r / "assignments" / "lesson4" / "checks.py", "rb") as f:
                f.read(1)
            got["copies"].append(str(r))
        except OSError:
            pass
    return got
"""


def _attack() -> dict:
    files = [str(module_file(m)) for m in PARENT_SIDE]
    files += [
        str(p) for p in (REPO_ROOT / "grader" / "assignments").rglob("calibration/*") if p.is_file()
    ]
    files += [str(p) for p in (REPO_ROOT / "grader" / "assignments").glob("*/quiz_key.json")]
    dirs = [
        str(REPO_ROOT / d)
        for d in ("tests", "solutions", ".git", "grader/assignments/lesson2/calibration")
    ]
    src = (
        ATTACK.replace("MODULES", repr(PARENT_SIDE))
        .replace("ANSWERS", repr(ANSWER_NAMES))
        .replace("FILES", repr(files))
        .replace("DIRS", repr(dirs))
    )
    with ProbeSession(
        "grader.assignments.lesson4.probes",
        [("setup", "import os\n")],
        [("recipe", src)],
        ["choose_recipe"],
    ) as s:
        r = s.call("recipe", 120, micro_batch=8, base_batch=64, base_lr=0.1, budget_samples=640)
        assert r.ok, r.failure
        return r.data["recipe"], s.unavailable


@ROOT_ONLY
def test_no_grader_checking_module_answer_or_private_file_is_reachable_from_a_learners_worker():
    assert (
        "grader.assignments.lesson4.checks" in PARENT_SIDE
        and "grader.scoring.checks" in PARENT_SIDE
    )
    got, unavailable = _attack()
    assert unavailable == bwrap_view.unavailable_here()  # [] where bwrap builds the view
    assert got["imported"] == [], f"imported in the learner's worker: {got['imported']}"
    assert got["answers"] == [], f"answers reachable: {got['answers']}"
    assert got["read"] == [], f"files read: {got['read'][:10]}"
    assert got["listed"] == [], f"folders read: {got['listed']}"
    assert got["copies"] == [], f"other copies of the grader read: {got['copies']}"


def test_without_root_the_report_says_the_graders_code_is_readable(monkeypatch):
    from grader.sandbox import launch as sandbox

    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    box = sandbox.launch("grader.sandbox.channel", [], pass_fds=())
    try:
        assert any("grader's own code" in u for u in box.unavailable), box.unavailable
    finally:
        box.close()


def _grader_imports(name: str) -> set[str]:
    """Grader modules ``name`` imports anywhere in its code, except under ``TYPE_CHECKING`` and in
    functions that run only in the parent (``PARENT_ONLY``)."""
    out: set[str] = set()

    def visit(node, skip: bool) -> None:
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.unparse(ch.test):
                continue
            if isinstance(ch, ast.FunctionDef) and (name, ch.name) in PARENT_ONLY:
                continue
            if isinstance(ch, ast.Import):
                out.update(a.name for a in ch.names)
            elif isinstance(ch, ast.ImportFrom) and ch.module and ch.level == 0:
                out.add(ch.module)
                out.update(f"{ch.module}.{a.name}" for a in ch.names)
            visit(ch, skip)

    visit(ast.parse(module_file(name).read_text()), False)
    return {m for m in out if m.split(".")[0] == "grader" and module_file(m).exists()}


# functions of worker-side modules that only the parent calls: a lesson package's lazy ASSIGNMENT,
# the quiz's parent-side check
PARENT_ONLY = {
    *((f"grader.assignments.{lesson}", "__getattr__") for lesson in assignments.known()),
    ("grader.scoring.quiz", "quiz_check"),
}


def test_every_module_a_worker_imports_is_in_the_view():
    """From the worker entry points, every assignment's probes, timed runtime and trusted setup cell:
    every grader module reached is listed (else the worker fails to import it in a grading), and
    every listed module is reached."""
    # grader.sandbox.seal: run by sandbox.launch as a script (root, inside the view, before the drop to nobody)
    roots = {"grader.sandbox.worker", "grader.sandbox.probe_worker", "grader.sandbox.seal"}
    for aid in assignments.known():
        a = assignments.get(aid)
        # the registry imports every lesson's manifest by name (learner_view computes the view from
        # them, in the worker too): no import statement shows it
        roots.add(f"grader.assignments.{aid}.manifest")
        roots |= {m for m in (a.probes, a.runtime_module) if m}
        for _, source in a.trusted_cells():
            for node in ast.walk(ast.parse(source)):
                if (
                    isinstance(node, ast.ImportFrom)
                    and node.module
                    and node.module.startswith("grader")
                ):
                    roots.add(node.module)
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))] + sorted(_grader_imports(name))
    assert sorted(seen - set(WORKER_MODULES)) == []
    assert sorted(set(WORKER_MODULES) - seen) == []  # and nothing a worker does not need


def test_no_module_in_the_view_holds_an_answer_or_a_check():
    """Nothing listed defines a reference result, a quiz key or a cell check; every listed file exists.
    ``RESIDUAL``: shared task modules that still define a reference run (the parent's), named so
    that a new one fails here."""
    residual = {
        "grader.assignments.lesson6.task.reference_loop",
        "grader.assignments.lesson6.task.reference_run",
        "grader.assignments.lesson8.lora_task.peft_layer_reference",
        "grader.assignments.lesson11.memory_task.reference",
    }
    found = set()
    for name in WORKER_MODULES:
        tree = ast.parse(module_file(name).read_text())
        for node in tree.body:
            names = (
                [node.name]
                if isinstance(node, ast.FunctionDef | ast.ClassDef)
                else [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            )
            found |= {
                f"{name}.{n}"
                for n in names
                if n.startswith(("reference", "wrong_", "check_"))
                or "KEY" in n
                or n == "ASSIGNMENT"
            }
    assert sorted(found - residual) == []


def test_no_worker_reads_or_sees_a_quiz_key():
    """The quiz keys are files the parent reads when it grades (grader.scoring.quiz, closed to a
    cohort's learners): no worker module names them or the loader, and neither view carries one
    (the worker's probe_quiz only returns the learner's answers)."""
    keys = sorted((REPO_ROOT / "grader" / "assignments").glob("*/quiz_key.json"))
    assert len(keys) >= 14
    for name in WORKER_MODULES:
        text = module_file(name).read_text()
        assert "quiz_key" not in text and "load_key" not in text, name
        assert "scoring.quiz" not in text and "scoring import quiz" not in text, name
    cmds = " ".join(learner_view.view_mounts(REPO_ROOT, lesson="lesson2"))
    fds: list[int] = []
    args = bwrap_view._repository_view(REPO_ROOT, "lesson2", fds)
    for fd in fds:
        os.close(fd)
    for key in keys:
        assert str(key) not in cmds and str(key) not in args, key
    assert "quiz_key" not in cmds and not any("quiz_key" in a for a in args)


def test_a_python_installation_inside_the_repository_is_carried_into_the_view(
    monkeypatch, tmp_path
):
    """The instructor's server keeps its venv in the repository (``make setup``: ``.venv``): the view
    must carry it whole, or the worker has no Python; one outside stays where it is."""
    for name in WORKER_MODULES:
        path = module_file(name, tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    (tmp_path / "effkit" / "__pycache__").mkdir(parents=True)
    (tmp_path / "effkit" / "doctor.py").write_text("def diagnose(profile):\n    return []\n")
    (tmp_path / "effkit" / "__pycache__" / "doctor.cpython-311.pyc").write_bytes(b"compiled answer")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    monkeypatch.setattr(learner_view.sys, "prefix", str(tmp_path / ".venv"))
    cmds = learner_view.view_mounts(tmp_path)
    stage = learner_view.STAGE
    assert f"mkdir -p {stage}/.venv && mount --rbind {tmp_path / '.venv'} {stage}/.venv" in cmds
    # effkit is copied, sources only (a .pyc would carry a withheld answer's code)
    assert (
        f"mkdir -p {stage}/effkit && cp {tmp_path / 'effkit' / 'doctor.py'} {stage}/effkit" in cmds
    )
    assert not any(
        "__pycache__" in c or "mount --rbind " + str(tmp_path / "effkit") in c for c in cmds
    )
    assert cmds[-1] == f"mount --move {stage} {tmp_path}"
    masked = learner_view.view_mounts(tmp_path, lesson="lesson10")
    assert not any(f"cp {tmp_path / 'effkit' / 'doctor.py'}" in c for c in masked)
    assert any(
        c.startswith("printf %s ")
        and "reference answer" in c
        and c.endswith(f"{stage}/effkit/doctor.py")
        for c in masked
    )
    assert not any("/checks.py" in c or "/tests" in c or ".git" in c for c in cmds)


TIMED_ATTACK = """
import importlib, json
_got = []
for _name in MODULES:
    try:
        importlib.import_module(_name)
        _got.append(_name)
    except BaseException:
        pass
raise RuntimeError("REPORT " + json.dumps(_got))
"""


@ROOT_ONLY
def test_a_timed_learner_worker_cannot_import_the_graders_checking_modules(tmp_path):
    """Lessons 2-3's timed worker: it used to import the gate, the protocol and the whole assignment
    package (its checks too) itself, before any learner code ran."""
    from grader.sandbox.supervisor import WorkerFailed, start_worker

    workdir = tmp_path / "grading"
    workdir.mkdir(mode=0o700)
    (workdir / "inputs").mkdir(mode=0o755)
    config = {
        "assignment_module": "grader.assignments.lesson2.runtime",
        "device": "cpu",
        "role": "learner",
    }
    w = start_worker("learner", workdir, config, inputs=workdir / "inputs")
    try:
        w.expect("ready", 120, "starting up")
        w.send(
            cmd="load",
            cells=[("attack", TIMED_ATTACK.replace("MODULES", repr(PARENT_SIDE)))],
            object_name="FastPipeline",
        )
        with pytest.raises(WorkerFailed) as failed:
            w.expect("loaded", 60, "running the attack")
    finally:
        w.close()
    assert json.loads(str(failed.value).split("REPORT ", 1)[1].splitlines()[0]) == []


# -- issue 42: an exercise whose answer is an effkit function ------------------------------------

WITHHELD_PROBE = """
import importlib, inspect, os, sys
from pathlib import Path
import effkit
WITHHELD_SEEN = {}
for dotted in CALLS:
    parts = dotted.split(".")
    for at in range(len(parts) - 1, 0, -1):  # the longest prefix that is a module
        try:
            f = importlib.import_module(".".join(parts[:at]))
            break
        except ImportError:
            continue
    for name in parts[at:]:  # a module-level function, or a method through its class
        f = getattr(f, name)
    required = [  # positional ones: a None for **kwargs would fail the call before its body ran
        p
        for p in inspect.signature(f).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    try:
        f(*[None] * len(required))
        WITHHELD_SEEN[dotted] = "present"
    except Exception as err:  # noqa: BLE001  (the real function fails on None arguments otherwise)
        WITHHELD_SEEN[dotted] = "withheld: " + str(err) if "reference answer" in str(err) else "present"
PYC = [str(p) for p in Path(effkit.__file__).parent.rglob("*.pyc")]
"""


@pytest.fixture(scope="module")
def answer_closures() -> dict[str, set[str]]:
    """Every lesson's withheld answers and what they reach: the same for each lesson's test below
    (one walk of effkit's sources, ~1 s each, not one per lesson)."""
    return {
        name: set(answer_closure(list(seeds), REPO_ROOT, keep=learner_view.TOOLS[name]))
        for name, seeds in learner_view.WITHHELD.items()
    }


@ROOT_ONLY
@pytest.mark.parametrize("lesson", sorted(learner_view.WITHHELD))
def test_an_exercises_effkit_answer_raises_in_its_lessons_worker_and_nowhere_else(
    lesson, answer_closures
):
    """One line that calls effkit's own ``diagnose`` (or ``kd_loss``, or ``bucket_batches``) earned
    full marks on 8a3ab40: in that lesson's worker the function's body raises, and so do its helpers
    and twins (issue 52: lesson 7's twin in ``effkit.workloads.bert.batching``); no compiled copy of
    them is left to load, and another lesson's worker still has them."""
    closures = answer_closures
    assert "effkit.workloads.bert.batching.bucket_batches" in closures["lesson7"]
    every = sorted(set().union(*closures.values()))
    src = WITHHELD_PROBE.replace("CALLS", repr(every))
    with ProbeSession(
        f"grader.assignments.{lesson}.probes",
        [("setup", "import os\n")],
        [("probe", src + "\nraise RuntimeError(repr((WITHHELD_SEEN, PYC)))\n")],
        [],
    ) as s:
        s.start()
        assert s.unavailable == bwrap_view.unavailable_here(), s.unavailable
        seen, pyc = eval(s.load_errors[0]["message"].removeprefix("RuntimeError: "))  # noqa: S307 (our own repr)
    assert pyc == [], pyc
    for dotted in every:
        if dotted in closures[lesson]:
            assert (
                seen[dotted].startswith("withheld: ")
                and f"{lesson}'s reference answer" in seen[dotted]
            ), seen
        else:
            assert seen[dotted] == "present", (dotted, seen)


def test_withheld_source_keeps_every_other_function_and_the_signature():
    src = learner_view.withheld_source(
        REPO_ROOT / "effkit" / "length_buckets.py", ["bucket_batches"], "lesson7"
    )
    tree = ast.parse(src)
    names = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    original = {
        n.name
        for n in ast.parse((REPO_ROOT / "effkit" / "length_buckets.py").read_text()).body
        if isinstance(n, ast.FunctionDef)
    }
    assert set(names) == original
    assert [a.arg for a in names["bucket_batches"].args.args][:2] == ["lengths", "batch_size"]
    body = names["bucket_batches"].body
    assert len(body) == 1 and isinstance(body[0], ast.Raise) and "lesson7" in ast.unparse(body[0])
