"""Everything in effkit that implements a withheld answer, found by content, not by name.

An answer (``learner_view.WITHHELD``) brings along the effkit functions it calls (its helpers) and every
function whose code is a copy or a variant of one of those (a twin, under any name, in any module), and
their helpers in turn; the tools a lesson hands its learners (``Manifest.tools``: a measuring helper, a
shared normalisation) stay whole and are not followed. Names alone withheld ``effkit.length_buckets.bucket_batches`` while its twin in
``effkit.workloads.bert.batching`` and its helpers stayed whole: one call and eight lines of glue earned
lesson 7's five cells (issue 52). Standard library only.
"""

from __future__ import annotations

import ast
import copy
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# A twin shares at least this many normalised statements with an answer's function, and they are at
# least this share of the smaller of the two: a variant (another signature, a step left out) is still
# caught, while functions that merely use numpy alike are not (tests/test_answer_closure.py).
MIN_SHARED = 4
MIN_SHARE = 0.6


@dataclass(frozen=True)
class Function:
    """One function or method of the package: where it is and what it says."""

    module: str  # dotted, e.g. "effkit.length_buckets"
    qualname: str  # "bucket_batches", or "Class.method"
    path: Path
    node: ast.FunctionDef | ast.AsyncFunctionDef

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qualname}"


def functions(root: Path, package: str = "effkit") -> dict[str, Function]:
    """Every function and method of ``package``'s sources under ``root``, by dotted name."""
    out: dict[str, Function] = {}
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except SyntaxError:
            continue  # a broken file imports as broken in the worker too; nothing to withhold
        for node, qualname in defs(tree.body, ""):
            out[f"{module}.{qualname}"] = Function(module, qualname, path, node)
    return out


def defs(body: list[ast.stmt], prefix: str):
    """(function node, qualified name) of every function and method in ``body``, nested classes too."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, prefix + node.name
        elif isinstance(node, ast.ClassDef):
            yield from defs(node.body, f"{prefix}{node.name}.")


def _imports(path: Path, module: str, package: str) -> dict[str, str]:
    """Local name -> dotted ``package`` target, for the module-level imports of ``path``."""
    out: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                anchor = module.split(".")[: -node.level]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                out[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
    return {k: v for k, v in out.items() if v.split(".")[0] == package}


def callees(fn: Function, table: dict[str, Function], package: str = "effkit") -> set[str]:
    """The package's functions ``fn`` refers to: same-module names, imported names, ``module.name``
    attributes of an imported module, and ``self.method`` / ``Class.method`` of its own class."""
    names = _imports(fn.path, fn.module, package)
    own_class = fn.qualname.rpartition(".")[0]
    local = _local_names(fn.node)  # an argument named like a function of the module is not a call
    out: set[str] = set()
    for node in ast.walk(fn.node):
        target = None
        if isinstance(node, ast.Name) and node.id not in local:
            target = names.get(node.id, f"{fn.module}.{node.id}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = node.value.id
            if base in ("self", "cls") and own_class:
                target = f"{fn.module}.{own_class}.{node.attr}"
            elif base in local:
                continue
            elif base in names:
                target = f"{names[base]}.{node.attr}"
            else:
                target = f"{fn.module}.{base}.{node.attr}"
        if target in table and target != fn.dotted:
            out.add(target)
    return out


def shape(node: ast.FunctionDef | ast.AsyncFunctionDef, in_place: bool = False) -> list[str]:
    """The function's statements with its own names (arguments, locals) all called ``v``, annotations
    and the docstring dropped, compound statements by their header only: what a renamed or re-signed
    copy keeps. ``in_place``: rename in ``node`` itself (a tree parsed for this alone: no copy)."""
    tree = node if in_place else copy.deepcopy(node)
    local = _local_names(tree)
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in local:
            n.id = "v"
        elif isinstance(n, ast.arg):
            n.arg, n.annotation = "v", None
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    out: list[str] = []
    for stmt in _statements(body):
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is None:
                continue
            stmt = ast.Assign(targets=[stmt.target], value=stmt.value, lineno=0)
        head = copy.copy(stmt)
        for field in ("body", "orelse", "finalbody", "handlers"):
            if hasattr(head, field):
                setattr(head, field, [ast.Pass()] if field == "body" else [])
        if isinstance(head, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            head.decorator_list, head.returns = [], None
        out.append(ast.unparse(head))
    return out


def _local_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Arguments and every name the function (or a comprehension in it) assigns."""
    local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    return local | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _statements(body: list[ast.stmt]):
    for stmt in body:
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(stmt, field, []) or [])
        for handler in getattr(stmt, "handlers", []) or []:
            yield from _statements(handler.body)


