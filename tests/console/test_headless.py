"""The core (console/ and actions/) must run without Textual."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GLUE = {"nodeconsole.console.__main__"}


def _core_modules() -> list[str]:
    mods = []
    for pkg in ("console", "actions"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            name = ".".join(("nodeconsole",) + rel.parts)
            if name.endswith(".__init__"):
                name = name[: -len(".__init__")]
            if name not in GLUE:
                mods.append(name)
    return mods


def test_core_modules_exist() -> None:
    mods = _core_modules()
    assert {"nodeconsole.console.model", "nodeconsole.console.collector", "nodeconsole.console.cli"} <= set(mods)


def test_core_never_imports_textual() -> None:
    mods = _core_modules()
    code = (
        "import importlib, sys\n"
        f"mods = {mods!r}\n"
        "bad = []\n"
        "for m in mods:\n"
        "    importlib.import_module(m)\n"
        "    if 'textual' in sys.modules:\n"
        "        bad.append(m); break\n"
        "print('TEXTUAL' if bad else 'CLEAN', bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CLEAN"), f"textual imported by {out.stdout}"


def test_cli_snapshot_path_stays_headless() -> None:
    """Running the CLI parser (all subcommands registered) must not pull Textual in either."""
    code = ("import sys; from nodeconsole.console.cli import build_parser; "
            "from nodeconsole.actions.cli import load; build_parser(more=load); "
            "print('textual' in sys.modules or any(m.startswith('nodeconsole.screens') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
