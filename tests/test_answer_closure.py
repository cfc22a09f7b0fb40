"""What implements a withheld answer is withheld with it, found by content (issue 52 §2).

``WITHHELD`` once masked ``effkit.length_buckets.bucket_batches`` by name only: its twin in
``effkit.workloads.bert.batching`` and its helpers ``split_by_budget`` / ``padded_width`` stayed whole, and
one call plus eight lines of glue earned lesson 7's five cells. These tests need no root: they judge the
closure and the masked sources the view is built from (``test_withheld_answers.py`` grades through the
sandbox)."""

import ast
import shutil

from grader.sandbox import answer_closure as ac
from grader.sandbox import learner_view
from grader.sandbox.learner_view import REPO_ROOT, TOOLS, WITHHELD

# Today's effkit, reviewed by hand: a change here is a new helper or twin (or a false match) to look at.
EXPECTED = {
    "lesson7": {
        "effkit.length_buckets.bucket_batches",
        "effkit.length_buckets.split_by_budget",
        "effkit.length_buckets.padded_width",
        "effkit.workloads.bert.batching.bucket_batches",
    },
    "lesson9": {"effkit.distill.kd_loss", "effkit.distill._check_hyperparameters"},
    # the doctor's overhead line per class of kernels too: the learner reads it from the profile
    "lesson10": {"effkit.doctor.diagnose", "effkit.doctor._get", "effkit.profiling.overhead_line"},
    # the reference pipeline, whatever its seed; effkit's normalize is the recipe's own (a tool)
    "lesson2": {
        "effkit.workloads.cifar.pipelines.DevicePipeline.__init__",
        "effkit.workloads.cifar.pipelines.DevicePipeline.__iter__",
        "effkit.workloads.cifar.pipelines.DevicePipeline.augment",
    },
    # the capstone withholds lesson 2's answer (its pipeline must be the learner's own)
    "lesson14": {
        "effkit.workloads.cifar.pipelines.DevicePipeline.__init__",
        "effkit.workloads.cifar.pipelines.DevicePipeline.__iter__",
        "effkit.workloads.cifar.pipelines.DevicePipeline.augment",
    },
    "lesson4": {
        "effkit.accumulate.GradAccumulator.backward",
        "effkit.accumulate.GradAccumulator.step",
        "effkit.accumulate.GradAccumulator._reset_window",
    },
    # the planner and its byte measure; the byte counter and the plan's application are tools
    "lesson5": {"effkit.checkpoint_plan.plan_for_budget", "effkit.checkpoint_plan.plan_bytes"},
}

# A twin added later: renamed, re-signed, annotated, its names changed, a step left out, inside a class.
PLANTED = """
import numpy as numpy_
from effkit import length_buckets as lb


class Sampler:
    def batches_for(self, sizes, rows, generator, per_chunk=50) -> list:
        order = generator.permutation(len(sizes))
        out: list = []
        for begin in range(0, len(order), rows * per_chunk):
            part = order[begin : begin + rows * per_chunk]
            part = part[numpy_.argsort(sizes[part], kind="stable")]
            out.extend(part[i : i + rows] for i in range(0, len(part), rows))
        generator.shuffle(out)
        return out


def cut(run, sizes, budget, multiple):
    batches = []
    start = 0
    for i in range(1, len(run) + 1):
        if i == len(run):
            batches.append(run[start:i])
            break
        rows = i + 1 - start
        width = -(-int(sizes[run[start : i + 1]].max()) // multiple) * multiple
        if rows * width > budget:
            batches.append(run[start:i])
            start = i
    return batches


def round_up(n, m=8):
    return -(-int(n) // m) * m


def uses_the_helper(n):
    return lb.padded_width(n) + 1


def innocent(lengths, batch_size):
    order = numpy_.argsort(lengths, kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
"""


def test_the_closure_of_todays_answers_is_their_helpers_and_twins():
    for lesson, seeds in WITHHELD.items():
        found = ac.answer_closure(list(seeds), REPO_ROOT, keep=TOOLS[lesson])
        assert set(found) == EXPECTED[lesson], lesson


