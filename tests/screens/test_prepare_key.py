"""The VMs screen's `P` on the demo: the form shows place's recommendation for the shut-off VM train-d
(the two free GPUs on one switch, each with a VF), Enter shows the Prepare plan, confirming applies it
and the VM then holds those GPUs; Esc on the form or the plan changes nothing."""
from __future__ import annotations

from rich.console import Console
from textual.widgets import Input, Static
from textual.widgets._footer import FooterKey

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.prepare_form import PrepareModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

VM = "train-d"  # shut off, no devices
GPUS = ("0000:da:00.0", "0000:db:00.0")  # idle, in no VM's config, one switch, a free VF beside each


def _text(widget: Static) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()


async def _form(app, pilot) -> PrepareModal:
    assert await wait_until(pilot, lambda: app.polls >= 1)
    await pilot.press("5")
    assert await wait_until(pilot, lambda: app.current_mode == "vms")
    table = app.screen.query_one("#vm-table", KeyedTable)
    table.move_cursor(row=table.get_row_index(VM))
    assert await wait_until(pilot, lambda: app.selected_vm == VM)
    assert "Prepare" in [k.description for k in app.screen.query(FooterKey)]
    await pilot.press("P")
    assert await wait_until(pilot, lambda: isinstance(app.screen, PrepareModal))
    return app.screen


async def test_p_shows_the_recommendation_then_the_plan_and_applies_it(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(80, 24)) as pilot:
        form = await _form(app, pilot)
        place = form.query_one("#prep-place", Static)
        assert await wait_until(pilot, lambda: form.shown is not None, tries=200), _text(place)
        shown = form.shown
        assert shown.ok and set(shown.gpus) == set(GPUS) and len(shown.nics) == 2 and all(shown.nics)
        text = _text(place)
        assert all(g in text for g in GPUS) and all(n in text for n in shown.nics), text
        assert f"{shown.vcpus} vCPUs" in text and "hugepages" in text
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
        plan = app.screen
        title = str(plan.query_one("#plan-title", Static).content)
        assert title.startswith(f"Prepare VM {VM}") and "refused" not in title, title
        body = str(plan.query_one("#plan-body", Static).content)
        assert all(g in body for g in GPUS) and all(n in body for n in shown.nics)
        if plan.query("#plan-typed"):  # a typed confirmation: the text the dialog names
            hint = str(plan.query_one("#plan-typed-hint", Static).content)
            typed = hint.split("type ", 1)[1].split(" and press", 1)[0]
            assert app.focused is plan.query_one("#plan-typed", Input)
            await pilot.press(*typed, "enter")
        else:
            await pilot.press("tab", "enter")  # from "No" to "Yes, apply"
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=400)
        assert app.action_results[0].ok, app.action_results[0].message
        assert await wait_until(pilot, lambda: set(GPUS) <= {h.address for h in app.snapshot.vm(VM).hostdevs},
                                tries=200)
        vm = app.snapshot.vm(VM)
        assert set(shown.nics) <= {h.address for h in vm.hostdevs} and vm.vcpus == shown.vcpus


async def test_escape_on_the_form_or_the_plan_changes_nothing(demo_seams):
    node = demo_seams.audit_dir / "libvirt.xml"
    before = node.read_bytes()
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(80, 24)) as pilot:
        await _form(app, pilot)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PrepareModal))
        await pilot.press("P")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PrepareModal))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PlanModal))
        await pilot.pause(0.3)
        assert app.action_results == [] and node.read_bytes() == before
        assert not app.snapshot.vm(VM).hostdevs
