"""A DataTable updated cell by cell from rows keyed by stable ids: no clear() per tick, so the
cursor and scroll position stay where the admin left them.

Cells hold host text: a str cell is shown as plain Text with visible escapes, capped at TABLE_CELL_MAX
characters (DataTable would parse a str as markup); a Text cell is the screen's own rendering.

Columns follow the table's width. Each column is as wide as its widest cell while the row fits; when
it does not, the columns of lowest priority are shrunk first (their cells cut with "…"), down to their
minimum width, and the priority columns (names, models, owners, pins) keep their full text longest.
The widths are worked out again only when a cell gets wider than its column, when the widest cell of a
column goes, and on a resize: a tick that changes a few values leaves the layout alone."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.message import Message

from nodeconsole.screens.widgets.quiet_table import QuietTable
from nodeconsole.screens.widgets.text import host_text

TABLE_CELL_MAX = 64  # host text in one cell; the layout cuts it further when the terminal is narrow
MIN_WIDTH = 4  # a shrunk column keeps at least this many cells (or its label's width, if less)


@dataclass(frozen=True)
class Col:
    """A table column. `priority`: higher keeps its full text longer when the row is wider than the
    table. `min_width`: never shrunk below this (0: the label's width, at least MIN_WIDTH). `reserve`:
    the width the column takes from the start when there is room, for cells that grow to a known width
    (a sparkline filling up): the columns right of it do not move each time it grows. `keep_end`: a
    cell wider than its column shows its end (a sparkline's newest bars), not its start."""

    key: str
    label: str
    priority: int = 0
    min_width: int = 0
    reserve: int = 0
    keep_end: bool = False


def as_col(spec: Col | tuple) -> Col:
    return spec if isinstance(spec, Col) else Col(*spec)


def _cell(cell) -> Text:
    text = cell if isinstance(cell, Text) else host_text(cell, TABLE_CELL_MAX)
    text.no_wrap, text.overflow = True, "ellipsis"  # one line; a narrow column cuts it with "…"
    return text


def fit_widths(cols: Sequence[Col], natural: Sequence[int], room: int) -> list[int]:
    """Content widths for `cols` whose widest cells are `natural`, in `room` cells (padding excluded).
    All natural widths when they fit; else the lowest-priority columns shrink first, the widest of a
    priority first, each down to its minimum; the rest is cut by the terminal (the table scrolls)."""
    widths = list(natural)
    excess = sum(widths) - room
    if excess <= 0:
        return widths
    floor = [min(n, c.min_width or max(MIN_WIDTH, Text(c.label).cell_len)) for c, n in zip(cols, natural)]
    for level in sorted({c.priority for c in cols}):
        members = [i for i, c in enumerate(cols) if c.priority == level]
        while excess > 0:
            i = max(members, key=lambda j: widths[j] - floor[j])
            spare = widths[i] - floor[i]
            if spare <= 0:
                break
            # shrink the widest column down to the next widest (or as far as needed), keeping the
            # columns of one priority as even as their text allows
            others = sorted((widths[j] - floor[j] for j in members if j != i), reverse=True)
            step = min(excess, max(1, spare - (others[0] if others else 0)))
            widths[i] -= step
            excess -= step
        if excess <= 0:
            break
    return widths


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

    class More(Message):
        """The rows the table holds but does not show changed: `above` and `below` the visible ones."""

        def __init__(self, table: KeyedTable, above: int, below: int) -> None:
            super().__init__()
            self.table, self.above, self.below = table, above, below

        @property
        def control(self) -> KeyedTable:
            return self.table

    def __init__(self, columns: Sequence[Col | tuple], **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self._columns = [as_col(c) for c in columns]
        self._rows: dict[str, tuple] = {}
        self._lens: dict[str, tuple[int, ...]] = {}  # each row's cell widths, for the natural widths
        self._labels = [max(Text(c.label).cell_len, c.reserve) for c in self._columns]
        self._natural = list(self._labels)  # the widest cell (or label) of each column
        self._widths: list[int] = []  # the content widths the columns have now
        self._grown = False  # during a sync: a cell got wider than its column's widest
        self._shrunk: set[int] = set()  # during a sync: columns whose widest cell may have gone
        self.filter_text = ""
        self._more = (0, 0)
        self._pinned: int | None = None  # a row put under the cursor by the screen, kept in sight on re-layouts
        # Rows well out of sight whose changed cells DataTable is not given yet (key → column → the cell,
        # before _fit): given when the row is drawn or read (on a 500-VM host every running VM's sparkline
        # moves when a bar starts, and most of those rows are out of sight).
        self._stale: dict[str, dict[int, Text]] = {}
        self._sorted = False  # sort() put the rows in another order than the last sync's

    def on_mount(self) -> None:
        for c, width in zip(self._columns, self._natural):
            self.add_column(c.label, key=c.key, width=width)
        self._widths = list(self._natural)

    # -- rows --------------------------------------------------------------------------------------
    def _visible(self, cells: tuple) -> bool:
        if not self.filter_text:
            return True
        needle = self.filter_text.lower()
        return any(needle in (c.plain if isinstance(c, Text) else str(c)).lower() for c in cells)

    def sync(self, rows: Iterable[tuple[str, tuple]]) -> None:
        """Make the table show exactly `rows` (key, cells), touching only what changed."""
        wanted = [(k, cells) for k, cells in rows if self._visible(cells)] if self.filter_text else list(rows)
        wanted_keys = [k for k, _ in wanted]
        self._grown, self._shrunk = False, set()
        same = list(self._rows) == wanted_keys  # the usual tick: the same rows in the same order
        if not same:
            keep = set(wanted_keys)
            for k in [k for k in self._rows if k not in keep]:
                self.remove_row(k)
                self._forget(k)
        if not same and list(self._rows) != wanted_keys[:len(self._rows)]:
            # reordered, or new rows that do not all come last (add_row appends): rebuild keeping the
            # cursor on its key
            cursor_key = self._cursor_key()
            self.clear_rows()
            for k, cells in wanted:
                self._add(k, cells)
            if cursor_key in self._rows:
                self.move_cursor(row=self.get_row_index(cursor_key))
            self._relayout()
            self._check_more()
            return
        low, high = self._in_sight()
        stale = self._stale
        with self.repaint_after():  # a row whose cells changed is repainted once
            for index, (k, cells) in enumerate(wanted):  # the rows keep their places: this is its index
                old = self._rows.get(k)
                if self._sorted and old is not None:  # unless sort() moved them
                    index = self.get_row_index(k)
                near = low <= index <= high
                if near and stale and k in stale:
                    self._give_stale(k, stale.pop(k))
                if old is None:
                    self._add(k, cells)
                elif old != cells:
                    lens = list(self._lens[k])
                    for i, ((c, a), b) in enumerate(zip(zip(self._columns, old), cells)):
                        if a != b:
                            shown = _cell(b)
                            self._measure(lens, i, shown.cell_len)
                            if near:  # the layout sets the widths: DataTable never re-measures a column
                                self.update_cell(k, c.key, self._fit(i, shown), update_width=False)
                            else:
                                stale.setdefault(k, {})[i] = shown
                    self._lens[k] = tuple(lens)
                    self._rows[k] = cells
        if self._shrunk:
            for i in self._shrunk:
                self._natural[i] = max([self._labels[i], *(lens[i] for lens in self._lens.values())])
        if self._grown or self._shrunk:
            self._relayout()
        self._check_more()

    def _in_sight(self) -> tuple[int, int]:
        """The rows a sync gives DataTable at once: those in sight and a screenful either side (the
        others get their changed cells when drawn, see _stale)."""
        shown = max(self.size.height, 1)
        top = int(self.scroll_y)
        return top - shown, top + 2 * shown

    def _give_stale(self, key: str, cells: dict[int, Text], repaint: bool = True) -> None:
        for i, shown in cells.items():
            column = self._columns[i].key
            if repaint:
                self.update_cell(key, column, self._fit(i, shown), update_width=False)
            else:
                self._set_quietly(key, column, self._fit(i, shown))

    def _give_all_stale(self) -> None:
        stale, self._stale = self._stale, {}
        for key, cells in stale.items():
            self._give_stale(key, cells)

    def _render_line(self, y: int, x1: int, x2: int, base_style):
        if self._stale:  # a row drawn gets its changed cells first
            try:
                row_key, _ = self._get_offsets(y)
            except LookupError:
                pass
            else:
                cells = self._stale.pop(row_key.value, None)  # type: ignore[arg-type]
                if cells:
                    self._give_stale(row_key.value or "", cells, repaint=False)
        return super()._render_line(y, x1, x2, base_style)

    # DataTable's readers of the cells (its *_at ones call these): the rows out of sight get their
    # changed cells first
    def get_row(self, row_key):
        self._give_all_stale()
        return super().get_row(row_key)

    def get_cell(self, row_key, column_key):
        self._give_all_stale()
        return super().get_cell(row_key, column_key)

    def get_column(self, column_key):
        self._give_all_stale()
        return super().get_column(column_key)

    def sort(self, *columns, key=None, reverse: bool = False):
        self._give_all_stale()
        self._sorted = True
        return super().sort(*columns, key=key, reverse=reverse)

    def clear(self, columns: bool = False):
        self._stale.clear()
        self._sorted = False
        return super().clear(columns)

    def remove_row(self, row_key) -> None:
        self._stale.pop(getattr(row_key, "value", row_key), None)
        super().remove_row(row_key)

    def clear_rows(self) -> None:
        """Remove every row (the columns stay; their widths follow the next rows)."""
        self.clear()
        self._rows.clear()
        self._lens.clear()
        self._natural = list(self._labels)

    def _add(self, key: str, cells: tuple) -> None:
        shown = [_cell(c) for c in cells]
        lens = [0] * len(self._columns)
        for i, text in enumerate(shown[:len(lens)]):
            self._measure(lens, i, text.cell_len)
        self.add_row(*(self._fit(i, t) for i, t in enumerate(shown)), key=key)
        self._rows[key] = cells
        self._lens[key] = tuple(lens)

    def _fit(self, i: int, text: Text) -> Text:
        """A keep_end column's cell cut to its end when wider than the column (others are cut by the
        table, at their end)."""
        if i < len(self._columns) and self._columns[i].keep_end and i < len(self._widths):
            width = self._widths[i]
            if text.cell_len > width > 0 and len(text.plain) == text.cell_len:  # one cell a character
                return text[len(text.plain) - width:]
        return text

    def _measure(self, lens: list[int], i: int, width: int) -> None:
        old, lens[i] = lens[i], width
        if width > self._natural[i]:
            self._natural[i] = width
            self._grown = True
        elif old == self._natural[i] and width < old:
            self._shrunk.add(i)

    def _forget(self, key: str) -> None:
        del self._rows[key]
        for i, width in enumerate(self._lens.pop(key, ())):
            if width == self._natural[i] and width > self._labels[i]:
                self._shrunk.add(i)

    # -- layout ------------------------------------------------------------------------------------
    def room(self) -> int:
        """The cells the columns' content may take: the table's width less the scrollbar and each
        column's padding."""
        width = self.size.width - self.scrollbar_size_vertical
        return width - 2 * self.cell_padding * len(self._columns)

    def _relayout(self) -> None:
        if not self.columns or self.size.width <= 0:
            return  # not laid out yet: the first resize does it
        widths = fit_widths(self._columns, self._natural, self.room())
        if widths == self._widths:
            return
        was, self._widths = self._widths, widths
        for c, width in zip(self._columns, widths):
            column = self.columns[c.key]  # type: ignore[index]  # DataTable's keys compare equal to str
            column.auto_width, column.width = False, width
        for i, c in enumerate(self._columns):
            if c.keep_end and (i >= len(was) or was[i] != widths[i]):
                for k, cells in self._rows.items():
                    if i < len(cells):
                        self.update_cell(k, c.key, self._fit(i, _cell(cells[i])), update_width=False)
        self._require_update_dimensions = True
        self._update_count += 1  # the rendered cells' cache key
        self._clear_caches()
        self.refresh()

    def on_resize(self) -> None:
        self._relayout()
        self._show_pinned()
        self._check_more()

    # -- a row the screen puts the cursor on -------------------------------------------------------
    def show_row(self, row: int) -> None:
        """Put the cursor on `row`, scrolled as little as shows it; the screen around the table may still
        be laid out (a summary above it growing): each resize until the cursor moves scrolls it again, so
        where the row ends up does not depend on when the layout ran."""
        self.move_cursor(row=row, scroll=False)
        self._pinned = row
        self._show_pinned()

    def _show_pinned(self) -> None:
        if self._pinned is None:
            return
        if self.cursor_row != self._pinned:  # the admin moved on
            self._pinned = None
            return
        rows = self.scrollable_content_region.height - (self.header_height if self.show_header else 0)
        if rows > 0:
            self.scroll_to(y=max(0, self._pinned - rows + 1), animate=False, immediate=True)

    def watch_show_vertical_scrollbar(self) -> None:
        self._relayout()  # the scrollbar came or went: the room for the columns changed

    def watch_show_horizontal_scrollbar(self) -> None:
        self._check_more()  # it takes a row's line

    def watch_hover_coordinate(self, old: Coordinate, value: Coordinate) -> None:
        """A cell the layout cut shows its whole text as a tooltip under the mouse (Enter: the details)."""
        super().watch_hover_coordinate(old, value)
        tip = None
        if 0 <= value.row < self.row_count and 0 <= value.column < len(self._columns):
            key = self.coordinate_to_cell_key(value).row_key.value or ""
            lens = self._lens.get(key, ())
            if value.column < len(lens) and value.column < len(self._widths) \
                    and lens[value.column] > self._widths[value.column]:
                label, text = self.full_row(key)[value.column]
                tip = f"{label}: {text}"
        self.tooltip = tip

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._check_more()

    # -- rows out of sight -------------------------------------------------------------------------
    def out_of_sight(self) -> tuple[int, int]:
        """(rows above, rows below) the ones the table shows now."""
        rows = len(self._rows)
        shown = self.scrollable_content_region.height - (self.header_height if self.show_header else 0)
        if rows == 0 or shown <= 0 or not self.display:
            return (0, 0)
        top = min(rows, max(0, round(self.scroll_y)))
        return (top, max(0, rows - top - shown))

    def _check_more(self) -> None:
        more = self.out_of_sight()
        if more != self._more:
            self._more = more
            self.post_message(self.More(self, *more))

    def column_widths(self) -> dict[str, int]:
        """Each column's content width now (what a cell of it shows before "…")."""
        return {c.key: w for c, w in zip(self._columns, self._widths)}

    def full_row(self, key: str) -> list[tuple[str, str]]:
        """The row's cells in full (label, text), whatever the layout cut."""
        cells = self._rows.get(key, ())
        return [(c.label, _cell(v).plain) for c, v in zip(self._columns, cells)]

    def has_row(self, key: str) -> bool:
        return key in self._rows

    def is_cut(self, key: str) -> bool:
        lens = self._lens.get(key, ())
        return any(n > w for n, w in zip(lens, self._widths))

    # -- selection ---------------------------------------------------------------------------------
    def _cursor_key(self) -> str | None:
        if not self._rows or self.cursor_row < 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def selected_key(self) -> str | None:
        return self._cursor_key()
