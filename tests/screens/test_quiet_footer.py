"""QuietFooter: the keys are built once as the screen is first shown, again when what they show changed,
and not when the screen only says the bindings may have changed."""
from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable

from nodeconsole.screens.fast.footer import QuietFooter

# a test of screens/fast/: the stock mode (--stock-textual) has none of it
pytestmark = pytest.mark.fast_textual


class Counting(QuietFooter):
    def __init__(self) -> None:
        super().__init__()
        self.builds = 0

    async def recompose(self) -> None:
        self.builds += 1
        await super().recompose()


class KeysApp(App):
    BINDINGS = [Binding("s", "setup", "Setup", id="setup"), Binding("f", "fix", "Fix"),
                Binding("x", "hidden", "Hidden", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.fix_works = True

    def compose(self) -> ComposeResult:
        yield DataTable()  # focused as the screen is shown
        yield Counting()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return (True if self.fix_works else None) if action == "fix" else True  # None: shown, disabled

    def action_setup(self) -> None:
        pass


def labels(app: KeysApp) -> list[tuple[str, bool]]:
    return [(k.description, not k.has_class("-disabled"))
            for k in app.query_one(Counting).query("FooterKey") if not k.has_class("-command-palette")]


async def test_the_keys_are_built_once_then_only_on_a_change():
    app = KeysApp()
    async with app.run_test(size=(80, 10)) as pilot:
        await pilot.pause()
        footer = app.query_one(Counting)
        assert footer.builds == 1  # Textual's Footer: three times, one per signal
        assert labels(app) == [("Setup", True), ("Fix", True)]
        app.screen.refresh_bindings()  # nothing changed
        app.screen.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert footer.builds == 1
        app.fix_works = False  # an action that stops working here: shown disabled
        app.screen.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert footer.builds == 2 and labels(app) == [("Setup", True), ("Fix", False)]
        app.update_keymap({"setup": "ctrl+s"})  # the same command on another key: a new label
        await pilot.pause()
        await pilot.pause()
        assert footer.builds == 3
        assert [k.key for k in footer.query("FooterKey") if k.description == "Setup"] == ["ctrl+s"]
