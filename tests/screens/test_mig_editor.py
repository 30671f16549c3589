"""The GPU screen's MIG editor on the demo host: pick profiles, watch the new layout on the slice bar (or
why it does not fit), see the plan in the plan modal ("No" focused), apply it, and find the instances in
the next snapshot."""
from __future__ import annotations

from textual.widgets import Button, Static

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.mig_editor import MigEditor, button_id
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

IDLE = "0000:9a:00.0"  # idle on nvidia, MIG off: the plan turns MIG on (the simulated driver resets it)
MIG = "0000:3a:00.0"  # MIG on; GI 1 (3g.40gb) is held by VM mig-infer-a's vGPU


async def _open_editor(app, pilot, address):
    await pilot.press("4")
    table = app.screen.query_one("#gpu-table", KeyedTable)
    table.move_cursor(row=table.get_row_index(address))
    await pilot.press("m")
    assert await wait_until(pilot, lambda: isinstance(app.screen, MigEditor))
    editor = app.screen
    assert await wait_until(pilot, lambda: editor.state is not None and editor.query(f"#{button_id('3g.40gb')}"))
    return editor


async def _click(pilot, selector):
    await pilot.click(selector)
    await pilot.pause(0.25)  # a Button ignores clicks during its 0.2 s "active" effect


def _text(screen, selector) -> str:
    return str(screen.query_one(selector, Static).content)


async def test_pick_profiles_see_plan_apply(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 44)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        editor = await _open_editor(app, pilot, IDLE)
        assert "MIG mode off" in _text(editor, "#mig-current")
        assert app.focused is editor.query_one("#mig-cancel", Button)
        assert editor.layout_text() == "none"
        for name in ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"):
            await _click(pilot, f"#{button_id(name)}")
        assert editor.layout_text() == "3g.40gb,2g.20gb,1g.10gb*2"
        preview = _text(editor, "#mig-preview")
        assert "3g.40gb" in preview and "does not fit" not in preview
        assert not editor.query_one("#mig-plan", Button).disabled
        # one more 1g.10gb cannot fit: the reason is shown and Plan is greyed out
        await _click(pilot, f"#{button_id('1g.10gb')}")
        assert "does not fit" in _text(editor, "#mig-preview")
        assert editor.query_one("#mig-plan", Button).disabled
        await _click(pilot, "#mig-undo")
        assert not editor.query_one("#mig-plan", Button).disabled

        await _click(pilot, "#mig-plan")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        modal = app.screen
        body = str(modal.query_one("#plan-body", Static).content)
        assert "Enable MIG mode on 0000:9a:00.0" in body and "-cgi 9:4 -C" in body
        assert "Verify the MIG layout" in body
        assert app.focused is modal.query_one("#no", Button)
        await pilot.click("#yes")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        assert app.action_results[0].ok, app.action_results[0].message
        assert await wait_until(pilot, lambda: len(app.snapshot.gpu(IDLE).mig.instances) == 4, tries=100)
        got = sorted((i.profile, i.start) for i in app.snapshot.gpu(IDLE).mig.instances)
        assert got == [("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4)]
        assert app.snapshot.gpu(IDLE).mig.mode == "enabled"


async def test_editor_shows_why_and_cancel_changes_nothing(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 44)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        editor = await _open_editor(app, pilot, MIG)
        assert editor.layout_text() == "3g.40gb,2g.20gb,1g.10gb"  # starts from the current layout
        assert "mig-infer-a" in _text(editor, "#mig-current")
        await _click(pilot, "#mig-clear")
        assert "in use by VM mig-infer-a" in _text(editor, "#mig-preview")
        await _click(pilot, f"#{button_id('4g.40gb')}")
        await _click(pilot, f"#{button_id('3g.40gb')}")
        reason = _text(editor, "#mig-preview")
        assert "4g.40gb needs 4 free memory slices starting at 0" in reason and "GI 1" in reason
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, MigEditor))
        await pilot.pause(0.3)
        assert app.action_results == []
        assert [i.profile for i in app.snapshot.gpu(MIG).mig.instances] == ["3g.40gb", "2g.20gb", "1g.10gb"]
