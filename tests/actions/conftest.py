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
