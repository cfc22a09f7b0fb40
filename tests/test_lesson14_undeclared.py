"""Lesson 14, attack class D: a pipeline that changes the recipe besides its batches, undeclared.

The capstone's settings are declared (``CHANGES``) and built by the grader; a pass-through pipeline
that flips a torch switch (a backend flag, the thread count, the float32 matmul precision), replaces
a torch function, or yields channels-last batches without declaring channels_last would change the
recipe by the back door, and its "pipeline alone" timing with it. The learner's worker holds torch's
settings across every call into learner code (``grader/assignments/lesson14/guard.py``); these tests
drive the worker's own ``runtime.build_trainer``, audit and steps in this process (seconds each), the
reference's pipeline and naive's through the same guard.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from exercise_cells import solution_cells, solution_path

from grader.assignments.lesson14 import capstone, guard, recipe, runtime
from grader.assignments.lesson14.checks import SETUP_SOURCE, SPECS
from grader.kit.data import write_train_set

REFERENCE_CELLS = solution_cells(solution_path("lesson14"), solution_path("lesson14"))
REFERENCE = dict(REFERENCE_CELLS)["recipe"]

# A pass-through of naive's pipeline (no DataLoader workers here: seconds), with room for one line
# of back-door work in __init__ or in each batch
PASS_THROUGH = """
class P(cifar.TorchvisionPipeline):
    def __init__(self, dataset, batch_size, device, seed):
        super().__init__(dataset, batch_size, device, seed, num_workers=0)
        {init}

    def __iter__(self):
        for x, y in super().__iter__():
            {batch}
            yield x, y


CHANGES = {{"p": {{"pipeline": P}}{more}}}
"""


def _submission(init: str = "pass", batch: str = "pass", more: str = "") -> str:
    return PASS_THROUGH.format(init=init, batch=batch, more=more)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("lesson14-guard") / "train"
    return str(write_train_set(path, 300, 14, SPECS["tiny"].data))


@pytest.fixture(autouse=True)
def worker_guard(monkeypatch):
    """A fresh guard, started as the worker's load starts it (before the cells), and torch's
    settings as they were after each test, whatever the attack left."""
    fresh = guard.Guard()
    monkeypatch.setattr(runtime, "GUARD", fresh)
    threads, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    precision, contiguous = torch.get_float32_matmul_precision(), torch.Tensor.contiguous
    fresh.start()
    yield fresh
    torch.set_num_threads(threads)
    torch.backends.mkldnn.enabled = mkldnn
    torch.set_float32_matmul_precision(precision)
    torch.Tensor.contiguous = contiguous
    torch.nn.modules.module._global_forward_pre_hooks.clear()


def _train(source: str, data_dir: str, **declared) -> list[str]:
    """The learner's worker on ``source``: its cells run (with the lesson's setup), the recipe
    built with the hooks the parent read from the text plus ``declared``, one epoch trained as the
    chunks train it. Returns the audit's problems (a refusal raises)."""
    rec = recipe.read(source)
    namespace: dict = {}
    exec(compile(SETUP_SOURCE + "\n" + source, "<cells>", "exec"), namespace)  # noqa: S102
    change = rec.pipeline_change()
    hooks = dict(rec.pipeline_hooks(change), **declared, epochs=1)
    audit = runtime.EpochAudit()
    trainer = runtime.build_trainer(namespace["CHANGES"], audit, data_dir, "cpu", 0, "smoke", hooks)
    audit.take_kept()
    trainer.train_steps(trainer.steps_per_epoch)
    audit.take_kept()
    audit.finish(trainer.pipeline, 1)
    return audit.problems


def test_a_pass_through_that_changes_nothing_trains(data_dir):
    assert _train(_submission(), data_dir) == []


def test_channels_last_batches_without_channels_last_declared_are_refused(data_dir):
    """The reviewer's first example: channels-last by the back door, in the batches."""
    source = _submission(batch="x = x.contiguous(memory_format=torch.channels_last)")
    with pytest.raises(guard.SettingsChanged, match="does not declare channels_last"):
        _train(source, data_dir)
    # declared, the recipe converts to its own layout: either layout is the learner's choice
    assert _train(source, data_dir, channels_last=True) == []


