"""Lesson 14's text filters, parent only: what a recipe's cells may not be, read from their text.

Before any worker starts, the cells are refused when they are a copy of effkit's answer
(``_copied_pipeline``), make code from data at run time (``_code_from_data``), or reach the grader's
own code by import, by a name built from literals or by walking objects (``_reaches_grader``): the
guard in the learner's worker (guard.py) is a tripwire, and these filters keep learner code from
reaching it by the routes a text shows.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from grader.assignments.lesson14.manifest import MANIFEST
from grader.kit.checks import copies_in, runs_code_from_data

REPO = Path(__file__).resolve().parents[3]


def _source(cells) -> str:
    return "\n".join(src for name, src in cells if name != "quiz")


# Lesson 2's withheld answer, which this lesson's manifest withholds too (a lesson imports no other
# lesson's package; tests/test_lesson14_exercise.py holds the two equal)
LESSON2_ANSWER = MANIFEST.withheld


def _copied_pipeline(source: str) -> list[str]:
    """Lesson 2's answer (effkit's DevicePipeline, the functions lesson 2 withholds) pasted into
    the cell under any name, re-signed or trimmed (``answer_closure.copies_in``, read, never run):
    the capstone's pipeline must be the learner's own work."""
    seeds = list(LESSON2_ANSWER)
    found = copies_in(source, seeds, REPO)
    if not found:
        return []
    names = ", ".join(f"{name} (a copy of {answer})" for name, answer in found[:3])
    return [
        f"your cell copies effkit's DevicePipeline, the course's answer: {names}; write your own"
    ]


def _code_from_data(cells) -> list[str]:
    """A cell that makes code from data at run time (``exec`` of a decoded blob, ``importlib``, a
    child Python) or reads its callers' frames: the copy check above reads text, and such a cell's
    pipeline has none to read (``answer_closure.runs_code_from_data``; the worker's content check of
    lesson 2's withheld answer is the wall behind this filter)."""
    return [
        f"cell {name!r} makes code from data at run time or reads the frames that called it "
        f"({', '.join(found)}): the grader reads your recipe as text to see that it is your own, "
        "so write it as plain Python (no exec, importlib, os, sys or subprocess)"
        for name, src in cells
        if name != "quiz" and (found := runs_code_from_data(src))
    ]


# What reaches the grader's own objects in the learner's worker, where the guard of torch's settings
# runs (guard.py, a tripwire in that process): its modules imported, or a class's subclasses and a
# function's closure cells walked to it. The text filter above already refuses sys, gc and inspect
REACHES_GRADER = ("__subclasses__", "__closure__", "cell_contents")
# The standard routes from a module's name to the module that the filter above leaves (it refuses
# importlib, pkgutil, __import__ and pickle): a review reached the guard by ``pydoc.locate`` on its
# name and cleared it. Imported, reached as an attribute, or named in a string; ``torch.load``
# unpickles, and a pickle names what it builds by module.
BY_NAME = ("pydoc", "locate", "_utils", "_import_dotted_name", "unittest", "mock", "doctest", "hub",
           "package", "serialization")  # fmt: skip
BY_NAME_DOTTED = ("torch.load",)
# The str methods a cell's string is folded through here, on literals only (a name is matched
# case-blind, so lower() and upper() need none; format and % are not run: a width is unbounded)
STR_METHODS = ("join", "replace", "strip", "lstrip", "rstrip", "removeprefix", "removesuffix")


def _reaches_grader(cells) -> list[str]:
    """A cell that imports the grader's modules, names them in any string it makes from literals
    (concatenated, an f-string, joined, sliced, by ``chr``: folded here), reaches a module by its
    name (``BY_NAME``) or walks to the grader's objects (read, never run): the worker's guard of
    torch's settings and of the batches' layout is the grader's, not the cell's. A docstring (no
    code here reads it) is refused only where it holds a dotted name (``grader.x``)."""
    memo: dict[int, str | None] = {}  # each node folded once: a long chain is not read n^2 times

    def folded(node):
        if id(node) not in memo:
            memo[id(node)] = fold(node)
        return memo[id(node)]

    def fold(node):  # the string ``node`` makes from literals, "\0" where one part is unknown
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bytes):
                return v.decode("latin-1")
            return v if isinstance(v, str) else None
        if isinstance(node, ast.JoinedStr):
            parts = (p.value if isinstance(p, ast.FormattedValue) else p for p in node.values)
            return "".join(folded(p) or "\0" for p in parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod | ast.Mult):
            left, right = folded(node.left), folded(node.right)
            return None if left is None and right is None else (left or "\0") + (right or "\0")
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            text, ends = folded(node.value), (node.slice.lower, node.slice.upper, node.slice.step)
            try:  # literal bounds only ([::-1] too)
                return text[slice(*(e if e is None else ast.literal_eval(e) for e in ends))]
            except (TypeError, ValueError):
                return text
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            arg = node.args[0]
            if node.func.id == "chr" and isinstance(arg, ast.Constant) and type(arg.value) is int:
                return chr(arg.value) if 0 <= arg.value < 0x110000 else None
            return folded(arg) if node.func.id in ("str", "bytes", "bytearray") else None
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            return None
        text, method = folded(node.func.value), node.func.attr
        if method == "join" and node.args and isinstance(node.args[0], ast.List | ast.Tuple):
            return (text or "").join(folded(e) or "\0" for e in node.args[0].elts)
        args = [folded(a) for a in node.args]
        if text is None or method not in STR_METHODS or None in args:
            return text
        if len(text) * (1 + sum(map(len, args))) > 1_000_000:  # replace's growth, bounded
            return text
        try:
            return getattr(str, method)(text, *args)
        except (TypeError, ValueError):
            return text

    out = []
    for name, src in cells:
        try:
            tree = ast.parse(src) if name != "quiz" else None
        except SyntaxError:
            continue  # recipe.read says so
        memo.clear()  # ids are one tree's: the last cell's nodes are gone
        nodes = list(ast.walk(tree)) if tree is not None else []
        docs = {id(n.value) for n in nodes if isinstance(n, ast.Expr)}
        found = []
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                module = getattr(node, "module", None) or ""
                names = [a.name for a in node.names] + [module]
                names += [f"{module}.{a.name}" for a in node.names if module]
                found += [
                    m for m in names
                    if m.split(".")[0] == "grader" or m in BY_NAME_DOTTED
                    or set(m.split(".")) & set(BY_NAME)
                ]  # fmt: skip
            elif isinstance(node, ast.Attribute) and node.attr in REACHES_GRADER + BY_NAME:
                found.append(node.attr)
            elif isinstance(node, ast.Attribute) and ast.unparse(node) in BY_NAME_DOTTED:
                found.append(ast.unparse(node))
            try:
                text = folded(node) if isinstance(node, ast.expr) else None
            except RecursionError:  # a chain too deep to fold here is not a recipe's
                found.append("an expression nested too deep to read")
                break
            if text is None or (id(node) in docs and not re.search(r"(?i)grader\.\w", text)):
                continue
            if (
                "grader" in text.lower()
                or text in REACHES_GRADER
                or set(text.split(".")) & set(BY_NAME)
            ):
                found.append(f"the string {text[:50]!r}")
        if found:
            out.append(
                f"cell {name!r} reaches the grader's own code "
                f"({', '.join(list(dict.fromkeys(found))[:3])}): a recipe is torch, numpy and "
                "effkit, and its settings are declared in CHANGES"
            )
    return out
