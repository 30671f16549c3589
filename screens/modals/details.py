"""A read-only details view for one row (Esc or Enter closes)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class DetailsModal(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "dismiss", "Close")]

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self._title = title
        self._body = body

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details"):
            yield Static(f"[b]{self._title}[/b]", id="details-title", markup=True)
            yield Static(self._body, id="details-body", markup=False)

    def action_dismiss(self) -> None:
        self.dismiss(None)