def test_a_twin_planted_later_is_withheld_with_its_helpers_and_nothing_innocent(tmp_path):
    shutil.copytree(
        REPO_ROOT / "effkit", tmp_path / "effkit", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "effkit" / "planted.py").write_text(PLANTED)
    found = ac.answer_closure(list(WITHHELD["lesson7"]), tmp_path)
    planted = {n.removeprefix("effkit.planted.") for n in found if n.startswith("effkit.planted.")}
    # the variant (a method now), the budget cut with the width helper inlined, the rounding helper
    assert planted == {"Sampler.batches_for", "cut", "round_up"}, planted
    # in the masked source the lesson's worker gets, each raises and names the answer it serves
    masked = learner_view.withheld_files(tmp_path, "lesson7")[tmp_path / "effkit" / "planted.py"]
    src = learner_view.withheld_source(
        tmp_path / "effkit" / "planted.py", list(masked), "lesson7", masked
    )
    tree = ast.parse(src)
    bodies = {q: n.body for n, q in ac.defs(tree.body, "")}
    for name in planted:
        assert len(bodies[name]) == 1 and isinstance(bodies[name][0], ast.Raise), name
        assert "implements lesson7's reference answer" in ast.unparse(bodies[name][0])
    assert not isinstance(bodies["innocent"][0], ast.Raise)
    assert not isinstance(bodies["uses_the_helper"][0], ast.Raise)  # raises through the helper
    # another lesson's worker keeps them whole
    assert tmp_path / "effkit" / "planted.py" not in learner_view.withheld_files(
        tmp_path, "lesson9"
    )


def test_a_renamed_answer_fails_closed_rather_than_going_unwithheld(tmp_path):
    (tmp_path / "effkit").mkdir()
    (tmp_path / "effkit" / "length_buckets.py").write_text("def buckets(lengths):\n    return []\n")
    try:
        ac.answer_closure(["effkit.length_buckets.bucket_batches"], tmp_path)
    except LookupError as err:
        assert "bucket_batches" in str(err)
    else:
        raise AssertionError("a withheld answer that names no function must be an error")


def test_shape_ignores_names_annotations_and_the_docstring_but_not_the_work():
    a = ast.parse('def f(x: int, y):\n    """doc"""\n    z: int = x * y\n    return z + 1\n').body[
        0
    ]
    b = ast.parse("def g(p, q):\n    r = p * q\n    return r + 1\n").body[0]
    c = ast.parse("def h(p, q):\n    r = p + q\n    return r + 1\n").body[0]
    assert ac.shape(a) == ac.shape(b) != ac.shape(c)


def test_a_pasted_copy_in_a_learners_cell_is_found_renamed_trimmed_or_nested_and_honest_cells_are_not():
    """Lesson 10's worker withholds effkit.doctor.diagnose, but a learner can read effkit/doctor.py and paste it
    into the cell: the grader reads the cell's source (never runs it) for twins of the answer and its helpers."""
    import inspect
    import re
    import textwrap

    from exercise_cells import reference_cells

    from effkit import doctor

    seeds = list(WITHHELD["lesson10"])
    answer = textwrap.dedent(inspect.getsource(doctor.diagnose))
    renamed = re.sub(r"\bprofile\b", "p", answer).replace("def diagnose(p: dict)", "def judge(p)")
    # the memory rule left out, the whole thing a method of a class
    trimmed = renamed[: renamed.index("    peak, limit =")] + "    return found\n"
    nested = "class Doctor:\n" + textwrap.indent(trimmed.replace("(p)", "(self, p)", 1), "    ")
    for source in (renamed, trimmed, nested):
        assert ac.copies_in(source, seeds, REPO_ROOT) == [("judge", "effkit.doctor.diagnose")]
    # effkit's two-line helper _get, written alike: too short to say who copied whom
    getter = "def fetch(d, k, default=0.0):\n    value = d.get(k, default)\n    return default if value is None else value\n"
    assert ac.copies_in(getter, seeds, REPO_ROOT) == []
    # every lesson's reference cells are its author's own, and a cell that does not parse holds nothing
    for lesson, lesson_seeds in WITHHELD.items():
        for gid, source in reference_cells(lesson):
            assert ac.copies_in(source, list(lesson_seeds), REPO_ROOT) == [], (lesson, gid)
    assert ac.copies_in("def broken(:\n", seeds, REPO_ROOT) == []


