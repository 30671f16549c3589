"""Plan confirmation: the whole plan, then the way out and the way on.

The plan body scrolls on its own; the typed confirmation and the buttons stay below it, on screen at any
terminal size. A plan that can be applied asks "No" / "Yes, apply" with "No" focused — or, when it
changes a GPU that a VM's config uses, asks for the GPU's address: the cursor starts in the box, Enter
confirms only when the text matches exactly (else the dialog says what is wrong and stays open). A plan
with one outcome (refused, nothing to do) only has "OK". On a host that cannot be changed (a replay of a
capture; `read_only` says why) the plan is shown, the dialog says it is read-only and offers only
"Close": never a "Yes, apply" that then refuses.

The modal answers True (apply), False (cancelled: Esc or "No") or None (an "OK" on a plan with nothing
to apply); the caller says "cancelled" for False.
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from nodeconsole.console.hosttext import LINE_MAX
from nodeconsole.screens.widgets.hanging import hanging
from nodeconsole.screens.widgets.hinted_scroll import HintedScroll, scroll_bindings
from nodeconsole.screens.widgets.text import plain_text


class PlanModal(ModalScreen[bool | None]):
    # the plan scrolls whatever has the focus (the answer buttons, or the typed box, which keeps the
    # letters it is typed)
    BINDINGS = [Binding("escape", "no", "No"), *scroll_bindings("scroll_plan", typing=True)]

    def __init__(self, title: str, lines: list[str], can_apply: bool, typed: str | None = None,
                 read_only: str = "") -> None:
        super().__init__()
        self._read_only = read_only
        self._title, self._lines, self._can_apply = title, lines, can_apply and not read_only
        self._typed = typed if self._can_apply else None

    def compose(self) -> ComposeResult:
        with Vertical(id="plan"):
            # names come from the host: plain text with visible escapes, never markup
            yield Static(plain_text(self._title, limit=LINE_MAX), id="plan-title")
            # the plan's own first line is its title, already shown above
            body = self._lines[1:] if self._lines and self._title.startswith(self._lines[0]) else self._lines
            with HintedScroll(id="plan-scroll"):
                yield Static(hanging("\n".join(body)), id="plan-body")
            with Vertical(id="plan-foot"):  # docked below the body: never scrolled out of sight
                # a plan longer than the dialog says how much is below and how to scroll it
                yield Static(id="plan-scroll-more", classes="more")
                if self._read_only:
                    yield Static(plain_text(f"read-only: {self._read_only}", limit=LINE_MAX), id="plan-read-only")
                if self._typed:
                    yield Static(plain_text(f"A VM's config uses this device: type {self._typed} and press "
                                            "Enter to apply (Esc cancels)"), id="plan-typed-hint")
                    yield Input(placeholder="type it here", id="plan-typed")
                    yield Static("", id="plan-typed-error")
                with Horizontal(id="plan-buttons"):
                    if self._can_apply:
                        yield Button("No", id="no", variant="primary")
                        yield Button("Yes, apply", id="yes", variant="error")
                    elif self._read_only:  # shown, never applied here
                        yield Button("Close", id="ok", variant="primary")
                    else:  # a refused or empty plan has one outcome: it was read
                        yield Button("OK", id="ok", variant="primary")

    def on_mount(self) -> None:
        if not self._focus_answer():
            self.call_after_refresh(self._focus_answer)  # not there yet: once the screen has refreshed

    def _focus_answer(self) -> bool:
        # a typed confirmation is answered in its box; else the safe answer ("No", or the only "OK")
        where = "#plan-typed" if self._typed else "#no" if self._can_apply else "#ok"
        for widget in self.query(where):
            widget.focus()
            return True
        return False

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "no":
            self.dismiss(False)
        elif event.button.id == "ok":
            self.dismiss(None)
        elif event.button.id == "yes":
            self._confirm()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "plan-typed":
            event.stop()
            self._confirm()

    def _confirm(self) -> None:
        if self._typed:
            typed = self.query_one("#plan-typed", Input).value.strip()
            if typed != self._typed:
                self._wrong(typed)
                return
        self.dismiss(True)

    def _wrong(self, typed: str) -> None:
        """Say what is wrong with the typed text; the dialog stays open, the cursor in the box."""
        if not typed:
            why = f"nothing typed: type {self._typed} exactly to apply, or Esc to cancel"
        else:
            why = f"{typed!r} is not {self._typed}: type it exactly to apply, or Esc to cancel"
        error = self.query_one("#plan-typed-error", Static)
        error.update(plain_text(why, limit=LINE_MAX))
        error.display = True
        box = self.query_one("#plan-typed", Input)
        box.focus()
        box.select_all()

    def action_scroll_plan(self, lines: int) -> None:
        self.query_one("#plan-scroll", HintedScroll).scroll_relative(y=lines, animate=False)

    def action_no(self) -> None:
        self.dismiss(False if self._can_apply else None)
