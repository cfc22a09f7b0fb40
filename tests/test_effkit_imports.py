"""effkit's own imports: no circle between its modules, and none hidden inside a function.

An import inside a function is how a circle between two modules usually hides (each imports the
other at call time); inside functions only optional third-party packages may be imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "effkit"
# effkit/lesson.py has its own owner; these function-level imports wait for their change (moving them to the
# top of lesson.py). Only these: a new one there fails like anywhere else.
PENDING = {("effkit/lesson.py", "effkit.workloads.bert.data"), ("effkit/lesson.py", "effkit.workloads.bert.profiles"),
           ("effkit/lesson.py", "effkit.workloads.cifar.data"), ("effkit/lesson.py", "effkit.workloads.cifar.profiles"),
           ("effkit/lesson.py", "effkit.measure")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def effkit_imports(tree: ast.AST, name: str, modules: set[str], is_package: bool) -> list[tuple[str, int, bool]]:
    """(imported effkit module, line, inside a function) for every import in ``tree``."""
    found: list[tuple[str, int, bool]] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:  # relative: resolve against this module's package
            package = name.split(".") if is_package else name.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        # ``from effkit import x`` imports the submodule effkit.x when there is one
        subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
        return subs if len(subs) == len(node.names) else [base, *subs]

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in targets(node):
                if target == "effkit" or target.startswith("effkit."):
                    found.append((target, node.lineno, in_function))
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """effkit module -> the effkit modules it imports, and every import made inside a function."""
    files = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    in_functions = []
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for target, line, in_function in effkit_imports(tree, name, modules, path.name == "__init__.py"):
            if target != name and target in modules:
                graph[name].add(target)
            if in_function and (path.relative_to(ROOT).as_posix(), target) not in PENDING:
                in_functions.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return graph, in_functions


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_effkit_modules_import_each_other_without_a_circle():
    graph, _ = import_graph()
    assert "effkit.doctor" in graph and "effkit.workloads.cifar" in graph  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "effkit import circle: " + " -> ".join(cycle)


def test_no_effkit_module_is_imported_inside_a_function():
    _, in_functions = import_graph()
    assert not in_functions, "effkit imports inside functions (move them to the top of the module):\n" + "\n".join(
        in_functions)


def test_the_checks_see_a_planted_circle_and_a_function_level_import():
    a = ast.parse("from effkit import b\n")
    b = ast.parse("import os\n\ndef f():\n    from effkit.a import x\n")
    modules = {"effkit", "effkit.a", "effkit.b"}
    graph = {name: {t for t, _, _ in effkit_imports(tree, name, modules, False)} & modules
             for name, tree in (("effkit.a", a), ("effkit.b", b))}
    assert find_cycle(graph) == ["effkit.a", "effkit.b", "effkit.a"]
    assert [(t, f) for t, _, f in effkit_imports(b, "effkit.b", modules, False)] == [("effkit.a", True)]
    guarded = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from effkit import a\n")
    assert effkit_imports(guarded, "effkit.b", modules, False) == []
