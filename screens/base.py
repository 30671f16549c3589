"""The frame every console screen shares: header, source banner, body, filter line, footer.

Screens never read the host: the app hands them each new snapshot (and the per-VM CPU history) and
they render it. A hidden screen does nothing; it renders the latest snapshot when it is shown again.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.screens.widgets.text import host_text, plain_text

if TYPE_CHECKING:
    from nodeconsole.console.model import HostSnapshot


class Banner(Static):
    """Shows sources that are unavailable (and why), and the paused state. Hidden when all is well."""

    def show_state(self, snap: HostSnapshot | None, paused: bool, note: str = "") -> None:
        parts = []
        if paused:
            parts.append("⏸ refresh paused (p resumes)")
        if snap is not None:
            for name in ("sysfs", "nvml", "libvirt", "psutil"):
                status = getattr(snap.sources, name)
                if status not in ("ok", "pending"):
                    parts.append(f"{name} {status}")  # reasons quote the host (paths, libvirt errors)
        if note:
            parts.append(note)
        text = "\n".join(parts)
        if text != getattr(self, "_shown", None):  # repaint only on change
            self._shown = text
            self.update(plain_text(text))
            self.display = bool(parts)


class HostLine(Static):
    pass


class SnapshotScreen(Screen):
    """Base for the five live screens."""

    TITLE = ""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._static_keys: dict[str, object] = {}  # selector -> the key its Static was last made from

    def compose(self) -> ComposeResult:
        yield HostLine(id="hostline")
        yield Banner(id="banner")
        with Vertical(id="body"):
            yield from self.compose_body()
        yield Input(placeholder="filter rows (Esc clears)", id="filter")
        yield Footer()

    def compose_body(self) -> ComposeResult:  # pragma: no cover - abstract
        yield Static()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one(Banner).display = False

    def on_screen_resume(self) -> None:
        self.refresh_from_app()

    def refresh_from_app(self) -> None:
        app = self.app
        snap = getattr(app, "snapshot", None)
        self.query_one(Banner).show_state(snap, getattr(app, "paused", False), getattr(app, "note", ""))
        if snap is not None:
            line = host_line(snap, self.TITLE)
            self.set_static("#hostline", lambda: line, line)
            self.render_snapshot(snap)

    def render_snapshot(self, snap: HostSnapshot) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def set_static(self, selector: str, make, key) -> None:
        """Update a Static only when `key` (what its content is made from) changed: an update
        re-lays the widget out and repaints it, which is most of a quiet tick's cost."""
        if self._static_keys.get(selector) == key:
            return
        self._static_keys[selector] = key
        self.query_one(selector, Static).update(make())

    def forget_static(self, selector: str) -> None:
        """The Static at `selector` was updated directly: the next `set_static` repaints it."""
        self._static_keys.pop(selector, None)

    # -- filter ----------------------------------------------------------------------------------
    def main_table(self) -> KeyedTable | None:
        tables = list(self.query(KeyedTable))
        focused = self.focused
        for t in tables:
            if t is focused:
                return t
        return tables[0] if tables else None

    def open_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            table = self.main_table()
            if table is not None:
                table.filter_text = event.value
                self.refresh_from_app()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            table = self.main_table()
            if table is not None:
                table.focus()

    def key_escape(self) -> None:
        box = self.query_one("#filter", Input)
        if box.display:
            box.value = ""
            box.display = False
            table = self.main_table()
            if table is not None:
                table.filter_text = ""
                table.focus()
            self.refresh_from_app()

    # -- details ---------------------------------------------------------------------------------
    def details_for(self, table: KeyedTable, key: str) -> tuple[str, str] | None:
        """(title, body) for a row; None when the row has no details."""
        return None

    def on_data_table_row_selected(self, event) -> None:
        table = event.data_table
        if isinstance(table, KeyedTable) and event.row_key is not None:
            self.open_details(table, event.row_key.value)

    def open_details(self, table: KeyedTable, key: str) -> None:
        got = self.details_for(table, key)
        if got is not None:
            from nodeconsole.screens.modals.details import DetailsModal

            self.app.push_screen(DetailsModal(*got))


def tab_strip(title: str) -> str:
    """The screens and their keys, the current one highlighted (the footer keeps the other keys)."""
    from rich.markup import escape

    from nodeconsole.screens.commands import COMMANDS

    tabs = []
    for c in COMMANDS:
        if c.group == "Screens":
            label = f"{c.key} {c.title}"
            tabs.append(f"[reverse b] {escape(label)} [/]" if c.title == title else f" {escape(label)} ")
    return "".join(tabs)


def host_line(snap: HostSnapshot, title: str) -> Text:
    """The tab strip (our markup) and the host's name (plain text, visible escapes, capped)."""
    states = {n: getattr(snap.sources, n) for n in ("sysfs", "nvml", "libvirt", "psutil")}
    bad = [n for n, v in states.items() if v not in ("ok", "pending")]
    line = Text.from_markup(tab_strip(title))
    line.append("│ ")
    line.append_text(host_text(snap.host.hostname or "?"))
    line.append(" IOMMU on" if snap.iommu.enabled else " ")
    if not snap.iommu.enabled:
        line.append("IOMMU OFF", style="bold")
    if bad:
        line.append(f" degraded: {', '.join(bad)}", style="bold")
    if any(v == "pending" for v in states.values()):
        line.append(" reading…")
    return line
