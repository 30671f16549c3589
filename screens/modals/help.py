"""Help: generated from the command registry, so it always matches the bindings and the palette."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from nodeconsole.screens.commands import COMMANDS, key_label


def help_text() -> str:
    lines, group = [], None
    for c in COMMANDS:
        if c.group != group:
            group = c.group
            lines.append(f"\n[b]{group}[/b]")
        lines.append(f"  {key_label(c):>6}  {c.title:10} {c.help}")
    lines.append("\n  ctrl+p  Palette    every command above, searchable")
    return "\n".join(lines).lstrip()


class HelpModal(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static("[b]nodeconsole keys[/b]", markup=True)
            yield Static(help_text(), id="help-body", markup=True)

    def action_dismiss(self) -> None:
        self.dismiss(None)
