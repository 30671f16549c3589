"""The command line in layers: console/cli.py is the base with the read-only subcommands and imports
nothing from actions/; the subcommands that change the host register from actions/cli/ (the installed
command and `python -m nodeconsole.actions.cli` load them); the base entry names the full command when
asked for one of them."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeconsole.console import cli

REPO = Path(__file__).resolve().parents[2]


def _imports_actions(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == "nodeconsole.actions" or n.startswith("nodeconsole.actions.") for n in names):
            return True
    return False


def test_the_base_cli_and_its_commands_import_nothing_from_actions_not_even_lazily():
    found = {str(p.relative_to(REPO)) for p in (REPO / "console").rglob("*.py") if _imports_actions(p)}
    assert not found, sorted(found)
    assert not (REPO / "console/commands/actions.py").exists()


@pytest.mark.parametrize("argv,name", [
    (["passthrough", "0", "--demo"], "passthrough"),
    (["--demo", "undo"], "undo"),
    (["log", "--json"], "log"),
    (["nccl", "parse", "-"], "nccl"),
])
def test_the_base_entry_names_the_full_command_for_a_change_command(capsys, argv, name):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"`{name}` changes the host" in err
    assert "python -m nodeconsole.actions.cli" in err and "snapshot" in err


def test_the_base_doctor_reports_and_names_the_full_command_for_fix(capsys):
    assert cli.main(["doctor", "--fix", "iommu"]) == 2
    err = capsys.readouterr().err
    assert "doctor --fix changes the host" in err and "python -m nodeconsole.actions.cli" in err


def test_doctor_takes_the_same_options_in_the_full_command():
    from nodeconsole.actions.cli import load

    parser = cli.build_parser(more=load)
    sub = next(a for a in parser._actions if a.dest == "command").choices["doctor"]  # type: ignore[union-attr]
    flags = [a.option_strings[0] for a in sub._actions if a.option_strings]
    assert flags == ["-h", "--demo", "--root", "--libvirt", "--replay", "--role", "--json", "--fix", "--apply",
                     "--yes"]


def test_python_m_actions_cli_has_every_subcommand_without_textual(tmp_path):
    from tests.conftest import hermetic_environ

    env = {**hermetic_environ(tmp_path), "NODECONSOLE_STATE_DIR": str(tmp_path / "demo")}
    code = ("import runpy, sys; sys.argv = ['nodeconsole', 'log', '--demo']; "
            "code = 0\n"
            "try:\n    runpy.run_module('nodeconsole.actions.cli', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\n"
            "print('TEXTUAL' if 'textual' in sys.modules else 'HEADLESS', code)")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no recorded changes" in out.stdout and out.stdout.rstrip().endswith("HEADLESS 0")
    help_out = subprocess.run([sys.executable, "-m", "nodeconsole.actions.cli", "--help"], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert help_out.returncode == 0
    assert all(name in help_out.stdout for name in cli.KNOWN_COMMANDS | cli.CHANGE_COMMANDS)


def test_the_installed_command_loads_the_change_subcommands(capsys, tmp_path, monkeypatch):
    from nodeconsole.screens.launch import main

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    assert main(["log", "--demo"]) == 0
    assert "no recorded changes" in capsys.readouterr().out
    assert os.path.isdir(tmp_path / "demo")
