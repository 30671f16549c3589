"""A read-only details view for one row (Esc or Enter closes). A body longer than the dialog scrolls
(j/k, arrows, PgUp/PgDn, g/G) and the line below it says how much is out of sight."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from nodeconsole.console.hosttext import LINE_MAX
from nodeconsole.screens.widgets.hinted_scroll import HintedScroll, scroll_bindings
from nodeconsole.screens.widgets.text import host_text, plain_text


class DetailsModal(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "close", "Close"), *scroll_bindings("scroll_body")]

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self._title = title
        self._body = body

    def compose(self) -> ComposeResult:
        with Vertical(id="details"):
            # title and body name the host's GPUs and VMs: plain text, visible escapes, never markup
            yield Static(host_text(self._title, LINE_MAX, style="bold"), id="details-title")
            with HintedScroll(id="details-scroll"):
                yield Static(plain_text(self._body), id="details-body")
            yield Static(id="details-scroll-more", classes="more")

    def action_scroll_body(self, lines: int) -> None:
        self.query_one("#details-scroll", HintedScroll).scroll_relative(y=lines, animate=False)

    def action_close(self) -> None:
        self.dismiss(None)
