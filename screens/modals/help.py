"""Help: generated from the command registry, so it always matches the bindings and the palette.

Three columns (key, command, what it does); the last wraps within its own column, so at 80 columns
a long description continues under itself, never under the keys."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from nodeconsole.screens.commands import COMMANDS, key_label

KEY_WIDTH = 8


def help_rows() -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(group, [(key, title, help)]) in the registry's order, then the palette."""
    groups: list[tuple[str, list[tuple[str, str, str]]]] = []
    for c in COMMANDS:
        if not groups or groups[-1][0] != c.group:
            groups.append((c.group, []))
        groups[-1][1].append((key_label(c), c.title, c.help))
    groups[-1][1].append(("ctrl+p", "Palette", "every command above, searchable"))
    return groups


def help_text() -> Table:
    """One grid for every group, so the columns line up from the first key to the last."""
    table = Table.grid(padding=(0, 1), pad_edge=False)
    table.add_column(justify="right", no_wrap=True, min_width=KEY_WIDTH)
    table.add_column(no_wrap=True)  # short titles (at most 12): the descriptions keep the width
    table.add_column(ratio=1, overflow="fold")
    for n, (group, rows) in enumerate(help_rows()):
        if n:
            table.add_row("", "", "")
        table.add_row(Text(group, style="bold", justify="left"), "", "")
        for key, title, text in rows:
            table.add_row(key, title, text)
    return table


class HelpModal(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close"),
                Binding("j,down", "scroll(1)", "Down", show=False),
                Binding("k,up", "scroll(-1)", "Up", show=False),
                Binding("pagedown,space", "scroll(10)", "Page down", show=False),
                Binding("pageup", "scroll(-10)", "Page up", show=False)]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(Text("nodeconsole keys", style="bold"))
            yield Static(help_text(), id="help-body")

    def on_mount(self) -> None:
        # the list is longer than a 24-line terminal: the frame says how to see the rest
        self.query_one("#help").border_subtitle = "j/k PgDn scroll · Esc closes"

    def action_scroll(self, lines: int) -> None:
        self.query_one("#help", VerticalScroll).scroll_relative(y=lines, animate=False)

    def action_close(self) -> None:
        self.dismiss(None)
