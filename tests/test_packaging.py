"""The wheel's package list (pyproject.toml) names every package folder of the repository: a subpackage
left out installs fine in editable mode and goes missing from the wheel."""
from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"console": "nodeconsole.console", "screens": "nodeconsole.screens",
           "actions": "nodeconsole.actions", "themes": "nodeconsole.themes"}


def test_every_package_folder_is_in_the_wheel():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    assert config["package-dir"] == {v: k for k, v in FOLDERS.items()}
    found = set()
    for folder, name in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            found.add(".".join((name, *rel.parts)))
    assert found - listed == set(), "package folders missing from [tool.setuptools] packages"
    assert listed - found == set(), "packages listed that have no folder"
