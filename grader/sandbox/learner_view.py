"""What of the repository a learner's worker may see: an allow-list view, built in its mount namespace.

So learner code cannot import the parent's checks and copy a reference result. A worker-side
module importing outside the list fails in the worker (``tests/test_grader_learner_view.py``
catches it first); without root every file stays readable.
"""

from __future__ import annotations

import ast
import shlex
import site
import sys
from pathlib import Path

from grader import assignments
from grader.sandbox.answer_closure import answer_closure, defs, functions

REPO_ROOT = Path(__file__).resolve().parents[2]
STAGE = "/mnt"  # where the view is built before it is moved over the repository (see view_mounts)

# Worker entry points and the core pieces they import (process tree walk, pipes, quiz answers, the
# timed worker's audit and data, the registry and its manifests).
_CORE = (
    "grader",
    "grader.sandbox",
    "grader.sandbox.worker",
    "grader.sandbox.probe_worker",
    "grader.sandbox.learner_view",
    "grader.sandbox.answer_closure",
    "grader.sandbox.proctree",
    "grader.sandbox.tamper",
    "grader.sandbox.channel",
    "grader.sandbox.commit",
    "grader.sandbox.seal",
    "grader.sandbox.fence",
    "grader.sandbox.relay",
    "grader.sandbox.timelimit",
    "grader.kit",
    "grader.kit.worker",
    "grader.kit.assignment",
    "grader.timed",  # the package alone (a docstring), for its spec below
    "grader.timed.spec",
    "grader.kit.manifest",
    "grader.kit.audit",
    "grader.kit.data",
    "grader.kit.timed_runtime",
    "grader.kit.cifar_runtime",  # lessons 2 and 14 (the runtime a lesson imports must be in view)
    "grader.assignments",
)
# Per lesson (its manifest, grader/assignments/<id>/manifest.py, read through the registry): the
# package, its probes, the timed runtime and the task modules those import. Parent-side modules
# (checks, references, keys) are never listed.
# WITHHELD: effkit functions that *are* an exercise's answer (the lesson says so): in that lesson's
# workers their bodies raise, so one line that calls effkit earns nothing (issue 42). Copying the
# code from the lesson into a cell is not stopped here.
WITHHELD: dict[str, tuple[str, ...]] = assignments.withheld()
TOOLS: dict[str, tuple[str, ...]] = assignments.tools()  # what those answers call that stays whole
WORKER_MODULES: tuple[str, ...] = _CORE + assignments.worker_modules()


def module_file(name: str, root: Path = REPO_ROOT) -> Path:
    """The source file of grader module ``name`` under ``root`` (a package's ``__init__.py``)."""
    path = root.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def withheld_source(
    path: Path, names: list[str], lesson: str, serves: dict[str, str | None] | None = None
) -> str:
    """``path``'s source with the functions ``names`` (``f`` or ``Class.f``) kept as signatures whose
    body raises ``ReferenceAnswerWithheld`` (a name that explains itself where a check shows only the
    type). ``serves``: the answer each helper or twin implements, named in its message."""
    tree = ast.parse(path.read_text())
    parts = path.with_suffix("").parts
    module = ".".join(
        parts[len(parts) - 1 - parts[::-1].index("effkit") :] if "effkit" in parts else parts[-2:]
    )
    for node, qualname in defs(tree.body, ""):
        if qualname in names:
            answer = (serves or {}).get(qualname)
            what = (
                f"implements {lesson}'s reference answer ({answer})"
                if answer
                else f"is {lesson}'s reference answer"
            )
            why = f"{module}.{qualname} {what}, withheld from the grader's worker: write your own"
            node.body = ast.parse(f"raise ReferenceAnswerWithheld({why!r})").body
    after = [
        i + 1
        for i, n in enumerate(tree.body)
        if isinstance(n, ast.ImportFrom) and n.module == "__future__"
    ]
    tree.body[max(after, default=0) : max(after, default=0)] = ast.parse(
        "class ReferenceAnswerWithheld(RuntimeError):\n    pass\n"
    ).body
    return ast.unparse(tree) + "\n"