def test_a_batch_of_another_dtype_is_refused_naming_the_declared_precision(data_dir):
    with pytest.raises(guard.SettingsChanged, match=r"torch.bfloat16, not float32.*'precision'"):
        _train(_submission(batch="x = x.to(torch.bfloat16)"), data_dir)


def test_a_backend_flag_flipped_in_init_is_refused_by_name(data_dir):
    source = _submission(init="torch.backends.mkldnn.enabled = False")
    with pytest.raises(
        guard.SettingsChanged,
        match=r"your pipeline's __init__ changed torch\.backends\.mkldnn\.enabled from True to "
        r"False: a setting belongs in the recipe's declared changes",
    ):
        _train(source, data_dir)


def test_the_thread_count_set_in_a_batch_is_refused(data_dir):
    source = _submission(batch="torch.set_num_threads(torch.get_num_threads() + 1)")
    with pytest.raises(
        guard.SettingsChanged,
        match=r"your pipeline's batches changed torch\.get_num_threads\(\) from \d+ to \d+",
    ):
        _train(source, data_dir)


def test_a_setting_changed_by_the_cells_themselves_is_refused(data_dir):
    """Top-level code in the cell, before any pipeline: held from the worker's load on."""
    source = 'torch.set_float32_matmul_precision("medium")\n' + _submission()
    with pytest.raises(
        guard.SettingsChanged,
        match=r"your solution cells changed torch\.get_float32_matmul_precision\(\) from "
        r"'highest' to 'medium'",
    ):
        _train(source, data_dir)


def test_a_torch_function_replaced_by_the_pipeline_is_refused(data_dir):
    """A replaced function changes the step as surely as a switch: here the trainer's conversion
    back to NCHW would be skipped."""
    source = _submission(init="torch.Tensor.contiguous = lambda self, memory_format=None: self")
    with pytest.raises(guard.SettingsChanged, match=r"replaced torch\.Tensor\.contiguous"):
        _train(source, data_dir)


def test_a_global_module_hook_that_acts_inside_the_step_is_refused(data_dir):
    """Learner code that runs in the grader's step (a global forward pre-hook flipping a flag there
    and back) leaves the hook itself in torch's state: held as a setting."""
    init = (
        "torch.nn.modules.module.register_module_forward_pre_hook("
        "lambda m, a: setattr(torch.backends.mkldnn, 'enabled', True))"
    )
    with pytest.raises(guard.SettingsChanged, match="_global_forward_pre_hooks from 0 to 1"):
        _train(_submission(init=init), data_dir)


def test_the_reference_pipeline_passes_declared_and_alone(data_dir):
    """The reference's FastPipeline, with its whole recipe and alone in naive's (its 'pipeline
    alone' timing): it changes nothing and hands over contiguous float32 NCHW batches."""
    assert _train(REFERENCE, data_dir, channels_last=True, batch_size=32, lr=0.025) == []
    assert _train(REFERENCE, data_dir) == []


def test_naives_own_pipeline_passes_with_its_workers(data_dir):
    """The baseline's path (no learner pipeline: naive's DataLoader with its two workers) through
    the same guard, started or not: the baseline worker never runs a load."""
    hooks = {"epochs": 1}
    audit = runtime.EpochAudit()
    trainer = runtime.build_trainer(None, audit, data_dir, "cpu", 0, "smoke", hooks)
    trainer.train_steps(trainer.steps_per_epoch)
    audit.take_kept()
    audit.finish(trainer.pipeline, 1)
    assert audit.problems == []


def test_settings_are_read_from_getters_bound_before_learner_code(worker_guard):
    """A getter swapped on ``torch._C`` after the guard's import does not blind it."""
    real = torch._C._get_mkldnn_enabled
    try:
        torch._C._get_mkldnn_enabled = lambda: True
        torch.backends.mkldnn.enabled = False
        assert any(
            "mkldnn.enabled from True to False" in c
            for c in guard.moved(worker_guard.base, guard.settings())
        )
    finally:
        torch._C._get_mkldnn_enabled = real


