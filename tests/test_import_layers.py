"""The grader's layers are folders, every import points down, and neither grader nor effkit has a circle.

A new maintainer reads ``grader/`` bottom-up: common → sandbox → timed → scoring → kit →
assignments → frontends → cli. These tests keep it that way: no upward import, no import
circle, lessons use only ``grader.kit``, and no import hides inside a function (where circles
used to hide) unless it is an optional heavy third-party dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["common", "sandbox", "timed", "scoring", "kit", "assignments", "frontends", "cli"]
# Third-party packages heavy enough to import only where used (seconds of start-up in a worker
# that never needs them), or optional (not every install has nbgrader or matplotlib).
LAZY_OK = {
    "torch",
    "torchvision",
    "numpy",
    "nbformat",
    "nbclient",
    "nbgrader",
    "matplotlib",
    "jupytext",
    "transformers",
    "optuna",
    "datasets",
    "safetensors",
    "traitlets",
    "tqdm",
    "yaml",
    "PIL",
    "onnx",
    "onnxruntime",
    "google",
    "peft",
    "huggingface_hub",
    "tokenizers",
    "accelerate",
    "evaluate",
    "scipy",
    "pandas",
    "sklearn",
    "playwright",
    "ray",  # the grading farm's engine: the `farm` extra only
    "cryptography",  # the grading service's Ed25519 signatures: the `cohort` extra only
}
# effkit's workloads need the `course` extra (torchvision, transformers): lazy like those.
LAZY_PREFIXES = ("effkit.workloads",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> dict[str, Path]:
    """The package's modules; scripts in folders that are no package (a lesson's ``calibration/``,
    run by hand, never imported or shipped) are not part of its layers."""
    return {
        module_name(p): p
        for p in sorted((ROOT / package).rglob("*.py"))
        if all((ROOT / d / "__init__.py").is_file() for d in p.relative_to(ROOT).parents[:-1])
    }


def _type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(
        node.test
    )


def imports(path: Path, known: set[str], name: str = "") -> list[tuple[str, int, bool]]:
    """(module imported, line, inside a function) for every import of ``path``; a ``from a
    import b`` names ``a.b`` when that is a module. ``if TYPE_CHECKING:`` blocks do not count."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for a in child.names:
                    full = f"{base}.{a.name}"
                    out.append((full if full in known else base, child.lineno, in_function))
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return out


def graph(packages=("grader", "effkit")) -> tuple[dict[str, set[str]], dict[str, Path]]:
    files = {k: v for p in packages for k, v in modules(p).items()}
    edges = {m: set() for m in files}
    for m, path in files.items():
        for target, _, _ in imports(path, set(files)):
            while target and target not in files:  # "grader.x.y.z" -> its module
                target = target.rpartition(".")[0]
            if target and target != m and target.split(".")[0] in packages:
                edges[m].add(target)
    return edges, files


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as a path, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state and (found := dfs(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := dfs(m)):
            return found
    return None


def layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "grader":
        return None
    if len(parts) == 1:
        return -1  # grader/__init__: imports nothing
    if parts[1] == "__main__":
        return LAYERS.index("cli")
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def test_every_grader_module_lives_in_a_layer_folder():
    stray = [m for m in modules("grader") if layer(m) is None]
    assert not stray, f"modules outside the layer folders {LAYERS}: {stray}"


# The one upward edge: the learner's view is computed from the lessons' manifests, which only the
# registry reads (so grader/sandbox/ names no lesson). It stays a read of declarations, never of a
# lesson's code: the registry itself may import nothing of the grader but the kit's two
# declaration types (test_the_registry_the_sandbox_reads_imports_only_declarations).
UPWARD_OK = {("grader.sandbox.learner_view", "grader.assignments")}


def test_no_grader_module_imports_a_layer_above_its_own():
    edges, _ = graph()
    upward = [
        f"{m} (layer {LAYERS[layer(m)]}) imports {n} (layer {LAYERS[layer(n)]})"
        for m in edges
        for n in edges[m]
        if layer(m) is not None and layer(n) is not None and layer(n) > layer(m)
        if (m, n) not in UPWARD_OK
    ]
    assert not upward, "\n".join(upward)


def test_the_registry_the_sandbox_reads_imports_only_declarations():
    edges, _ = graph()
    assert edges["grader.assignments"] == {"grader.kit.assignment", "grader.kit.manifest"}
    assert edges["grader.kit.manifest"] == {"effkit.syllabus"}  # the row it references
    assert {m for m, _ in UPWARD_OK} <= set(edges)  # a stale exception fails too


def test_lessons_import_only_the_kit_from_the_grader():
    edges, _ = graph()
    bad = [
        f"{m} imports {n}"
        for m in edges
        if m.startswith("grader.assignments.lesson")
        for n in edges[m]
        if n.startswith("grader.")
        and not n.startswith(("grader.kit", f"grader.assignments.{m.split('.')[2]}"))
    ]
    assert not bad, "a lesson may import grader.kit and its own package only:\n" + "\n".join(bad)


def test_no_import_circle_in_grader_or_effkit():
    edges, _ = graph()
    assert {"effkit.doctor", "effkit.workloads.cifar", "grader.timed.protocol"} <= set(
        edges
    )  # the walk found both
    found = cycle(edges)
    assert found is None, "import circle: " + " -> ".join(found)


def test_imports_inside_functions_are_optional_heavy_dependencies_only():
    _, files = graph()
    bad = []
    for path in files.values():
        for target, line, in_function in imports(path, set(files)):
            lazy = target.split(".")[0] in LAZY_OK or target.startswith(LAZY_PREFIXES)
            if in_function and not lazy:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} inside a function")
    assert not bad, "\n".join(bad)


def test_the_circle_finder_finds_a_planted_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize(
    "source, expect",
    [
        ("def f():\n    import grader.common.course\n", [("grader.common.course", 2, True)]),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import grader.cli\n",
            [("typing", 1, False)],
        ),
    ],
)
def test_imports_sees_function_level_and_skips_type_checking(tmp_path, source, expect):
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert imports(path, set(), name="grader.common.probe") == expect
