"""The Events screen's `f`: for an event whose action names a reset (an Xid 48, a fatal AER error on the
GPU train-a holds) it shows that GPU's reset plan; Enter keeps showing the event's details; an event
whose action names no plan says so and plans nothing."""
from __future__ import annotations

from textual.widgets import Static

from nodeconsole.actions.cli import main
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.events import EventsScreen
from nodeconsole.screens.modals.details import DetailsModal
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

VFIO_GPU, VM, IDLE_GPU = "0000:19:00.0", "train-a", "0000:9a:00.0"


def _select(screen: EventsScreen, what: str) -> None:
    table = screen.query_one("#events-table", KeyedTable)
    for i in range(table.row_count):
        if what in " | ".join(str(c) for c in table.get_row_at(i)):
            table.move_cursor(row=i)
            return
    raise AssertionError(f"no row with {what}")


async def test_f_on_an_event_that_names_a_reset_offers_the_reset_plan(demo_seams, capsys):
    assert main(["demo", "inject", "xid", VFIO_GPU, "48"]) == 0
    assert main(["demo", "inject", "xid", IDLE_GPU, "43"]) == 0  # restart the app: no plan
    capsys.readouterr()
    app = NodeConsoleApp(demo_seams, interval=60)
    async with app.run_test(size=(160, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1 and len(app.snapshot.kernel_events) >= 2, tries=200)
        await pilot.press("9")
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        assert await wait_until(pilot, lambda: screen.query_one("#events-table", KeyedTable).row_count >= 2)
        _select(screen, "Xid 48")
        await pilot.press("enter")  # Enter: the details, as before
        assert await wait_until(pilot, lambda: isinstance(app.screen, DetailsModal))
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.screen is screen)
        await pilot.press("f")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=100)
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert f"Reset function {VFIO_GPU}" in body and f"Shut VM {VM} down" in body
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.screen is screen)
        _select(screen, "Xid 43")
        await pilot.press("f")
        await pilot.pause(0.3)
        assert app.screen is screen and app.action_results == []


async def test_the_overviews_advice_for_a_gpu_a_vm_holds_offers_the_reset_plan(demo_seams, capsys):
    assert main(["demo", "inject", "aer", VFIO_GPU, "fatal"]) == 0
    capsys.readouterr()
    app = NodeConsoleApp(demo_seams, interval=60)
    async with app.run_test(size=(160, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1 and any(
            p.subject == VFIO_GPU and p.severity == "error" for p in app.snapshot.problems), tries=200)
        (p,) = [p for p in app.snapshot.problems if p.subject == VFIO_GPU and p.severity == "error"]
        assert f"`nodeconsole gpu reset {VFIO_GPU}`" in p.fix and "virsh shutdown train-a" in p.fix
        assert app.snapshot.problems[0] is p  # the event's problem is first: f acts on it
        await pilot.press("f")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=100)
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert f"Reset function {VFIO_GPU}" in body and f"Start VM {VM} again" in body
        await pilot.click("#yes")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        assert app.action_results[0].ok, app.action_results[0].message
        # the reset starts the GPU's event window: the AER error before it no longer makes it unhealthy
        assert await wait_until(pilot, lambda: app.snapshot.gpu(VFIO_GPU).health.state != "unhealthy", tries=200)