def is_twin(candidate: list[str], answer: list[str]) -> bool:
    """Whether code shaped ``candidate`` implements what code shaped ``answer`` does."""
    if not candidate or not answer:
        return False
    if candidate == answer:
        return True
    shared = sum((Counter(candidate) & Counter(answer)).values())
    return shared >= MIN_SHARED and shared >= MIN_SHARE * min(len(candidate), len(answer))


def answer_closure(
    seeds: list[str], root: Path, package: str = "effkit", keep: tuple[str, ...] = ()
) -> dict[str, str]:
    """Every function of ``package`` under ``root`` that implements one of ``seeds`` (dotted names):
    the seeds, their helpers and twins, to a fixed point, less ``keep`` (tools the lesson or its
    worker uses: never withheld, never followed). Maps each to the seed it serves; a seed or a kept
    name that names no function is an error (a renamed answer must not go quietly unwithheld)."""
    table, shapes = _parsed(root, package)
    missing = [s for s in [*seeds, *keep] if s not in table]
    if missing:
        raise LookupError(f"withheld answer {missing[0]} is not a function under {root / package}")
    found = {s: s for s in seeds}
    todo = list(seeds)
    while todo:
        name = todo.pop()
        related = callees(table[name], table, package)
        related |= {other for other in table if is_twin(shapes[other], shapes[name])}
        for other in sorted(related - set(found) - set(keep)):
            found[other] = found[name]
            todo.append(other)
    return found


_PARSED: dict[tuple, tuple[dict[str, Function], dict[str, list[str]]]] = {}
# copies_in's last closure with its shapes, by the state of the files and the seeds
_ANSWERS: dict[tuple, dict[str, tuple[list[str], str]]] = {}


def _state(root: Path, package: str) -> tuple:
    """What ``package``'s sources are now: each file's path, modification time and size."""
    files = sorted(p for p in (root / package).rglob("*.py") if "__pycache__" not in p.parts)
    return (
        str(root),
        package,
        tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files),
    )


def _parsed(root: Path, package: str) -> tuple[dict[str, Function], dict[str, list[str]]]:
    """``package``'s functions and their shapes, parsed once per state of its files (a launch's view and the
    grader's check of a cell ask for the same closure: parsing effkit took 1-3 s on a busy 2-core host)."""
    key = _state(root, package)
    if key not in _PARSED:
        # a second parse to rename in: copying every function's tree cost seconds a launch
        shapes = {n: shape(fn.node, in_place=True) for n, fn in functions(root, package).items()}
        _PARSED.clear()  # one state kept: the files changed, the old parse is stale
        _PARSED[key] = (functions(root, package), shapes)
    return _PARSED[key]


