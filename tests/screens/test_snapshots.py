"""SVG snapshots of each screen at 80x24 on a frozen demo snapshot (update with --snapshot-update)."""
from __future__ import annotations

import pytest

from nodeconsole.screens.app import NodeConsoleApp
from tests.screens.conftest import FrozenCollector


def _app(seams, theme=None):
    return NodeConsoleApp(seams, interval=3600, theme=theme, collector=FrozenCollector(seams))


async def _settle(pilot):
    for _ in range(100):
        await pilot.pause(0.05)
        if pilot.app.polls >= 1:
            break
    await pilot.pause(0.1)


@pytest.mark.parametrize("key", ["1", "2", "3", "4", "5"])
def test_screen_snapshot(snap_compare, frozen_seams, key):
    async def run_before(pilot):
        await _settle(pilot)
        await pilot.press(key)
        await pilot.pause(0.2)

    assert snap_compare(_app(frozen_seams), terminal_size=(80, 24), run_before=run_before)


def test_contrast_theme_snapshot(snap_compare, frozen_seams):
    async def run_before(pilot):
        await _settle(pilot)

    assert snap_compare(_app(frozen_seams, theme="contrast"), terminal_size=(80, 24), run_before=run_before)
