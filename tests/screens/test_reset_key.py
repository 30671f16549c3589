"""The GPUs screen's `X`: the selected GPU's reset plan in the plan modal (the VM holding it stopped and
started around the reset), applied on yes; the VM runs again and the reset is in the audit log."""
from __future__ import annotations

from textual.widgets import Static

from nodeconsole.console.audit_log import host_audit
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

GPU, VM = "0000:19:00.0", "train-a"  # on vfio-pci, held by train-a (running)


async def test_x_plans_and_applies_the_reset_of_the_selected_gpu(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("4")
        table = app.screen.query_one("#gpu-table", KeyedTable)
        table.move_cursor(row=table.get_row_index(GPU))
        await pilot.press("X")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=100)
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert body.index(f"Shut VM {VM} down") < body.index(f"Reset function {GPU}") < body.index(f"Start VM {VM}")
        await pilot.click("#yes")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        assert app.action_results[0].ok, app.action_results[0].message
        assert await wait_until(pilot, lambda: app.snapshot.vm(VM).state == "running", tries=100)
        (rec,) = host_audit(demo_seams).records()
        assert rec.action == "gpu reset" and rec.result == "applied" and (rec.request or {}).get("gpu") == GPU


async def test_x_on_a_gpu_with_processes_shows_the_refusal_naming_them(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("4")
        table = app.screen.query_one("#gpu-table", KeyedTable)
        table.move_cursor(row=table.get_row_index("0000:18:00.0"))
        await pilot.press("X")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=100)
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert "python3 (pid 4242)" in body and "Refused" in body
