"""The frame every console screen shares: header, source banner, body, filter line, footer.

Screens never read the host, nor the app's state: the app posts the visible screen each new view
(`SnapshotUpdated`: the snapshot, the per-VM CPU history, the refresh state), and the screen keeps the
latest it was given and renders only it. A hidden screen does nothing; the app posts it the latest
view when it is shown again. A screen with a selection (a GPU, a VM) tells the app through a message.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Input, Static

from nodeconsole.screens.messages import HostView, Selected, SnapshotUpdated
from nodeconsole.screens.rendering import footer, prepare_screen
from nodeconsole.screens.widgets.hinted_scroll import hint_line, put_hint
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.screens.widgets.quiet_static import update_static
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
                if status.lost:
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
    # A screen whose table selects something: the table's id and the message that tells the app.
    SELECTION_TABLE: ClassVar[str] = ""
    SELECTION: ClassVar[type[Selected] | None] = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        prepare_screen(self)  # fast mode: a tick's few changed lines rendered without what is behind them
        self._static_keys: dict[str, object] = {}  # selector -> the key its Static was last made from
        self.view = HostView(None)  # the latest view the app posted
        self._announced: str | None = None  # the selection the app was last told
        self._wanted_row: str | None = None  # a row to put the selection table's cursor on when it is there

    @property
    def snapshot(self) -> HostSnapshot | None:
        return self.view.snapshot

    @property
    def history(self) -> Mapping[str, tuple[float | None, ...]]:
        return self.view.history

    def compose(self) -> ComposeResult:
        yield HostLine(id="hostline")
        yield Banner(id="banner")
        with Vertical(id="body"):
            yield from self.compose_body()
        yield Input(placeholder="filter rows (Esc clears)", id="filter")
        yield footer()  # fast mode: its keys built again only when they changed

    def compose_body(self) -> ComposeResult:  # pragma: no cover - abstract
        yield Static()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one(Banner).display = False
        if self.SELECTION is not None:  # synchronously, so the app knows before the next key is handled
            table = self.query_one(f"#{self.SELECTION_TABLE}", KeyedTable)
            self.watch(table, "cursor_coordinate", self.announce_selection, init=False)

    def on_snapshot_updated(self, message: SnapshotUpdated) -> None:
        self.view = message.view
        self.show_view()

    def on_screen_resume(self) -> None:
        self.show_view()
        self.announce_selection()

    def on_screen_suspend(self) -> None:
        self._announce(None)  # actions on the selection belong to the screen that shows it

    def show_view(self) -> None:
        view = self.view
        snap = view.snapshot
        replay = getattr(view.seams, "replay", None)  # a capture (--replay): say whose host, and when
        note = "\n".join(t for t in (replay.banner if replay is not None else "", view.note) if t)
        self.query_one(Banner).show_state(snap, view.paused, note)
        if snap is not None:
            width = self.app.size.width
            # made again only when what it shows changed (a markup parse and a measure, every poll)
            self.set_static("#hostline", lambda: host_line(snap, self.TITLE, width),
                            ("hostline", self.TITLE, width, snap.host.hostname, snap.iommu.enabled, snap.sources))
            self.render_snapshot(snap)
            self._select_wanted()
            self.announce_selection()

    def select_row(self, key: str) -> None:
        """Put the selection table's cursor on the row `key` (now, or once the row is there)."""
        self._wanted_row = key
        self._select_wanted()

    def _select_wanted(self) -> None:
        if self._wanted_row is None or not self.SELECTION_TABLE or not self.is_mounted:
            return
        tables = list(self.query(f"#{self.SELECTION_TABLE}").results(KeyedTable))
        key = self._wanted_row
        if not tables or not tables[0].has_row(key):
            return
        self._wanted_row = None
        tables[0].show_row(tables[0].get_row_index(key))

    def announce_selection(self) -> None:
        """Tell the app what the selection table's cursor is on, when that changed."""
        if self.SELECTION is not None and self.app.screen is self:
            self._announce(self.query_one(f"#{self.SELECTION_TABLE}", KeyedTable).selected_key())

    def _announce(self, key: str | None) -> None:
        if self.SELECTION is not None and key != self._announced:
            self._announced = key
            self.app.post_message(self.SELECTION(key))

    def render_snapshot(self, snap: HostSnapshot) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def set_static(self, selector: str, make, key) -> None:
        """Update a Static only when `key` (what its content is made from) changed: an update
        re-lays the widget out and repaints it, which is most of a quiet tick's cost."""
        if self._static_keys.get(selector) == key:
            return
        self._static_keys[selector] = key
        update_static(self.query_one(selector, Static), make())

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
        # at once, not after the events already queued (Widget.focus): `/train` typed in one go over SSH
        # arrives as one read, and the keys after `/` are the filter's, not bindings (t, n…)
        self.set_focus(box)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            table = self.main_table()
            if table is not None:
                table.filter_text = event.value
                self.show_view()

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
            self.show_view()

    # -- rows out of sight ------------------------------------------------------------------------
    def on_keyed_table_more(self, message: KeyedTable.More) -> None:
        """A table that does not show all its rows says so on the line below it (`#<table id>-more`)."""
        if message.table.id:
            put_hint(self, message.table.id, more_text(message.above, message.below))

    # -- details ---------------------------------------------------------------------------------
    def details_for(self, table: KeyedTable, key: str) -> tuple[str, str] | None:
        """(title, body) for a row; None when the row has no details (then its cells are shown in full)."""
        return None

    def on_data_table_row_selected(self, event) -> None:
        table = event.data_table
        if isinstance(table, KeyedTable) and event.row_key is not None:
            self.open_details(table, event.row_key.value)

    def open_details(self, table: KeyedTable, key: str) -> None:
        got = self.details_for(table, key)
        if got is None and table.is_cut(key):  # no details of its own: its cells, whatever the layout cut
            got = (" ".join(t for _, t in table.full_row(key)[:1]) or key,
                   "\n".join(f"{label}: {text}" for label, text in table.full_row(key)))
        if got is not None:
            from nodeconsole.screens.modals.details import DetailsModal

            self.app.push_screen(DetailsModal(*got))


