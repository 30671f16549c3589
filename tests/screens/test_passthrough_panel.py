"""The GPU screen's passthrough panel: the plan in a modal, "No" focused and harmless; confirming applies
it and the next snapshot shows the GPU on vfio-pci; release puts back exactly what passthrough changed."""
from __future__ import annotations

from textual.widgets import Button, Static

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

GPU = "0000:9a:00.0"  # idle on nvidia; the shut-off VM train-c has it in its config


async def test_plan_modal_defaults_to_no_then_applies(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(100, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("4")
        table = app.screen.query_one("#gpu-table", KeyedTable)
        table.move_cursor(row=table.get_row_index(GPU))
        await pilot.press("a", "enter")  # the VM picker: "no VM" (vfio-pci only) is the first choice
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        modal = app.screen
        body = str(modal.query_one("#plan-body", Static).content)
        assert "driver_override" in body and "vfio-pci" in body and GPU in body
        assert app.focused is modal.query_one("#no", Button)
        await pilot.press("enter")  # "No"
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PlanModal))
        await pilot.pause(0.5)
        assert app.snapshot.gpu(GPU).driver == "nvidia" and app.action_results == []

        await pilot.press("a", "enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        assert not app.screen.query("#plan-typed")  # only a shut-off VM's config names it: a note
        await pilot.click("#yes")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        assert app.action_results[0].ok, app.action_results[0].message
        assert await wait_until(pilot, lambda: app.snapshot.gpu(GPU).driver == "vfio-pci", tries=100)
        assert app.snapshot.gpu(GPU).owner.kind == "vfio"

        # Release undoes exactly what the passthrough did: train-c's config named the GPU before and is
        # left alone (the plan says so), so no VM config changes and a plain Yes applies it.
        await pilot.press("R")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert "train-c" in body and "left alone" in body
        assert not app.screen.query("#plan-typed")
        app.screen.query_one("#yes", Button).press()
        assert await wait_until(pilot, lambda: len(app.action_results) == 2, tries=200)
        assert app.action_results[1].ok, app.action_results[1].message
        assert await wait_until(pilot, lambda: app.snapshot.gpu(GPU).driver == "nvidia", tries=100)
