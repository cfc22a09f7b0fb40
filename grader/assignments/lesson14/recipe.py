"""The capstone's recipe, as the parent reads it: named changes to the naive CIFAR recipe.

The learner's cell assigns ``CHANGES = {name: {setting: value}}`` and ``PREDICTED_SHARES = {name:
share}``. The parent reads both from the cell's *text* (``ast.literal_eval``): no learner code runs
where points are computed. The one value that is code, a ``"pipeline"``, is read as the name of a
class the cells define; only the learner's timed worker ever builds it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# What a change may set, with the naive recipe's own value (a change to that value changes nothing)
# and what a valid value is. The schedule length, the target and the evaluation are the grader's.
NAIVE = {
    "pipeline": None,
    "batch_size": 128,
    "lr": 0.1,
    "precision": "off",
    "channels_last": False,
    "compile": False,
}
VALID = {
    "pipeline": lambda v: isinstance(v, str) and v.isidentifier(),
    "batch_size": lambda v: type(v) is int and 16 <= v <= 1024,
    "lr": lambda v: type(v) in (int, float) and 0 < v <= 10,
    "precision": lambda v: v in ("off", "bf16", "fp16", "auto"),
    "channels_last": lambda v: type(v) is bool,
    "compile": lambda v: type(v) is bool,
}
GRADER_OWNED = ("epochs", "target", "tta", "eval_every")
# effkit's answers: a pipeline or recipe by these names is the course's, not the learner's
REFERENCE_NAMES = ("DevicePipeline", "OptimizedTrainer", "airbench_net")
N_ATTRIBUTED = 3  # the three most impactful changes carry a predicted share of the gain


@dataclass
class Recipe:
    changes: dict[str, dict] = field(default_factory=dict)  # name -> {setting: value}
    shares: dict[str, float] = field(default_factory=dict)  # name -> predicted share of the gain
    problems: list[str] = field(default_factory=list)  # why it cannot be graded at all
    no_ops: list[str] = field(default_factory=list)  # changes that set the naive value: named only

    def hooks(self, without: str | None = None) -> dict:
        """The learner side's recipe overrides (``GradingSpec.learner_hooks``), leaving out
        change ``without`` (a leave-one-out ablation). A pipeline travels as its change's name."""
        out = {}
        for name, settings in self.changes.items():
            if name == without:
                continue
            for key, value in settings.items():
                out.update(self.pipeline_hooks(name) if key == "pipeline" else {key: value})
        return out

    def pipeline_hooks(self, name: str) -> dict:
        """A pipeline change as it travels to the worker: the change's name and the class name the
        cell's text gave it (the worker refuses a ``CHANGES`` whose class was swapped after that
        text, ``runtime.build_trainer``)."""
        return {"own_pipeline": name, "own_pipeline_class": self.changes[name]["pipeline"]}

    def pipeline_change(self) -> str | None:
        """The change that feeds the recipe through the learner's pipeline (one at most: two
        changes may not set one thing)."""
        return next((n for n, s in self.changes.items() if "pipeline" in s), None)


def _assigned(source: str, name: str):
    """The last top-level ``name = <expression>`` in ``source`` (None if none)."""
    found = None
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == name for t in node.targets
        ):
            found = node.value
    return found


def _settings(node) -> dict:
    """A change's ``{setting: value}``; a pipeline's value is a bare class name."""
    if not isinstance(node, ast.Dict):
        raise ValueError("each change must be a dict literal of settings, e.g. {'batch_size': 256}")
    out = {}
    for k, v in zip(node.keys, node.values, strict=True):
        key = ast.literal_eval(k)
        out[key] = v.id if key == "pipeline" and isinstance(v, ast.Name) else ast.literal_eval(v)
    return out


def read(source: str) -> Recipe:
    """The recipe the solution cells' ``source`` declares, with every reason it cannot be graded."""
    rec = Recipe()
    try:
        changes_node, shares_node = (
            _assigned(source, "CHANGES"),
            _assigned(source, "PREDICTED_SHARES"),
        )
    except SyntaxError as err:
        return Recipe(problems=[f"your cell does not parse: {err}"])
    if changes_node is None and "NotImplementedError" in source:  # the released stub, untouched
        rec.problems.append(
            "no performance points: your solution cells still raise NotImplementedError - assign "
            "CHANGES = {'name': {setting: value}, ...} and PREDICTED_SHARES in place of the stub"
        )
        return rec
    if changes_node is None or not isinstance(changes_node, ast.Dict) or not changes_node.keys:
        rec.problems.append(
            "no change: assign CHANGES = {'name': {setting: value}, ...} in your cell"
        )
        return rec
    try:
        for k, v in zip(changes_node.keys, changes_node.values, strict=True):
            rec.changes[ast.literal_eval(k)] = _settings(v)
        rec.shares = ast.literal_eval(shares_node) if shares_node is not None else {}
    except (ValueError, TypeError, SyntaxError) as err:
        rec.problems.append(
            f"CHANGES and PREDICTED_SHARES must be literals the grader can read: {err}"
        )
        return rec
    _check(rec)
    _check_own_pipeline(rec, source)
    return rec