def copies_in(
    source: str, seeds: list[str], root: Path, package: str = "effkit"
) -> list[tuple[str, str]]:
    """(function, the answer it serves) for each function of a learner's cell ``source`` that is a twin of
    one of ``seeds`` or of what implements them (:func:`answer_closure`): a pasted copy, renamed, re-signed or
    trimmed, is caught as a twin in effkit is. Parsed, never run. Functions of fewer than ``MIN_SHARED``
    statements are matched only by a longer twin: a two-line getter alike is anybody's."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # the cell fails to load in the worker, and says so there
    key = (_state(root, package), tuple(seeds))
    if key not in _ANSWERS:  # a grading reads each cell of a notebook: the closure once
        shapes = _parsed(root, package)[1]
        _ANSWERS.clear()
        _ANSWERS[key] = {
            name: (shapes[name], serves)
            for name, serves in answer_closure(seeds, root, package).items()
        }
    return _twins_in(tree, _ANSWERS[key], depth=0)


def _twins_in(tree: ast.AST, answers: dict, depth: int, where: str = "") -> list[tuple[str, str]]:
    """Twins among ``tree``'s functions at any depth, and in every string constant that parses as Python:
    an answer kept as text and run with ``exec`` at load time is read as the cell is (a review: effkit's
    doctor in a string, exec'd behind a one-line ``diagnose``, scored 8/8 unseen)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mine = shape(node)
            for code, serves in answers.values():
                if len(code) >= MIN_SHARED and is_twin(mine, code):
                    found.append((node.name + where, serves))
                    break
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and depth < MAX_DEPTH:
            if "def " not in node.value:
                continue
            try:
                inner = ast.parse(node.value)
            except (SyntaxError, ValueError):
                continue
            found += _twins_in(inner, answers, depth + 1, where + " (in a string)")
    return found


# code within a string within a string ... is read this deep
MAX_DEPTH = 3
# what turns data into code at run time: a cell that names one of these is refused where the grader reads the
# cells as text (lesson 10), since an encoded copy (base64, zlib, bytes) is not text it can match. Bare names
# (the builtins), attributes that reach them (``builtins.exec``; not ``torch.compile``, ``re.compile``, ``model.eval``), the
# modules that load code, and string literals naming them (``getattr(builtins, "exec")``)
RUNTIME_NAMES = ("exec", "eval", "compile", "__import__", "__builtins__")
RUNTIME_ATTRS = ("exec", "__import__", "__builtins__")  # not eval: model.eval()
# Every standard route from bytes to running code (a file written to /tmp and run by runpy, a string run by timeit or
# code, a pickle, a CodeType, a child Python), and the modules that read the caller's frames (sys._getframe,
# inspect, gc, traceback): a frame up the stack holds the grader's whole batch of cases (a review found both).
RUNTIME_MODULES = (
    "builtins", "marshal", "importlib", "runpy", "code", "codeop", "timeit", "pickle", "shelve", "dill",
    "cloudpickle", "types", "ctypes", "subprocess", "os", "pty", "multiprocessing", "pkgutil", "zipimport",
    "sys", "inspect", "gc", "traceback",
)  # fmt: skip
# frames and code objects reached through attributes (an exception's traceback, a generator's frame)
FRAME_ATTRS = (
    "_getframe", "f_back", "f_locals", "f_globals", "tb_frame", "gi_frame", "cr_frame", "ag_frame",
    "__traceback__", "__code__", "__globals__", "run_path", "run_module",
)  # fmt: skip
_ATTRS = (
    RUNTIME_ATTRS + FRAME_ATTRS + RUNTIME_MODULES
)  # a module reached through another's attribute too
_WORDS = (
    RUNTIME_NAMES + RUNTIME_MODULES + FRAME_ATTRS
)  # named in a string: getattr(builtins, "exec")


# the narrower class where a lesson's cells may read frames or the environment for honest reasons (lesson 2's timed
# attacks are met by the timed protocol): only what turns text or bytes into code, the road of an encoded copy
CODE_FROM_DATA = RUNTIME_NAMES + (
    "marshal", "importlib", "runpy", "code", "codeop", "timeit", "pickle", "shelve", "dill", "cloudpickle",
    "types", "zipimport", "pkgutil", "__code__", "run_path", "run_module",
)  # fmt: skip


def makes_code_from_data(source: str) -> list[str]:
    """The part of :func:`runs_code_from_data` that turns data into code (``exec``, ``compile``, ``importlib``,
    ``pickle``, ...), each once, in order: an answer kept encoded (base64, zlib) is not text a twin check can read."""
    return [n for n in runs_code_from_data(source) if n.split(".")[0] in CODE_FROM_DATA]


def runs_code_from_data(source: str) -> list[str]:
    """What in ``source`` makes code from data at run time or reads the frames that called it, each once, in
    order. Parsed, never run; a cell that does not parse is the worker's to report. **Residual**: a name built at
    run time (``"ex" + "ec"`` through ``getattr``), and a module outside the lists that runs code (torch.package)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    named: list[str] = []
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Name) and node.id in RUNTIME_NAMES:
            name = node.id
        elif isinstance(node, ast.Attribute) and node.attr in _ATTRS:  # torch.multiprocessing too
            name = node.attr
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            name = next((m for m in modules if m.split(".")[0] in RUNTIME_MODULES), "")
        elif isinstance(node, ast.Constant) and node.value in _WORDS:
            name = node.value
        if name and name not in named:
            named.append(name)
    return named