def test_an_answer_kept_in_a_string_is_read_and_code_made_from_data_is_named():
    """A review's lesson 10 pass: effkit/doctor.py kept as a string, exec'd at load behind a one-line diagnose
    (8/8 unseen: only function definitions were read). A string that parses as Python is read as the cell is,
    nested strings too; what an encoded copy needs to run (exec, eval, compile, __import__, builtins, marshal,
    importlib, getattr by a literal name) is named, and the honest uses of the words are not."""
    import inspect
    import textwrap

    from effkit import doctor

    seeds = list(WITHHELD["lesson10"])
    answer = textwrap.dedent(inspect.getsource(doctor.diagnose))
    in_a_string = f"_SRC = {answer!r}\n_ns = {{}}\nexec(_SRC, _ns)\ndiagnose = _ns['diagnose']\n"
    assert ac.copies_in(in_a_string, seeds, REPO_ROOT) == [
        ("diagnose (in a string)", "effkit.doctor.diagnose")
    ]
    twice = f"OUTER = {in_a_string!r}\n"
    assert ac.copies_in(twice, seeds, REPO_ROOT) == [
        ("diagnose (in a string) (in a string)", "effkit.doctor.diagnose")
    ]
    assert ac.runs_code_from_data(in_a_string) == ["exec"]
    encoded = {
        "import base64\nexec(base64.b64decode(B))": ["exec"],
        "f = eval\ng = compile(s, 'x', 'exec')": ["eval", "compile", "exec"],
        "import builtins\nbuiltins.exec(s)": ["builtins", "exec"],
        "getattr(__builtins__, 'exec')(s)": ["__builtins__", "exec"],
        "from importlib import import_module": ["importlib"],
        "import marshal": ["marshal"],
        "m = __import__('os')": ["__import__", "os"],
        # a review's routes: the doctor written to /tmp and run by runpy; the batch read from a caller's frame
        "import runpy\nd = runpy.run_path('/tmp/d.py')": ["runpy", "run_path"],
        "import sys\ncases = sys._getframe(1).f_locals['profiles']": [
            "sys",
            "_getframe",
            "f_locals",
        ],
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    up = e.__traceback__.tb_frame.f_back": [
            "__traceback__",
            "tb_frame",
            "f_back",
        ],
        "import timeit\ntimeit.timeit(s, number=1)": ["timeit"],
        "from types import FunctionType": ["types"],
        "import subprocess": ["subprocess"],
        "pool = torch.multiprocessing.Pool(1)": ["multiprocessing"],
    }
    for source, named in encoded.items():
        assert sorted(ac.runs_code_from_data(source)) == sorted(named), source
    honest = "model.eval()\nstep = torch.compile(step)\nrx = re.compile('a+')\nprint('to exec')\n"
    assert ac.runs_code_from_data(honest) == []


# Lesson 4's accumulation, renamed and re-signed in a module added later: caught by content.
ACCUMULATOR_TWIN = """
class WindowedStepper:
    def __init__(self, net, opt, k):
        self.net, self.opt, self.k = net, opt, k
        self.reset()

    def reset(self):
        self.micro_steps_done = 0
        self._window_count = None
        self._last_backward_synced = True

    def push(self, total, n_window):
        if self.micro_steps_done >= self.accum_steps:
            raise RuntimeError("too many")
        count = float(n_window)
        if not count > 0:
            raise ValueError("count")
        if self._window_count is not None and count != self._window_count:
            raise ValueError("changed")
        self._window_count = count
"""


def test_tools_stay_whole_and_stop_the_search_while_a_renamed_twin_is_caught(tmp_path):
    shutil.copytree(
        REPO_ROOT / "effkit", tmp_path / "effkit", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "effkit" / "later.py").write_text(ACCUMULATOR_TWIN)
    found = ac.answer_closure(list(WITHHELD["lesson4"]), tmp_path, keep=TOOLS["lesson4"])
    assert {"effkit.later.WindowedStepper.reset", "effkit.later.WindowedStepper.push"} <= set(found)
    assert "effkit.later.WindowedStepper.__init__" not in found  # it only stores its arguments
    # lesson 5: without its tools the planner drags the byte counter and apply_plan along
    plain = ac.answer_closure(list(WITHHELD["lesson5"]), REPO_ROOT)
    assert set(TOOLS["lesson5"]) <= set(plain)
    kept = ac.answer_closure(list(WITHHELD["lesson5"]), REPO_ROOT, keep=TOOLS["lesson5"])
    assert not set(TOOLS["lesson5"]) & set(kept)
