"""The GPUs screen's `D`: asks why (a bad reason is said and the prompt stays), shows the drain plan and
applies it; the GPU then shows drained in the table and the panel; `D` again plans the undrain."""
from __future__ import annotations

from textual.widgets import Input, Static

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.drain_prompt import DrainReasonModal
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

GPU = "0000:9a:00.0"  # idle on nvidia; the shut-off VM train-c has it in its config


def _text(widget: Static) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()


def _owner_cell(app) -> str:
    table = app.screen.query_one("#gpu-table", KeyedTable)
    return str(table.get_row(GPU)[3])


async def test_d_drains_then_undrains_the_selected_gpu(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("4")
        table = app.screen.query_one("#gpu-table", KeyedTable)
        table.move_cursor(row=table.get_row_index(GPU))
        await pilot.press("D")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DrainReasonModal))
        assert app.focused is app.screen.query_one("#drain-reason", Input)
        await pilot.press("space", "enter")  # a blank reason: said, the prompt stays
        status = str(app.screen.query_one("#drain-status", Static).content)
        assert "needs a reason" in status and isinstance(app.screen, DrainReasonModal)
        app.screen.query_one("#drain-reason", Input).value = "RMA ticket 42"
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert "RMA ticket 42" in body and "drains.json" in body and "does not stop or evict" in body
        await pilot.click("#yes")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        assert app.action_results[0].ok, app.action_results[0].message
        assert await wait_until(pilot, lambda: app.snapshot.gpu(GPU).drain is not None, tries=100)
        assert app.snapshot.gpu(GPU).drain.reason == "RMA ticket 42"
        assert await wait_until(pilot, lambda: _owner_cell(app).startswith("drained:"), tries=100)
        assert await wait_until(pilot, lambda: "drained: RMA ticket 42 (" in _text(
            app.screen.query_one("#gpu-panel", Static)), tries=100)

        await pilot.press("D")  # drained: the undrain plan, no prompt
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert "Lift the drain" in body and "RMA ticket 42" in body
        await pilot.click("#yes")
        assert await wait_until(pilot, lambda: len(app.action_results) == 2, tries=200)
        assert app.action_results[1].ok, app.action_results[1].message
        assert await wait_until(pilot, lambda: app.snapshot.gpu(GPU).drain is None, tries=100)
        assert await wait_until(pilot, lambda: not _owner_cell(app).startswith("drained:"), tries=100)


async def test_escape_on_the_reason_prompt_changes_nothing(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("4")
        await pilot.press("D")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DrainReasonModal))
        await pilot.press("x", "escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, DrainReasonModal))
        await pilot.pause(0.3)
        assert app.action_results == [] and not isinstance(app.screen, PlanModal)
        assert all(g.drain is None for g in app.snapshot.gpus)
