"""Shared fixtures. `shared_dir` finds the project's reference material (../shared from the repo root,
or $NODECONSOLE_SHARED): in a user's clone without it, dependent tests skip and say so; in CI (env CI
set) its absence is a failure, never a silent skip."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _shared_path() -> Path:
    env = os.environ.get("NODECONSOLE_SHARED")
    return Path(env) if env else REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = _shared_path()
    if not (path / "REFERENCE.md").exists():
        msg = (f"reference material not found at {path} (the ../shared folder beside the repo, or "
               f"$NODECONSOLE_SHARED); tests that compare against real captured hosts need it")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path
