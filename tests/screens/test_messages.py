"""The app and its screens talk in messages: the GPUs/VMs screens post what is selected and the app
acts on that; a screen renders the view the app posted it, nothing else."""
from __future__ import annotations

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.conftest import FrozenCollector
from tests.screens.helpers import wait_until

GPU = "0000:9a:00.0"


async def test_selection_follows_the_screens_messages(frozen_seams):
    app = NodeConsoleApp(frozen_seams, interval=3600, collector=FrozenCollector(frozen_seams))
    async with app.run_test(size=(100, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        assert app.selected_gpu is None and app.selected_vm is None
        await pilot.press("4")
        table = app.screen.query_one("#gpu-table", KeyedTable)
        table.move_cursor(row=table.get_row_index(GPU))
        assert await wait_until(pilot, lambda: app.selected_gpu == GPU)
        screen = app.screen
        assert isinstance(screen, SnapshotScreen) and screen.snapshot is app.snapshot
        await pilot.press("5")
        assert await wait_until(pilot, lambda: app.selected_gpu is None and app.selected_vm is not None)
        await pilot.press("1")
        assert await wait_until(pilot, lambda: app.selected_vm is None)