def test_flush_denormal_has_no_getter_and_is_read_by_its_effect():
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU has no flush-denormal mode")
    try:
        before = guard.settings()
        torch.set_flush_denormal(True)
        assert guard.moved(before, guard.settings()) == [
            "changed torch.set_flush_denormal from False to True"
        ]
    finally:
        torch.set_flush_denormal(False)


def test_a_background_thread_that_changes_a_setting_is_seen_at_the_chunks_end():
    """Between the pipeline's calls (a thread, during the grader's steps), held at the next call
    and at every chunk's end (``EpochAudit.take_kept``, before the commit)."""
    import threading

    thread = threading.Thread(target=lambda: torch.set_float32_matmul_precision("medium"))
    thread.start()
    thread.join()
    with pytest.raises(guard.SettingsChanged, match=r"your code \(during a chunk\) changed"):
        runtime.EpochAudit().take_kept()


@pytest.mark.parametrize(
    "line",
    [
        "from grader.assignments.lesson14 import guard",
        "import grader.assignments.lesson14.runtime as r",
        "found = object.__subclasses__()",
        "g = P.__init__.__closure__",
        "g = getattr(P, '__closure__')",
    ],
)
def test_a_cell_that_reaches_the_graders_objects_is_refused_from_its_text(line):
    """The guard runs beside learner code; the routes to it that a cell's text shows (the grader's
    modules, subclasses and closure cells walked; sys, gc and inspect are refused already) are
    refused in the parent before any worker starts."""
    found = capstone._reaches_grader([("recipe", line + "\n" + REFERENCE)])
    assert found and "reaches the grader's own code" in found[0]


def test_the_reference_cells_reach_no_grader_code():
    assert capstone._reaches_grader(REFERENCE_CELLS) == []


def test_naives_workers_are_the_graders_setting_on_the_baselines_side_only(data_dir, monkeypatch):
    """``naive_workers`` (``spec.baseline_hooks``, capstone._own_pipeline's second baseline) builds
    naive's own DataLoader with that many workers in the grader's baseline worker, which trains an
    epoch with it; a learner's ``CHANGES`` cannot set it, and the learner's side never receives it."""
    from grader.timed.protocol import _hooks
    from grader.timed.spec import GradingSpec

    spec = GradingSpec(
        "t",
        "smoke",
        10,
        10,
        10,
        1,
        1,
        learner_hooks={"lr": 0.05},
        baseline_hooks={"naive_workers": 0},
    )
    assert _hooks(spec, "baseline") == {"naive_workers": 0} and _hooks(spec, "learner") == {
        "lr": 0.05
    }
    source = REFERENCE.replace('"lr": 0.025}', '"lr": 0.025, "naive_workers": 0}')
    assert source != REFERENCE
    assert any("unknown setting 'naive_workers'" in p for p in recipe.read(source).problems)
    workers = []
    naive = runtime.cifar.TorchvisionPipeline

    class Recorded(naive):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            workers.append(self.loader.num_workers)

    monkeypatch.setattr(runtime.cifar, "TorchvisionPipeline", Recorded)
    audit = runtime.EpochAudit()
    hooks = {"naive_workers": 0, "epochs": 1}
    trainer = runtime.build_trainer(None, audit, data_dir, "cpu", 0, "smoke", hooks)
    trainer.train_steps(trainer.steps_per_epoch)
    assert workers == [0] and trainer.steps_per_epoch > 0


# -- a review's five bypasses, each closed as a class -------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        'm = pydoc.locate("grader.assignments.lesson14.guard")',
        "import pydoc",
        'm = torch._utils._import_dotted_name("effkit")',
        "from torch._utils import _import_dotted_name",
        "from unittest import mock",
        'name = "gra" + "der"',
        "name = f\"{'gra'}der.assignments\"",
        'name = "".join(["gr", "ader", ".assignments"])',
        'name = "GRADER".lower()',
        'name = "redarg"[::-1]',
        'name = b"grader"',
    ],
)
def test_a_cell_that_names_the_grader_in_a_string_or_resolves_a_dotted_name_is_refused(line):
    """Review item 1, the parent's end: ``pydoc.locate`` (or torch's ``_import_dotted_name``, mock's
    patch by name) on a string that names the grader's modules reaches the guard from a cell. Every
    string the text makes (literals, f-strings, concatenations, joins, slices) is read folded."""
    found = capstone._reaches_grader([("recipe", line + "\n" + REFERENCE)])
    assert found and "reaches the grader's own code" in found[0]


