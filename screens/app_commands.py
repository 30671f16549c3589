"""The app's commands that are not changes: switching screens, pause, filter, details, the NCCL screen's
actions from the palette, help, themes, and which commands work on which screen (the footer shows only
those)."""
from __future__ import annotations

from collections.abc import Iterable

from textual.actions import parse as parse_action
from textual.app import SystemCommand
from textual.screen import Screen
from textual.widgets import Input

from nodeconsole.screens.app_changes import ChangesApp
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.commands import COMMANDS
from nodeconsole.screens.messages import ShowRow
from nodeconsole.themes import NAMES

# (action name, parameters) -> the screens (modes) the registry says the action works on
_WHERE: dict[tuple[str, tuple[object, ...]], tuple[str, ...]] = {
    parse_action(c.action)[1:]: c.screens for c in COMMANDS if c.screens}


class CommandsApp(ChangesApp):
    """The commands' half of the app."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A command that works on some screens only is inactive elsewhere, so the footer leaves it
        out (Textual asks again for each screen it shows)."""
        if action == "filter" and (isinstance(self.focused, Input) or not isinstance(self.screen, SnapshotScreen)):
            return False  # `/` is text in a text field, and a dialog has no table of its own
        screens = _WHERE.get((action, tuple(parameters)))
        return not screens or self.current_mode in screens

    def _run_anywhere(self, action: str):
        """The palette's way in: runs an action whatever the screen, so one that works elsewhere says
        where (the footer and its key stay off on screens it does not work on)."""
        _, name, params = parse_action(action)
        if (name, params) in _WHERE:  # the registry's screen-bound actions are plain methods of the app
            return getattr(self, f"action_{name}")(*params)
        return self.run_action(action)

    def action_show(self, mode: str) -> None:
        if self.current_mode != mode:
            self.switch_mode(mode)

    def on_show_row(self, message: ShowRow) -> None:
        """A screen's way to another screen's row (the Overview's `f` and `s`): the cursor goes there now,
        or once the row is shown."""
        self.switch_mode(message.mode)
        screen = self.screen
        if message.key and isinstance(screen, SnapshotScreen):
            screen.select_row(message.key)

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.paused and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.render_current()
        if not self.paused:
            self.poll_now()
        self.notify("refresh paused" if self.paused else "refresh resumed", timeout=2)

    def action_filter(self) -> None:
        screen = self.screen
        if not isinstance(screen, SnapshotScreen):
            return
        if screen.main_table() is None:
            self.notify(f"/ filters a table's rows: the {screen.TITLE} screen has no table to filter",
                        severity="warning", timeout=4)
            return
        screen.open_filter()

    def action_details(self) -> None:
        screen = self.screen
        if not isinstance(screen, SnapshotScreen):  # a modal: no table of its own
            return
        table = screen.main_table()
        key = table.selected_key() if table is not None else None
        if table is not None and key is not None:
            screen.open_details(table, key)

    def action_nccl(self, what: str) -> None:
        """The NCCL screen's run/cancel/GPU pick, reachable from the palette; the screen binds r/c/P itself."""
        from nodeconsole.screens.nccl import NcclScreen

        screen = self.screen
        if not isinstance(screen, NcclScreen):
            self.notify("open the NCCL screen (6) first", severity="warning")
            return
        if what == "run_check":
            screen.action_run_check()
        elif what == "pick_gpus":
            screen.action_pick_gpus()
        elif what == "cancel_check":
            screen.action_cancel_check()

    def action_help(self) -> None:
        from nodeconsole.screens.modals.help import HelpModal

        self.push_screen(HelpModal())

    def action_cycle_theme(self) -> None:
        i = NAMES.index(self.theme) if self.theme in NAMES else -1
        self.theme = NAMES[(i + 1) % len(NAMES)]
        self.notify(f"theme: {self.theme} (t switches to the next)", timeout=3)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # The palette lists the same registry as the bindings and the help screen.
        for c in COMMANDS:
            if c.key == "enter":
                continue
            yield SystemCommand(c.title, c.help, lambda a=c.action: self._run_anywhere(a))
        for name in NAMES:
            yield SystemCommand(f"Theme: {name}", "switch theme", lambda n=name: setattr(self, "theme", n))
        yield SystemCommand("Diff against a capture…", "what changed on this host since a capture taken earlier",
                            self.action_diff_against)

    def action_diff_against(self) -> None:
        from nodeconsole.screens.modals.diff import DiffModal

        self.push_screen(DiffModal(lambda: self.seams))