def withheld_files(
    root: Path = REPO_ROOT, lesson: str | None = None
) -> dict[Path, dict[str, str | None]]:
    """Per effkit file, the functions ``lesson``'s worker sees raising: its ``WITHHELD`` answers and
    everything that implements them by content (:mod:`grader.sandbox.answer_closure`: helpers, twins),
    each mapped to the answer it serves (None for the answer itself)."""
    seeds = list(WITHHELD.get(lesson or "", ()))
    if not seeds:
        return {}
    table = functions(root)
    out: dict[Path, dict[str, str | None]] = {}
    keep = TOOLS.get(lesson or "", ())
    for dotted, answer in answer_closure(seeds, root, keep=keep).items():
        fn = table[dotted]
        out.setdefault(fn.path, {})[fn.qualname] = None if dotted == answer else answer
    return out


def effkit_files(root: Path = REPO_ROOT) -> list[Path]:
    """effkit's files as the worker may see them: everything but compiled caches (a ``.pyc`` would
    carry a withheld function's code)."""
    return sorted(
        p for p in (root / "effkit").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )


def other_copies(package: str, root: Path = REPO_ROOT) -> list[Path]:
    """Every ``package`` folder the worker's import system could reach other than ours: an installed
    copy in a site directory, the folder an editable install's finder maps it to."""
    found = {
        Path(p) / package
        for p in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
        if p
    }
    for mod in list(
        sys.modules.values()
    ):  # setuptools' editable finders: MAPPING = {"grader": path}
        mapping = getattr(mod, "MAPPING", None)
        if isinstance(mapping, dict) and isinstance(mapping.get(package), str):
            found.add(Path(mapping[package]))
    ours = (root / package).resolve()
    return sorted({p.resolve() for p in found if p.is_dir() and p.resolve() != ours})


def view_mounts(root: Path = REPO_ROOT, lesson: str | None = None) -> list[str]:
    """Shell commands (root, inside the worker's private mount namespace, after the course folders
    are hidden) that leave at ``root`` only the allow-listed view, with ``lesson``'s ``WITHHELD``
    functions raising. ``root`` stays on ``sys.path``."""

    def q(arg) -> str:
        return shlex.quote(str(arg))

    copies = other_copies("grader", root) + other_copies("effkit", root)
    cmds = [f"mount -t tmpfs -o size=1k,mode=0 tmpfs {q(p)}" for p in copies]
    cmds.append(f"mkdir -p {STAGE} && mount -t tmpfs -o size=8m,mode=0755 tmpfs {STAGE}")
    files: dict[Path, list[Path]] = {}
    for name in WORKER_MODULES:
        src = module_file(name, root)
        files.setdefault(src.parent.relative_to(root), []).append(src)
    cmds += [
        f"mkdir -p {q(f'{STAGE}/{d}')} && cp {' '.join(q(s) for s in srcs)} {q(f'{STAGE}/{d}')}"
        for d, srcs in sorted(files.items())
    ]
    # effkit (the course's library): copied, sources only, the lesson's withheld answers masked
    withheld = withheld_files(root, lesson)
    dirs: dict[Path, list[Path]] = {}
    for src in effkit_files(root):
        if src not in withheld:
            dirs.setdefault(src.parent.relative_to(root), []).append(src)
    cmds += [
        f"mkdir -p {q(f'{STAGE}/{d}')} && cp {' '.join(q(s) for s in srcs)} {q(f'{STAGE}/{d}')}"
        for d, srcs in sorted(dirs.items())
    ]
    for src, names in withheld.items():
        masked = withheld_source(src, list(names), lesson, names)
        cmds.append(f"printf %s {q(masked)} > {q(f'{STAGE}/{src.relative_to(root)}')}")
    # a Python installation inside the repository: bound, read-only to the worker's user anyway
    # (root-owned); it keeps its own files whole.
    carried = [*{Path(p).resolve() for p in (sys.prefix, sys.base_prefix)}]
    for path in carried:
        if path.is_dir() and root.resolve() in path.resolve().parents:
            rel = path.resolve().relative_to(root.resolve())
            cmds.append(
                f"mkdir -p {q(f'{STAGE}/{rel}')} && mount --rbind {q(path)} {q(f'{STAGE}/{rel}')}"
            )
    cmds.append(f"mount --move {STAGE} {q(root)}")
    return cmds
