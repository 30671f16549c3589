"""A read-only details view for one row (Esc or Enter closes)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from nodeconsole.console.hosttext import LINE_MAX
from nodeconsole.screens.widgets.text import host_text, plain_text


class DetailsModal(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "dismiss", "Close")]

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self._title = title
        self._body = body

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details"):
            # title and body name the host's GPUs and VMs: plain text, visible escapes, never markup
            yield Static(host_text(self._title, LINE_MAX, style="bold"), id="details-title")
            yield Static(plain_text(self._body), id="details-body")

    def action_dismiss(self) -> None:
        self.dismiss(None)