def test_a_module_imported_by_a_computed_name_is_refused_by_the_cells_filters():
    """``__import__`` and ``importlib`` with a name computed at run time: the code-from-data filter."""
    for line in ("m = __import__(chr(103) + 'x')", "import importlib"):
        assert capstone._code_from_data([("recipe", line + "\n" + REFERENCE)])


def test_a_docstring_that_mentions_the_grader_in_words_is_not_refused():
    source = REFERENCE.replace("class ", '"""What the grader times."""\nclass ', 1)
    assert source != REFERENCE and capstone._reaches_grader([("recipe", source)]) == []


_DISABLE = """
import importlib
g = importlib.import_module("grader.assignments.lesson14.guard")
G = importlib.import_module("grader.assignments.lesson14.runtime").GUARD
torch.set_float32_matmul_precision("medium")
try:
    {attack}
except Exception:
    pass
"""


@pytest.mark.parametrize(
    "attack",
    [
        "G.base = None",
        "object.__setattr__(G, 'base', None)",
        "G.hold = lambda *a, **k: None",
        "g.SETTINGS = ()",
        "g.NAMESPACES = ()",
        "g.Guard.hold = lambda *a, **k: None",
        "g.Guard.base = None",
        "G.start()",
        "G.rebase()",
    ],
)
def test_the_guards_own_state_cannot_be_cleared_from_a_cell(attack, data_dir, monkeypatch):
    """Review item 1, the worker's end: a cell that reaches the guard (past the text filter),
    changes a setting, then clears the guard's base, its list of settings or its ``hold``, or
    starts it again, is refused."""
    for name in ("SETTINGS", "NAMESPACES"):
        monkeypatch.setattr(guard, name, getattr(guard, name))  # restored after the attack
    methods = dict(vars(guard.Guard))
    try:
        with pytest.raises(guard.SettingsChanged):
            _train(_DISABLE.format(attack=attack) + _submission(), data_dir)
    finally:
        for name in ("hold", "base"):
            if name in methods:
                setattr(guard.Guard, name, methods[name])
            elif name in vars(guard.Guard):
                delattr(guard.Guard, name)


def test_the_guard_rebound_in_the_runtime_is_reported_by_the_tamper_check(monkeypatch):
    """``runtime.GUARD`` swapped for a guard never started (or any other object) is a binding the
    worker's tamper check records (it records a grader module's callables: a guard is one)."""
    from grader.sandbox.tamper import replaced, snapshot

    before = snapshot()
    monkeypatch.setattr(runtime, "GUARD", guard.Guard())
    assert "grader.assignments.lesson14.runtime.GUARD" in replaced(before)


@pytest.mark.parametrize("name", ["_global_forward_pre_hooks", "_global_forward_hooks"])
def test_a_global_hook_in_a_dict_put_in_place_of_torchs_is_refused(name, data_dir, monkeypatch):
    """Review item 2: the module's hook dict rebound to a fresh one, a hook registered there; the
    guard reads the dict by name, not the object it found at import."""
    module = torch.nn.modules.module
    monkeypatch.setattr(module, name, getattr(module, name))  # the original back after the test
    init = (
        f"torch.nn.modules.module.{name} = type(torch.nn.modules.module.{name})(); "
        f"torch.nn.modules.module.{name}[0] = lambda *a: None"
    )
    with pytest.raises(guard.SettingsChanged, match=f"{name} from 0 to"):
        _train(_submission(init=init), data_dir)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_setting_changed_during_the_recipes_build_is_refused_not_absorbed(
    when, data_dir, monkeypatch
):
    """Review item 3: a learner's thread changing a setting while the grader builds the recipe
    (here, in place of the thread, at the build's start or end): ``rebase`` holds first."""
    build = runtime.cifar.build

    def raced(*args, **kwargs):
        if when == "before":
            torch.set_num_threads(torch.get_num_threads() + 1)
        trainer = build(*args, **kwargs)
        if when == "after":
            torch.set_num_threads(torch.get_num_threads() + 1)
        return trainer

    monkeypatch.setattr(runtime.cifar, "build", raced)
    with pytest.raises(guard.SettingsChanged, match=r"during the recipe's build\) changed torch"):
        _train(_submission(), data_dir)


