"""Diff against a capture (from the palette): asks for the path of a capture taken earlier
(`nodeconsole capture -o FILE`), captures the host the console shows now, and lists what changed, as
`nodeconsole diff FILE --live` does (console/capture/diff.py). The list is plain text: it names the
host's GPUs, VMs and files."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from nodeconsole.console.hosttext import LINE_MAX, visible

if TYPE_CHECKING:
    from nodeconsole.console.seams import Seams

STYLES = {"heading": "bold", "note": "yellow", "detail": "dim"}


def diff_text(lines: list[tuple[str, str]]) -> Text:
    """The diff's (style, line) pairs as one Text: host text, never markup."""
    out = Text()
    for style, line in lines:
        out.append(visible(line) + "\n", style=STYLES.get(style, ""))
    return out


class DiffModal(ModalScreen[None]):
    DEFAULT_CSS = """
    DiffModal { align: center middle; }
    #diff {
        width: 90%;
        max-width: 120;
        height: auto;
        max-height: 90%;
        border: round $primary;
        background: $surface;
        padding: 0 1;
    }
    #diff-body { height: auto; }
    #diff-status { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, seams: Callable[[], Seams | None], path: str = "") -> None:
        """`seams`: the console's host when the path is given (None until the first poll has read it)."""
        super().__init__()
        self._seams = seams
        self._path = path
        self.result: list[tuple[str, str]] | None = None  # the last diff's lines (for tests)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="diff"):
            yield Static(Text("Diff against a capture", style="bold"), id="diff-title")
            yield Static(Text("What changed on this host since a capture taken earlier "
                              "(nodeconsole capture -o FILE). Enter a path, then Enter; Esc closes."),
                         id="diff-help")
            yield Input(value=self._path, placeholder="path of the capture (.tar.gz)", id="diff-path")
            yield Static("", id="diff-status")
            yield Static("", id="diff-body")

    def on_mount(self) -> None:
        self.query_one("#diff-path", Input).focus()

    def _status(self, text: str) -> None:
        self.query_one("#diff-status", Static).update(Text(visible(text)))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        path = os.path.expanduser(event.value.strip())
        if not path:
            self._status("give the path of a capture")
            return
        if not os.path.isfile(path):
            self._status(f"{path[:LINE_MAX]}: no such file")
            return
        seams = self._seams()
        if seams is None:
            self._status("the host is not read yet: try again in a moment")
            return
        self._status("capturing the host now and comparing…")
        self.query_one("#diff-body", Static).update("")
        self._compare(path, seams)

    @work(thread=True, exclusive=True, group="diff", exit_on_error=False)
    def _compare(self, path: str, seams: Seams) -> None:
        from nodeconsole.console.capture.diff import DiffError, compare, live_side, load_side, render

        try:
            diff = compare(load_side(path), live_side(seams))
        except DiffError as e:
            self.app.call_from_thread(self._status, str(e))
            return
        except Exception as e:  # a host that cannot be captured: say why, keep the console running
            self.app.call_from_thread(self._status, f"the diff failed: {type(e).__name__}: {e}")
            return
        self.app.call_from_thread(self._show, render(diff), len(diff.changes))

    def _show(self, lines: list[tuple[str, str]], count: int) -> None:
        self.result = lines
        self._status(f"{count} change{'s' if count != 1 else ''}" if count else "no changes")
        self.query_one("#diff-body", Static).update(diff_text(lines))

    def action_close(self) -> None:
        self.dismiss(None)
