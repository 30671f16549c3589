"""Fixtures shared by the action tests."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    """A private demo host (state directory) for CLI tests that run `nodeconsole ... --demo`."""
    d = tmp_path / "demo"
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(d))
    from nodeconsole.console.demo.state import ensure_demo

    ensure_demo(d)
    return d


@pytest.fixture(scope="module")
def _shared(tmp_path_factory) -> Path:
    from nodeconsole.console.demo.state import ensure_demo

    d = tmp_path_factory.mktemp("shared") / "demo"
    ensure_demo(d)
    return d


@pytest.fixture
def state_ro(_shared, monkeypatch) -> Path:
    """A demo shared by the tests of one module that must change nothing (each asserts that it did not)."""
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(_shared))
    return _shared
