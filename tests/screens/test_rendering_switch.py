"""Textual's private internals are used in one place (screens/fast/), behind a switch:
NODECONSOLE_STOCK_TEXTUAL=1 draws the console with stock Textual, and then none of screens/fast/ is
imported or installed."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCREENS = REPO / "screens"
FAST = SCREENS / "fast"
# Textual's private attributes the fast paths use (overriding or reading them counts)
PRIVATE_NAMES = {"_display", "_render_cell", "_compositor", "_styles_cache", "_cell_render_cache",
                 "_get_styles_to_render_cell", "_row_render_cache", "_line_cache", "_xterm_parser"}
# the screens' modules that may name screens/fast/ (the switch, and the table base it chooses)
FAST_IMPORTERS = {"rendering.py", "widgets/quiet_table.py"}


def private_uses(source: str) -> list[str]:
    """What a module's source uses of Textual's private modules and of the private names above, and
    its imports of screens/fast/."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.startswith(("textual._", "nodeconsole.screens.fast"))]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith(("textual._", "nodeconsole.screens.fast")) or (
                    module == "textual" and any(a.name.startswith("_") for a in node.names)):
                found.append(f"from {module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES:
            found.append(f".{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in PRIVATE_NAMES:
            found.append(f"def {node.name} (line {node.lineno})")
    return found


def test_the_check_finds_each_kind_of_use():
    source = ("import textual._compositor\nfrom textual._styles_cache import StylesCache\nfrom textual import _time\n"
              "from nodeconsole.screens.fast.table import QuietTable\n"
              "class A:\n    def _display(self, s, r):\n        super()._display(s, r)\n        x = self._compositor\n")
    assert len(private_uses(source)) == 7
    assert private_uses("from textual.app import App\nfrom textual import events\nx = app.display\n") == []


def test_only_screens_fast_uses_textuals_private_internals():
    found = {}
    for path in sorted(SCREENS.rglob("*.py")):
        if FAST in path.parents:
            continue
        uses = private_uses(path.read_text())
        rel = path.relative_to(SCREENS).as_posix()
        if rel in FAST_IMPORTERS:
            uses = [u for u in uses if "nodeconsole.screens.fast" not in u]
        if uses:
            found[rel] = uses
    assert found == {}
    assert any(private_uses(p.read_text()) for p in FAST.glob("*.py"))  # the check sees them where they are


PROBE = """
import asyncio, json, sys
from dataclasses import replace
from pathlib import Path

from nodeconsole.console.pciids import PciIds
from nodeconsole.console.seams import demo_host
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.widgets.keyed_table import KeyedTable

app = NodeConsoleApp(lambda: replace(demo_host(Path(sys.argv[1])), pci_ids=PciIds(paths=None)), interval=0.2)
out = {}

async def main():
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if app.polls >= 2:
                break
        await pilot.press("4")
        await pilot.pause(0.3)
        tables = list(app.screen.query(KeyedTable))
        out.update(polls=app.polls, gpus=len(app.snapshot.gpus), rows=sum(t.row_count for t in tables),
                   mro=[c.__module__ for c in type(app).__mro__],
                   tables=sorted({c.__module__ for t in tables for c in type(t).__mro__}),
                   compositor=type(app.screen._compositor).__module__,
                   footer=[type(w).__module__ for w in app.screen.query("Footer")],
                   driver=app.get_driver_class().__module__,
                   modules=sorted(m for m in sys.modules if m.startswith("nodeconsole.screens.fast")))

asyncio.run(main())
print(json.dumps(out))
"""


def _probe(tmp_path: Path, stock: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NODECONSOLE_STOCK_TEXTUAL"}
    if stock:
        env["NODECONSOLE_STOCK_TEXTUAL"] = "1"
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "demo")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fast_parts(got: dict) -> list[str]:
    return [m for m in [*got["mro"], *got["tables"], got["compositor"], *got["footer"], got["driver"],
                        *got["modules"]] if m.startswith("nodeconsole.screens.fast")]


def test_under_the_switch_the_console_draws_with_stock_textual(tmp_path):
    got = _probe(tmp_path, stock=True)
    assert got["polls"] >= 2 and got["gpus"] == 10 and got["rows"] > 0  # it runs, and shows the host
    assert _fast_parts(got) == []  # nothing of screens/fast/ imported, nor installed
    assert got["compositor"] == "textual._compositor" and got["footer"] == ["textual.widgets._footer"]
    assert got["driver"].startswith("textual.drivers.")


def test_without_it_the_fast_paths_are_installed(tmp_path):
    got = _probe(tmp_path, stock=False)
    assert got["polls"] >= 2 and got["gpus"] == 10 and got["rows"] > 0
    assert "nodeconsole.screens.fast.display" in got["mro"]
    assert "nodeconsole.screens.fast.table" in got["tables"]
    assert got["compositor"] == "nodeconsole.screens.fast.compositor"
    assert got["footer"] == ["nodeconsole.screens.fast.footer"]
    assert got["driver"] == "nodeconsole.screens.fast.driver"