def more_text(above: int, below: int) -> str:
    """What a table cut short says: how many rows are out of sight, and how to see them."""
    return hint_line(above, below, lambda n: f"{n} more", "j/k PgUp/PgDn scroll, g/G first/last, / filters")


def tab_strip(title: str, compact: bool = False) -> str:
    """The screens and their keys, the current one highlighted (the footer keeps the other keys).
    Compact (a narrow terminal): the other screens by their key only, so the host's name still fits."""
    from rich.markup import escape

    from nodeconsole.screens.commands import COMMANDS

    tabs = []
    for c in COMMANDS:
        if c.group == "Screens":
            label = f"{c.key} {c.title}"
            if c.title == title:
                tabs.append(f"[reverse b] {escape(label)} [/]")
            else:
                tabs.append(f" {escape(c.key if compact else label)} ")
    return "".join(tabs)


def host_line(snap: HostSnapshot, title: str, width: int = 0) -> Text:
    """The tab strip (our markup) and the host's name (plain text, visible escapes, capped). When the
    whole strip and the host's part do not fit in `width` cells, the strip is compacted."""
    states = {n: getattr(snap.sources, n) for n in ("sysfs", "nvml", "libvirt", "psutil")}
    bad = [n for n, v in states.items() if v.lost]
    rest = Text("│ ")
    rest.append_text(host_text(snap.host.hostname or "?"))
    rest.append(" IOMMU on" if snap.iommu.enabled else " ")
    if not snap.iommu.enabled:
        rest.append("IOMMU OFF", style="bold")
    if bad:
        rest.append(f" degraded: {', '.join(bad)}", style="bold")
    if any(v.pending for v in states.values()):
        rest.append(" reading…")
    line = Text.from_markup(tab_strip(title))
    if width and line.cell_len + rest.cell_len > width:
        line = Text.from_markup(tab_strip(title, compact=True))
    line.append_text(rest)
    return line
