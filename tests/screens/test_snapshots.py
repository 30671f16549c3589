"""SVG snapshot of the Overview in the contrast theme at 80x24 on a frozen demo snapshot (update with
--snapshot-update). Every screen at 80x24 and 160x50 in the default theme: test_layout.py."""
from __future__ import annotations

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


def test_contrast_theme_snapshot(snap_compare, frozen_seams):
    async def run_before(pilot):
        await _settle(pilot)

    assert snap_compare(_app(frozen_seams, theme="contrast"), terminal_size=(80, 24), run_before=run_before)
