"""Every stored SVG snapshot belongs to a snapshot test that still exists.

syrupy fails a whole run that leaves a stored snapshot unused (a test renamed or removed), but not a run
split over pytest-xdist workers, as scripts/test.sh runs the suite: no single process sees every test.
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _test_names(session: pytest.Session, module: Path) -> set[str]:
    """The names pytest gives the tests of `module` (parametrized ones with their ids)."""
    names: set[str] = set()
    todo: list[pytest.Collector] = [pytest.Module.from_parent(session, path=module)]
    while todo:
        for node in todo.pop().collect():
            if isinstance(node, pytest.Collector):
                todo.append(node)
            else:
                names.add(node.name)
    return names


def test_every_stored_snapshot_has_its_test(request: pytest.FixtureRequest) -> None:
    folders = sorted(p for p in (HERE / "__snapshots__").iterdir() if p.is_dir())
    assert folders, "no stored snapshots found"
    for folder in folders:
        module = HERE / f"{folder.name}.py"
        assert module.is_file(), f"{folder.relative_to(HERE)}: no test module {module.name}"
        stored = {p.name.removesuffix(".svg") for p in folder.iterdir()}
        names = _test_names(request.session, module)
        assert stored <= names, f"stored snapshots without a test in {module.name}: {sorted(stored - names)}"
