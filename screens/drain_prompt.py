"""The prompt behind the GPUs screen's `D`: why the selected GPU is drained. The app plans the drain
with that reason, or, for a drained GPU, plans lifting it without asking (screens/app_changes.py);
either way the plan is shown and applied as every change is."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from nodeconsole.console.drains import REASON_MAX, reason_problem
from nodeconsole.console.hosttext import visible


class DrainReasonModal(ModalScreen[str | None]):
    """Asks why the GPU is drained; answers the reason, or None (Esc). A bad reason is said and the
    prompt stays open."""
    DEFAULT_CSS = """
    DrainReasonModal { align: center middle; }
    #drain { width: 90%; max-width: 100; height: auto; border: round $primary; background: $surface;
             padding: 0 1; }
    #drain-status { color: $error; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, gpu_label: str) -> None:
        super().__init__()
        self._label = gpu_label

    def compose(self) -> ComposeResult:
        with Vertical(id="drain"):
            yield Static(Text(f"Drain {visible(self._label)}", style="bold"), id="drain-title")
            yield Static(Text("No new work goes on a drained GPU (passthrough, MIG, vGPU, NCCL) until it is "
                              "undrained; a VM that holds it keeps it. Why? (Enter: see the plan, Esc: cancel)"))
            yield Input(placeholder="reason, e.g. RMA ticket 42", max_length=REASON_MAX, id="drain-reason")
            yield Static("", id="drain-status")

    def on_mount(self) -> None:
        self.query_one("#drain-reason", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        problem = reason_problem(event.value)
        if problem:
            self.query_one("#drain-status", Static).update(Text(visible(problem)))
            return
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)

