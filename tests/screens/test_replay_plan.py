"""Replay's plan dialog offers no apply button: on a capture (`--replay`) a plan is shown with a single
"Close" and says it is read-only; it used to offer "Yes, apply" and only then say "refused — replay is
read-only". On the live (demo) host the same plan still asks "No" / "Yes, apply"."""
from __future__ import annotations

from textual.widgets import Button, Static

from nodeconsole.console.capture.replay import READ_ONLY
from nodeconsole.console.capture.take import take_capture
from nodeconsole.console.seams import replay_host
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.passthrough_pick import PassthroughPickModal
from tests.screens.helpers import wait_until

IDLE = "0000:9a:00.0"  # on nvidia, idle: its passthrough plan can be applied on the live host


async def _plan_buttons(app, pilot) -> tuple[list[str], PlanModal]:
    assert await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.sources.libvirt == "ok",
                            tries=200)
    app.selected_gpu = IDLE
    app.action_passthrough()
    assert await wait_until(pilot, lambda: isinstance(app.screen, PassthroughPickModal), tries=200)
    await pilot.press("enter")  # the picker's first choice: no VM, vfio-pci only
    assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
    modal = app.screen
    return [str(b.label) for b in modal.query(Button)], modal


async def test_replay_plan_dialog_is_read_only_with_one_close_button(frozen_seams, tmp_path):
    archive = tmp_path / "demo.tar.gz"
    archive.write_bytes(take_capture(frozen_seams).data)
    app = NodeConsoleApp(lambda: replay_host(archive), interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        labels, modal = await _plan_buttons(app, pilot)
        assert labels == ["Close"]
        assert f"read-only: {READ_ONLY}" in str(modal.query_one("#plan-read-only", Static).content)
        assert "(read-only)" in str(modal.query_one("#plan-title", Static).content)
        await pilot.press("enter")  # Close: nothing applied, nothing refused afterwards
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PlanModal))
        await pilot.pause(0.2)
        assert app.action_results == []
        assert not [n for n in app._notifications if "refused" in n.message or "cancelled" in n.message]


async def test_live_plan_dialog_still_asks(frozen_seams):
    app = NodeConsoleApp(lambda: frozen_seams, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        labels, modal = await _plan_buttons(app, pilot)
        assert labels == ["No", "Yes, apply"] and not modal.query("#plan-read-only")