def test_rebase_absorbs_only_what_the_graders_build_sets(worker_guard):
    benchmark = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True  # the build's own, on a GPU
        worker_guard.rebase()
        assert worker_guard.base["torch.backends.cudnn.benchmark"] is True
        torch.backends.cudnn.benchmark = False  # not the build's value: a learner's
        with pytest.raises(guard.SettingsChanged, match="cudnn.benchmark from True to False"):
            worker_guard.rebase()
    finally:
        torch.backends.cudnn.benchmark = benchmark


SNEAKY = """
class Sneaky(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})
"""


@pytest.mark.parametrize("which", ["x", "y"])
def test_a_tensor_subclass_in_a_batch_is_refused_naming_its_type(which, data_dir):
    """Review item 4: its ``__torch_function__`` would run learner code inside the grader's step."""
    source = SNEAKY + _submission(batch=f"{which} = {which}.as_subclass(Sneaky)")
    with pytest.raises(guard.SettingsChanged, match=rf"whose {which} is a Sneaky.*torch\.Tensor"):
        _train(source, data_dir)


@pytest.mark.parametrize(
    "init, said",
    [
        (
            "torch.optim.SGD.step = lambda self, closure=None: None",
            r"replaced torch\.optim\.SGD\.step",
        ),
        (
            "import torch.optim.sgd as s; s.sgd = lambda *a, **k: None",
            r"replaced torch\.optim\.sgd\.sgd",
        ),
        (
            "torch.optim.Optimizer.zero_grad = lambda self, set_to_none=True: None",
            r"replaced torch\.optim\.Optimizer\.zero_grad",
        ),
        (
            "import torch.optim.optimizer as o; o.register_optimizer_step_pre_hook(lambda *a: None)",
            r"_global_optimizer_pre_hooks from 0 to 1",
        ),
    ],
)
def test_the_optimizer_patched_by_the_pipeline_is_refused(init, said, data_dir, monkeypatch):
    """Review item 5: the naive recipe's SGD step is its step as surely as its convolutions."""
    monkeypatch.setattr(torch.optim.SGD, "step", vars(torch.optim.SGD)["step"])
    sgd = importlib.import_module("torch.optim.sgd")
    monkeypatch.setattr(sgd, "sgd", sgd.sgd)
    monkeypatch.setattr(
        torch.optim.Optimizer, "zero_grad", vars(torch.optim.Optimizer)["zero_grad"]
    )
    hooks = importlib.import_module("torch.optim.optimizer")._global_optimizer_pre_hooks
    try:
        with pytest.raises(guard.SettingsChanged, match=said):
            _train(_submission(init=init), data_dir)
    finally:
        hooks.clear()


def test_a_method_set_on_torch_tensor_over_the_one_it_inherits_is_refused(data_dir, monkeypatch):
    """``torch.Tensor.contiguous`` is ``TensorBase``'s: set on ``torch.Tensor``, it is a name added
    there, not one replaced. Held from torch's own state (an earlier test's restore leaves the name
    on ``torch.Tensor``, which hid this from the test above)."""
    if "contiguous" in vars(torch.Tensor):
        monkeypatch.delattr(torch.Tensor, "contiguous")
    source = _submission(init="torch.Tensor.contiguous = lambda self, memory_format=None: self")
    with pytest.raises(guard.SettingsChanged, match=r"replaced torch\.Tensor\.contiguous"):
        _train(source, data_dir)


def test_a_saved_tensor_hook_entered_by_the_pipeline_is_refused(data_dir):
    """A review's route into the grader's step: a pipeline that enters a default saved-tensor hook
    and leaves it entered runs its pack hook in the grader's forward, with the tensors in hand."""
    init = (
        "self.hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t); "
        "self.hooks.__enter__()"
    )
    with pytest.raises(guard.SettingsChanged, match="saved-tensor hook"):
        _train(_submission(init=init), data_dir)
    torch._C._autograd._pop_saved_tensors_default_hooks()  # the attack's, left entered
