"""The plan modal: a change to a GPU a VM's config uses is confirmed by typing its address — the cursor
starts in the box, Enter applies when the text matches and says what is wrong when it does not; Esc and
"No" say "cancelled" and change nothing; a plan with one outcome has one "OK"; at 80x24 the buttons of a
long plan stay on screen and wrapped commands hang under their own text."""
from __future__ import annotations

from rich.console import Console
from textual.app import App
from textual.widgets import Button, Input, Static

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.widgets.hanging import HangingLines
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.themes import CSS_PATH
from tests.screens.helpers import wait_until

GPU = "0000:9a:00.0"  # on nvidia; the shut-off VM train-c holds it in its config


def _said(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def _release_modal(app, pilot) -> PlanModal:
    await pilot.press("R")
    assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
    return app.screen


async def test_typed_address_and_enter_applies_the_release_cancels_say_so(demo_seams):
    node = demo_seams.audit_dir / "libvirt.xml"
    before = node.read_text()
    app = NodeConsoleApp(demo_seams, interval=60)  # polls: at start and after the change
    async with app.run_test(size=(100, 30)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("4")
        table = app.screen.query_one("#gpu-table", KeyedTable)
        table.move_cursor(row=table.get_row_index(GPU))
        assert await wait_until(pilot, lambda: app.selected_gpu == GPU)

        # Esc cancels, and says so
        modal = await _release_modal(app, pilot)
        assert app.focused is modal.query_one("#plan-typed", Input)  # the cursor starts in the box
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PlanModal))
        assert any("cancelled" in m and "back to the host" in m for m in _said(app))

        # so does "No" (reached with Tab from the box)
        app._notifications.clear()
        modal = await _release_modal(app, pilot)
        await pilot.press("tab")
        assert app.focused is modal.query_one("#no", Button)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PlanModal))
        assert any("cancelled" in m for m in _said(app))

        # a wrong address: the dialog stays open and says what is wrong; nothing is applied
        modal = await _release_modal(app, pilot)
        await pilot.press("9", "a", "enter")
        await pilot.pause(0.1)
        assert app.screen is modal
        error = modal.query_one("#plan-typed-error", Static)
        assert error.display and "'9a' is not 0000:9a:00.0" in str(error.content)
        assert app.focused is modal.query_one("#plan-typed", Input)
        assert app.action_results == [] and node.read_text() == before

        # the address typed exactly + Enter applies the release
        modal.query_one("#plan-typed", Input).value = ""
        await pilot.press(*GPU, "enter")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        result = app.action_results[0]
        assert result.ok, result.message
        after = node.read_text()
        train_c = after[after.index("<name>train-c</name>"):]
        assert "bus='0x9a'" not in train_c[:train_c.index("</domain>")]
        assert await wait_until(pilot, lambda: any("8 Changes → u" in m for m in _said(app)))
        assert any(f"nodeconsole undo {result.record_id} --apply" in m for m in _said(app))


class _ModalApp(App):
    CSS_PATH = CSS_PATH

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[bool | None] = []

    async def ask(self, pilot, modal: PlanModal) -> PlanModal:
        self.push_screen(modal, self.answers.append)
        assert await wait_until(pilot, lambda: self.screen is modal)
        return modal


LONG = ["Pass GPU 4 through to VM build-1"] + [
    f"  {n}. Step {n}\n     why: a reason\n     $ virsh attach-device build-1 /var/lib/nodeconsole/hostdev-0000:9a:00.{n}.xml "
    "--config --persistent --and-a-very-long-tail-of-options-that-wraps" for n in range(1, 15)]


async def test_long_plans_keep_their_buttons_on_screen_and_one_outcome_has_one_ok():
    lines = "\n".join(LONG).split("\n")
    app = _ModalApp()
    async with app.run_test(size=(80, 24)) as pilot:
        for typed in (None, GPU):
            modal = await app.ask(pilot, PlanModal(LONG[0], lines, True, typed))
            screen = modal.region
            yes, no = (modal.query_one(f"#{b}", Button).region for b in ("yes", "no"))
            assert screen.contains_region(yes) and screen.contains_region(no), (yes, screen)
            body = modal.query_one("#plan-scroll")
            assert body.region.bottom <= yes.y and body.max_scroll_y > 0  # the body scrolls, not the buttons
            hint = modal.query_one("#plan-scroll-more", Static)  # …and says so, on screen
            assert await wait_until(pilot, lambda h=hint: h.display and "lines below" in str(h.content))
            assert screen.contains_region(hint.region) and hint.region.bottom <= yes.y
            if not typed:  # the answer buttons have the focus: j scrolls the plan (the box keeps its letters)
                await pilot.press("j", "j")
                assert await wait_until(pilot, lambda b=body: round(b.scroll_y) == 2), body.scroll_y
                assert await wait_until(pilot, lambda h=hint: "2 lines above" in str(h.content))
            if typed:
                assert screen.contains_region(modal.query_one("#plan-typed", Input).region)
            await pilot.click("#no")
        assert app.answers == [False, False]

        for title in ("Give GPU 4 back to the host  (refused)", "Give GPU 4 back to the host  (nothing to do)"):
            modal = await app.ask(pilot, PlanModal(title, [title, "Refused: nothing will be changed."], False, GPU))
            buttons = list(modal.query(Button))
            assert [str(b.label) for b in buttons] == ["OK"]
            assert await wait_until(pilot, lambda ok=buttons[0]: app.focused is ok)
            assert not modal.query("#plan-typed")  # nothing to apply: nothing to type
            await pilot.press("enter")
            assert await wait_until(pilot, lambda m=modal: app.screen is not m)
        assert app.answers == [False, False, None, None]  # read, not cancelled


def test_wrapped_commands_hang_under_their_text():
    line = "     $ virsh detach-device train-c /var/lib/nodeconsole/hostdev-0000:9a:00.0.xml --config --live"
    console = Console(width=60, record=True)
    console.print(HangingLines([line, "  - a note"]))
    rows = console.export_text().splitlines()
    assert rows[0].startswith("     $ virsh") and len(rows) == 4
    assert all(r.startswith(" " * 7) and r[7] != " " for r in rows[1:3])  # under `virsh`, not at the edge
    assert "".join(r.strip() + " " for r in rows[:3]).split() == line.split()
    assert rows[3] == "  - a note"