def _check(rec: Recipe) -> None:
    set_by: dict[str, str] = {}
    for name, settings in rec.changes.items():
        for key, value in settings.items():
            if key in GRADER_OWNED:
                rec.problems.append(
                    f"change {name!r} sets {key!r}: the schedule length, the target and the "
                    "evaluation are the grader's (every run trains the same epochs to the same target)"
                )
            elif key not in VALID:
                rec.problems.append(
                    f"change {name!r}: unknown setting {key!r}; one of {sorted(VALID)}"
                )
            elif not VALID[key](value):
                rec.problems.append(f"change {name!r}: {key}={value!r} is not a valid value")
            elif key == "pipeline" and value in REFERENCE_NAMES:
                rec.problems.append(
                    f"change {name!r} uses effkit's {value}, the course's answer: write your own"
                )
            if key in set_by:
                rec.problems.append(
                    f"changes {set_by[key]!r} and {name!r} both set {key!r}: one setting, one "
                    "change, or leaving one out could not tell them apart"
                )
            set_by[key] = name
        if settings and all(_same(NAIVE.get(k, object()), v) for k, v in settings.items()):
            rec.no_ops.append(name)
    shares = rec.shares
    if not isinstance(shares, dict) or len(shares) != N_ATTRIBUTED:
        rec.problems.append(
            f"PREDICTED_SHARES must give your {N_ATTRIBUTED} most impactful changes a share each"
        )
        return
    unknown = [n for n in shares if n not in rec.changes]
    if unknown:
        rec.problems.append(f"PREDICTED_SHARES names {unknown}, which CHANGES does not")
    named_no_ops = [n for n in shares if n in rec.no_ops]
    if named_no_ops:
        rec.problems.append(
            f"PREDICTED_SHARES names {named_no_ops}, which only set the naive recipe's own value: "
            "a change that changes nothing cannot be among your three most impactful"
        )
    if not all(type(s) in (int, float) and 0 <= s <= 1 for s in shares.values()):
        rec.problems.append("each predicted share is a fraction of the gain, between 0 and 1")


# A number within this of naive's is naive's: a review named {"lr": 0.1000001} a "change" that could
# then carry a predicted share (no run can tell 0.1 from it, so no ablation can measure it)
SAME_WITHIN = 0.1


def _same(naive, value) -> bool:
    """``value`` is naive's own setting (numbers: within ``SAME_WITHIN`` of it, relative)."""
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (naive, value))
    if numbers:
        return abs(value - naive) <= SAME_WITHIN * abs(naive)
    return naive == value


def _defined_classes(source: str) -> dict[str, ast.ClassDef]:
    """Top-level names whose *last* binding in ``source`` is a ``class`` statement."""
    last: dict[str, ast.AST] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            last[node.name] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            last.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        else:  # assignments, and anything else that may bind or delete a name (for, with, := ...)
            last.update(
                {
                    n.id: node
                    for n in ast.walk(node)
                    if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
                }
            )
    return {name: node for name, node in last.items() if isinstance(node, ast.ClassDef)}


def _check_own_pipeline(rec: Recipe, source: str) -> None:
    """The capstone asks for code of the learner's own, not only settings: one change must feed
    the recipe through a pipeline class the cells define, with its own ``__iter__`` (the batches
    it makes are then judged by the parent, ``timed_checks``). Read from the text, so a class that
    only delegates to effkit's naive pipeline inside its own ``__iter__`` passes this rule; it
    gains nothing itself, which the parent measures (``capstone._own_pipeline``: timed alone, run
    against run, under lesson 2's floor it earns no tier)."""
    classes = _defined_classes(source)
    pipelines = {n: s["pipeline"] for n, s in rec.changes.items() if "pipeline" in s}
    why = []
    for change, cls in pipelines.items():
        node = classes.get(cls)
        if node is None:
            why.append(f"change {change!r}: {cls} is not a class your cell defines (last)")
        elif not any(isinstance(f, ast.FunctionDef) and f.name == "__iter__" for f in node.body):
            why.append(f"change {change!r}: {cls} does not define its own __iter__")
        else:
            return
    rec.problems.append(
        "your recipe needs one change that is your own code: a 'pipeline' change naming a class "
        "your cell defines, with its own __iter__ (lesson 2's contract); settings alone are not "
        "the capstone" + (f" ({'; '.join(why)})" if why else "")
    )
