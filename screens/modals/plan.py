"""Plan confirmation: the whole plan, "No" focused; changes to a GPU a VM config uses need its
address typed before "Yes" does anything."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from nodeconsole.console.hosttext import LINE_MAX
from nodeconsole.screens.widgets.text import plain_text


class PlanModal(ModalScreen[bool]):
    BINDINGS = [Binding("escape", "no", "No")]

    def __init__(self, title: str, lines: list[str], can_apply: bool, typed: str | None = None) -> None:
        super().__init__()
        self._title, self._lines, self._can_apply, self._typed = title, lines, can_apply, typed

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="plan"):
            # names come from the host: plain text with visible escapes, never markup
            yield Static(plain_text(self._title, limit=LINE_MAX), id="plan-title")
            # the plan's own first line is its title, already shown above
            body = self._lines[1:] if self._lines and self._title.startswith(self._lines[0]) else self._lines
            yield Static(plain_text("\n".join(body)), id="plan-body")
            if self._typed and self._can_apply:
                yield Static(plain_text(f"A VM's config uses this GPU: type {self._typed} to confirm"),
                             id="plan-typed-hint")
                yield Input(placeholder=self._typed, id="plan-typed")
            with Horizontal(id="plan-buttons"):
                yield Button("No", id="no", variant="primary")
                if self._can_apply:  # a refused or empty plan only has a way out
                    yield Button("Yes, apply", id="yes", variant="error")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default
        # focusing the button scrolls to the bottom: the admin reads from the title down
        self.call_after_refresh(lambda: self.query_one("#plan").scroll_home(animate=False))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "no":
            self.dismiss(False)
        elif event.button.id == "yes":
            if self._typed:
                typed = self.query_one("#plan-typed", Input).value.strip()
                if typed != self._typed:
                    self.notify(f"type {self._typed} exactly to apply", severity="warning")
                    return
            self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)
