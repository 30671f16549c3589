"""A read-only details view for one row (Esc or Enter closes). A body longer than the dialog scrolls
(j/k, arrows, PgUp/PgDn, g/G) and the line below it says how much is out of sight."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from nodeconsole.console.hosttext import LINE_MAX
from nodeconsole.screens.widgets.hinted_scroll import HintedScroll
from nodeconsole.screens.widgets.text import host_text, plain_text


class DetailsModal(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "dismiss", "Close"),
                Binding("j,down", "scroll_body(1)", "Down", show=False),
                Binding("k,up", "scroll_body(-1)", "Up", show=False),
                Binding("pagedown,space", "scroll_body(10)", "Page down", show=False),
                Binding("pageup", "scroll_body(-10)", "Page up", show=False),
                Binding("g,home", "scroll_body(-100000)", "Top", show=False),
                Binding("G,end", "scroll_body(100000)", "Bottom", show=False)]

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

    def action_dismiss(self) -> None:
        self.dismiss(None)
