"""The house rules, checked over the source with Python's ast (console/, actions/, screens/, themes/):

- no function longer than 60 lines (from its first decorator to its last line; nested ones and methods
  count on their own);
- no module longer than 450 lines;
- no import back up the layers: console/ is the headless core and imports nothing from actions/,
  screens/ or themes/; actions/ imports nothing from screens/ or themes/. Every import counts: at the top,
  lazy ones inside functions, under TYPE_CHECKING, relative ones (resolved against the module's package),
  `from nodeconsole import actions`, `importlib.import_module("…")`/`__import__("…")` with a literal name,
  and a string that is exactly a module name of a layer above (a list of modules imported in a loop);
- which host this is (`is_demo`, `demo_dir`, `is_this_machine`) is read only by console/seams.py and
  the simulation (console/demo/): everything else gets its choices from the seams.

Each check lists every offender as file:line. The functions below also run on small made-up sources, so
a check that found nothing because it looked at nothing would fail too.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "nodeconsole"
FOLDERS = ("console", "actions", "screens", "themes")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 450
# layer → the layers it must not import (themes stand apart: only the screens use them)
FORBIDDEN = {"console": {"actions", "screens", "themes"}, "actions": {"screens", "themes"}}
HOST_FLAGS = {"is_demo", "demo_dir", "is_this_machine"}
MODULE_NAME = re.compile(rf"{PACKAGE}(\.[A-Za-z_]\w*)+")


def sources(repo: Path = REPO) -> Iterator[tuple[str, str]]:
    """(path relative to the repository, text) of every Python module in the four folders."""
    for folder in FOLDERS:
        for path in sorted((repo / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path.relative_to(repo).as_posix(), path.read_text(encoding="utf-8")


def long_functions(rel: str, tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > MAX_FUNCTION_LINES:
                out.append(f"{rel}:{first} {node.name} has {lines} lines")
    return out


def long_module(rel: str, text: str) -> list[str]:
    lines = len(text.splitlines())
    return [f"{rel}:1 has {lines} lines"] if lines > MAX_MODULE_LINES else []


def _package(rel: str) -> list[str]:
    """The package a module at `rel` belongs to, as name parts (nodeconsole.console.capture for
    console/capture/diff.py and for console/capture/__init__.py)."""
    parts = [PACKAGE, *rel.removesuffix(".py").split("/")]
    return parts[:-1]


def _resolve(rel: str, level: int, module: str | None) -> str:
    base = _package(rel)
    if level:
        base = base[:len(base) - (level - 1)]
        return ".".join(base + (module.split(".") if module else []))
    return module or ""


def imported_modules(rel: str, tree: ast.AST) -> Iterator[tuple[int, list[str]]]:
    """(line, the module names it may import) for every import in the module, wherever it stands."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node.lineno, [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(rel, node.level, node.module)
            yield node.lineno, [module, *(f"{module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                yield node.lineno, [node.args[0].value]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value):
            yield node.lineno, [node.value]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == PACKAGE:
        parts = parts[1:]
    return parts[0] if parts and parts[0] in FOLDERS else None


def imports_up(rel: str, tree: ast.AST) -> list[str]:
    forbidden = FORBIDDEN.get(rel.split("/")[0], set())
    out: list[tuple[int, str]] = []
    for line, modules in imported_modules(rel, tree):
        bad = next((m for m in modules if _layer(m) in forbidden), None)
        if bad is not None:
            out.append((line, f"{rel}:{line} imports {bad}"))
    return [text for _line, text in sorted(set(out))]


def _may_read_host_flags(rel: str) -> bool:
    return rel == "console/seams.py" or rel.startswith("console/demo/")


def host_flag_reads(rel: str, tree: ast.AST) -> list[str]:
    """Reads of `is_demo`, `demo_dir`, `is_this_machine`: an attribute read, a name imported, or
    getattr with the name. Passing one to a constructor (a keyword) is no read."""
    if _may_read_host_flags(rel):
        return []
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in HOST_FLAGS and isinstance(node.ctx, ast.Load):
            out.append((node.lineno, f"{rel}:{node.lineno} reads .{node.attr}"))
        elif isinstance(node, ast.ImportFrom):
            out += [(node.lineno, f"{rel}:{node.lineno} imports {a.name}") for a in node.names if a.name in HOST_FLAGS]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in HOST_FLAGS:
            out.append((node.lineno, f"{rel}:{node.lineno} reads .{node.args[1].value}"))
    return [text for _line, text in sorted(set(out))]


def _offenders(check: str) -> list[str]:
    out: list[str] = []
    for rel, text in sources():
        tree = ast.parse(text, rel)
        if check == "functions":
            out += long_functions(rel, tree)
        elif check == "modules":
            out += long_module(rel, text)
        elif check == "layers":
            out += imports_up(rel, tree)
        else:
            out += host_flag_reads(rel, tree)
    return out


def _report(offenders: list[str]) -> str:
    return f"{len(offenders)} offender(s):\n" + "\n".join(offenders)


# -- the rules, over the repository -------------------------------------------------------------------

def test_no_function_is_longer_than_60_lines():
    offenders = _offenders("functions")
    assert offenders == [], _report(offenders)


def test_no_module_is_longer_than_450_lines():
    offenders = _offenders("modules")
    assert offenders == [], _report(offenders)


def test_no_module_imports_from_a_layer_above_its_own():
    offenders = _offenders("layers")
    assert offenders == [], _report(offenders)


def test_only_the_seams_and_the_simulation_read_which_host_this_is():
    offenders = _offenders("host flags")
    assert offenders == [], _report(offenders)


# -- the checks themselves, on made-up sources ----------------------------------------------------------

def test_the_checks_read_every_folder_of_the_package():
    seen = {rel.split("/")[0] for rel, _text in sources()}
    assert seen == set(FOLDERS)
    assert sum(1 for _ in sources()) > 100


def test_a_function_of_61_lines_counting_its_decorator_is_too_long_and_one_of_60_is_not():
    fits = "\n".join(["@decorator", "def fits():", *(f"    x{i} = {i}" for i in range(58))])  # 60 lines
    long = "\n".join(["class C:", "    @decorator", "    def long(self):", *(f"        x{i} = {i}" for i in range(59))])
    assert long_functions("console/x.py", ast.parse(fits)) == []
    assert long_functions("console/x.py", ast.parse(long)) == ["console/x.py:2 long has 61 lines"]


def test_a_module_of_451_lines_is_too_long_and_one_of_450_is_not():
    assert long_module("actions/x.py", "x = 1\n" * 450) == []
    assert long_module("actions/x.py", "x = 1\n" * 451) == ["actions/x.py:1 has 451 lines"]


def test_imports_up_the_layers_are_found_however_they_are_written():
    source = "\n".join([
        "from __future__ import annotations",
        "from typing import TYPE_CHECKING",
        "from nodeconsole.console.model import Gpu",  # 3: its own layer
        "import nodeconsole.actions.plan",  # 4
        "from nodeconsole import screens",  # 5
        "from ...actions.runner import ActionHost",  # 6: relative, from console/capture/diff.py
        "from ... import themes",  # 7
        "if TYPE_CHECKING:",
        "    from nodeconsole.screens.app import App",  # 9
        "def later():",
        "    from nodeconsole.actions.audit import AuditLog",  # 11: lazy
        "    importlib.import_module('nodeconsole.actions.nic')",  # 12
        "    for name in ('nodeconsole.screens.launch',):",  # 13: a module imported by name in a loop
        "        __import__(name)",
        "    return 'see nodeconsole.actions.nic for how'",  # prose naming a module: not an import
        "from .. import themes",  # nodeconsole.console.themes: no layer of its own
    ])
    found = imports_up("console/capture/diff.py", ast.parse(source))
    assert [f.split(" ")[0] for f in found] == [f"console/capture/diff.py:{n}" for n in (4, 5, 6, 7, 9, 11, 12, 13)]
    assert found[2:4] == ["console/capture/diff.py:6 imports nodeconsole.actions.runner",
                          "console/capture/diff.py:7 imports nodeconsole.themes"]
    # actions may import the core, and nothing may be found in a layer's own imports
    assert imports_up("actions/nic.py", ast.parse("from nodeconsole.console import model\nfrom . import plan\n")) == []
    assert imports_up("actions/nic.py", ast.parse("from ..screens import app\n")) == [
        "actions/nic.py:1 imports nodeconsole.screens"]


def test_a_relative_import_in_a_package_init_resolves_against_that_package():
    found = imports_up("console/capture/__init__.py", ast.parse("from ..actions import audit\n"))
    assert found == []  # nodeconsole.console.actions: a name inside the core, not the actions layer
    assert imports_up("console/__init__.py", ast.parse("from ..actions import audit\n")) == [
        "console/__init__.py:1 imports nodeconsole.actions"]


def test_reads_of_the_host_flags_are_found_outside_the_seams_and_the_simulation():
    source = "\n".join([
        "def f(seams):",
        "    if seams.is_demo:",  # 2
        "        return seams.demo_dir / 'x'",  # 3
        "    getattr(seams, 'is_this_machine')",  # 4
        "    return Seams(root=r, demo_dir=None)",  # a keyword: no read
        "from nodeconsole.console.seams import is_demo",  # 6
    ])
    tree = ast.parse(source)
    assert host_flag_reads("actions/runner.py", tree) == [
        "actions/runner.py:2 reads .is_demo", "actions/runner.py:3 reads .demo_dir",
        "actions/runner.py:4 reads .is_this_machine", "actions/runner.py:6 imports is_demo"]
    assert host_flag_reads("console/seams.py", tree) == []
    assert host_flag_reads("console/demo/state.py", tree) == []
