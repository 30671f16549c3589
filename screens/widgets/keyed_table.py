"""A DataTable updated cell by cell from rows keyed by stable ids: no clear() per tick, so the
cursor and scroll position stay where the admin left them.

Cells hold host text: a str cell is shown as plain Text with visible escapes, capped at CELL_MAX
characters (DataTable would parse a str as markup); a Text cell is the screen's own rendering."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType

from nodeconsole.screens.widgets.quiet_table import QuietTable
from nodeconsole.screens.widgets.text import host_text


def _cell(cell) -> Text:
    return cell if isinstance(cell, Text) else host_text(cell)


def _cell_len(cell: Text) -> int:
    return cell.cell_len


class KeyedTable(QuietTable):
    DEFAULT_CSS = "KeyedTable { height: auto; max-height: 100%; }"
    # less/htop/k9s keys on top of DataTable's own (arrows, PgUp/PgDn, ctrl+Home/End); Home/End move
    # to the first/last row here (DataTable's go to the first/last column, which a row cursor lacks).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g,home", "scroll_top", "First row", show=False),
        Binding("G,end", "scroll_bottom", "Last row", show=False),
    ]

    def __init__(self, columns: Sequence[tuple[str, str]], **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self._columns = list(columns)
        self._rows: dict[str, tuple] = {}
        self.filter_text = ""

    def on_mount(self) -> None:
        for key, label in self._columns:
            self.add_column(label, key=key)

    def _visible(self, cells: tuple) -> bool:
        if not self.filter_text:
            return True
        needle = self.filter_text.lower()
        return any(needle in (c.plain if isinstance(c, Text) else str(c)).lower() for c in cells)

    def sync(self, rows: Iterable[tuple[str, tuple]]) -> None:
        """Make the table show exactly `rows` (key, cells), touching only what changed."""
        wanted = [(k, cells) for k, cells in rows if self._visible(cells)]
        wanted_keys = [k for k, _ in wanted]
        if list(self._rows) != wanted_keys and set(self._rows) - set(wanted_keys):
            for k in list(self._rows):
                if k not in wanted_keys:
                    self.remove_row(k)
                    del self._rows[k]
        order_ok = [k for k in self._rows] == [k for k in wanted_keys if k in self._rows]
        if not order_ok:  # membership reshuffled (rare): rebuild keeping the cursor on its key
            cursor_key = self._cursor_key()
            self.clear()
            self._rows.clear()
            for k, cells in wanted:
                self.add_row(*map(_cell, cells), key=k)
                self._rows[k] = cells
            if cursor_key in self._rows:
                self.move_cursor(row=self.get_row_index(cursor_key))
            return
        for k, cells in wanted:
            old = self._rows.get(k)
            if old is None:
                self.add_row(*map(_cell, cells), key=k)
            elif old != cells:
                for (col, _), a, b in zip(self._columns, old, cells):
                    if a != b:
                        # re-measure the column only when the new text is wider than it (re-measuring
                        # on every change costs ~20x with hundreds of rows)
                        shown = _cell(b)
                        wider = _cell_len(shown) > self.columns[col].content_width
                        self.update_cell(k, col, shown, update_width=wider)
            self._rows[k] = cells

    def _cursor_key(self) -> str | None:
        if not self._rows or self.cursor_row < 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def selected_key(self) -> str | None:
        return self._cursor_key()
