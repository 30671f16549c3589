"""No import circles among the package's modules (console/, actions/, screens/, themes/).

A circle (a imports b, b imports a, however far round) ties modules into one piece that can only be
understood, tested and changed as a whole; the layers contract (pyproject.toml) keeps the arrows
between the folders pointing down, this keeps them from going round within a folder. Every import
statement counts, wherever it stands: at the top, inside a function, under TYPE_CHECKING, relative ones,
and `importlib.import_module("…")` with a literal name. `from package import name` is an import of the
package (its __init__) and, when `name` is a module, of that module. A name built at run time (step
kinds imported by name from a list) is not an import statement and does not count.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable

from tests.test_house_rules import PACKAGE, _resolve, sources


def module_name(rel: str) -> str:
    parts = [PACKAGE, *rel.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(rel: str, tree: ast.AST) -> set[str]:
    """Every module name an import statement of the module at `rel` may load."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(rel, node.level, node.module)
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                out.add(node.args[0].value)
    return out


def import_graph(modules: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """module → the package's modules it imports, for (path, text) pairs."""
    texts = list(modules)
    known = {module_name(rel) for rel, _text in texts}
    graph: dict[str, set[str]] = {}
    for rel, text in texts:
        me = module_name(rel)
        graph[me] = {m for m in imports_of(rel, ast.parse(text, rel)) if m in known and m != me}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected pieces of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                piece = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    piece.append(member)
                    if member == node:
                        break
                if len(piece) > 1:
                    found.append(sorted(piece))
    return found


def test_no_modules_of_the_package_import_each_other_round_in_a_circle():
    graph = import_graph(sources())
    assert len(graph) > 200  # every module was read
    found = circles(graph)
    assert not found, "\n".join(" -> ".join(c) for c in found)


def test_a_circle_is_found_however_far_round_it_goes_and_a_chain_is_no_circle():
    made_up = [
        ("console/a.py", "from nodeconsole.console import b\n"),
        ("console/b.py", "def f():\n    from . import c\n"),
        ("console/c.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nodeconsole.console.a import X\n"),
        ("console/d.py", "import nodeconsole.console.a\n"),
        ("actions/e.py", "import importlib\nimportlib.import_module('nodeconsole.actions.f')\n"),
        ("actions/f.py", "from nodeconsole.actions.e import g\n"),
        ("actions/h.py", "KINDS = ('nodeconsole.actions.i',)\n"),
        ("actions/i.py", "from nodeconsole.actions import h\n"),
    ]
    assert sorted(circles(import_graph(made_up))) == [
        ["nodeconsole.actions.e", "nodeconsole.actions.f"],
        ["nodeconsole.console.a", "nodeconsole.console.b", "nodeconsole.console.c"]]
