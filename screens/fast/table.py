"""A DataTable whose cell updates re-render only their row.

DataTable keys every render cache on one update counter: changing one cell re-renders every cell of the
table (and repaints all of it). A console table changes a few figures each second (utilization, CPU %),
so `update_cell` here forgets only the changed row's cached renders and repaints only that row, unless
the column has to grow (then DataTable's own path re-measures everything).

This relies on DataTable's cache keys (the cell cache's key tuple, (update count, row index) in the row
renderables):
tests/screens/test_quiet_table.py compares every frame with a plain DataTable's, so a Textual upgrade
that changes them fails there.

A one-line cell holding a Text (every cell of a KeyedTable, and the header's labels) is drawn by
`text_cell_line`: the segments rich's render pipeline gives for it (Styled(Padding(cell))), built
directly, about five times faster. Anything else (other renderables, str cells, taller rows, tabs or
newlines, row labels) goes through DataTable's own rendering; the tests compare the two cell by cell.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._segment_tools import line_crop
from textual.color import Color
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets.data_table import CellType, ColumnKey, RowKey

from nodeconsole.screens.fast.cells import _CellRenders, _kept_cell, _LeanStylesCache, text_cell_line
from nodeconsole.screens.widgets.stock_table import StockTable

_NO_ROW: dict = {}


class _RepaintAfter:
    def __init__(self, table: QuietTable) -> None:
        self.table = table

    def __enter__(self) -> None:
        if self.table._repaint_later is None:
            self.table._repaint_later = set()
            self.outer = True
        else:
            self.outer = False  # nested: the outer block repaints

    def __exit__(self, *exc: object) -> None:
        if self.outer:
            rows, self.table._repaint_later = self.table._repaint_later, None
            if rows:
                self.table._repaint_rows(sorted(rows))


class QuietTable(StockTable):
    def __init__(self, *args, **kw) -> None:
        # set first: DataTable's __init__ may clear the caches already (zebra_stripes=True does)
        # per row: (what its cells' rendering depends on, each cell's rendered line or None)
        self._row_cells: dict[RowKey, tuple[tuple, list]] = {}
        self._style_now: Style | None = None  # the widget's rich style, while render_lines runs
        self._columns_now: tuple[list, list[int]] | None = None  # (columns, widths), while render_lines runs
        self._row_lines: dict[RowKey, tuple[tuple, Strip]] = {}  # per row: (what its line depends on, line)
        self._repaint_later: set[int] | None = None  # rows to repaint when a repaint_after() block ends
        super().__init__(*args, **kw)
        self._styles_cache = _LeanStylesCache()
        self._cell_render_cache = _CellRenders()  # type: ignore[assignment]

    def render_lines(self, crop: Region) -> list[Strip]:
        # the widget's style, and the columns with their widths, are worked out once for the lines of
        # one repaint (DataTable asks for them every line: a walk up the DOM, a list of the columns)
        self._style_now = self.rich_style
        self._columns_now = None
        try:
            return super().render_lines(crop)
        finally:
            self._style_now = None
            self._columns_now = None

    def _columns_and_widths(self) -> tuple[list, list[int]]:
        now = self._columns_now
        if now is None:
            columns = self.ordered_columns
            now = (columns, [column.get_render_width(self) for column in columns])
            if self._style_now is not None:  # inside one repaint: nothing can change them
                self._columns_now = now
        return now

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        """DataTable's, for a row-cursor table without fixed columns or row labels, with each row's line
        kept by row: a changed cell forgets its own row's line only (DataTable keeps all lines under
        one key and drops them all)."""
        if self.cursor_type != "row" or self.fixed_columns or (self._labelled_row_exists and self.show_row_labels):
            return super()._render_line(y, x1, x2, base_style)
        width = self.size.width
        try:
            row_key, line_no = self._get_offsets(y)
        except LookupError:
            return Strip.blank(width, base_style)
        cursor, hover = self.cursor_coordinate, self.hover_coordinate
        index = self._row_index(row_key)
        key = (y, x1, x2, width, cursor.row == index, hover.row == index, base_style, self.show_cursor,
               self._show_hover_cursor, self._update_count, self._pseudo_class_state)
        kept = self._row_lines.get(row_key)
        if kept is not None and kept[0] == key:
            return kept[1]
        segments, total, simple = self._row_segments(row_key, index, line_no, base_style, cursor, hover, width)
        if simple and x1 == 0 and total == width:  # the usual line: nothing to crop, pad or join
            strip = Strip(segments, width)
        else:
            strip = Strip(line_crop(segments, x1, x2, width)).adjust_cell_length(width, base_style).simplify()
        self._row_lines[row_key] = (key, strip)
        return strip

    def _row_index(self, row_key: RowKey) -> int:
        """The row's index, or -1 (the header's)."""
        index = self._row_locations.get(row_key)
        return -1 if index is None else index

    def _row_segments(self, row_key: RowKey, row_index: int, line_no: int, base_style: Style,
                      cursor: Coordinate, hover: Coordinate, width: int) -> tuple[list[Segment], int, bool]:
        """One line of a row of a row-cursor table: its segments as Segment.simplify would leave the
        whole line, their cell length, and whether they are that (False when a cell holds a control
        segment: the caller then simplifies the line itself).

        Each cell's segments are kept simplified, with their length, by row under everything their
        rendering depends on (a row cursor highlights whole rows: every cell of a row has the same cursor
        and hover state); a changed cell forgets only itself, so a line is its kept cells joined, merging
        the last segment of a cell into the first of the next where their styles are equal (what
        simplifying the whole line does at that seam)."""
        show_cursor, show_hover = self.show_cursor, self._show_hover_cursor
        columns, widths = self._columns_and_widths()
        row_style = self._get_row_style(row_index, base_style)
        is_cursor, is_hover = cursor.row == row_index, hover.row == row_index
        context = (row_index, line_no, row_style, base_style, is_cursor, is_hover, show_cursor, show_hover,
                   self._update_count, self._pseudo_class_state, tuple(widths))
        entry = self._row_cells.get(row_key)
        if entry is None or entry[0] != context:
            entry = self._row_cells[row_key] = (context, [None] * (len(columns) + 1))
        cells = entry[1]
        n = len(columns)
        for index in range(n):
            if cells[index] is None:
                line = self._render_cell(row_index, index, row_style, widths[index], cursor=is_cursor,
                                         hover=is_hover)[line_no]
                cells[index] = _kept_cell(line)
        remaining = max(0, width - sum(widths))
        extend = cells[n]
        if extend is None or extend[1] != remaining:
            extend_style, _ = self._get_styles_to_render_cell(
                row_index == -1, False, False, is_hover, is_cursor, show_cursor, show_hover, False, False)
            extend_style = row_style + extend_style
            extend_style += Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
            extend = cells[n] = _kept_cell([Segment(" " * remaining, extend_style)])
        out: list[Segment] = []
        total = 0
        simple = True
        for segments, length, plain in cells:
            total += length
            simple = simple and plain
            if not segments:
                continue
            if out and out[-1].style == segments[0].style and not segments[0].control:
                last = out[-1]
                out[-1] = Segment(last.text + segments[0].text, last.style)
                out.extend(segments[1:])
            else:
                out.extend(segments)
        return out, total, simple

    def render_line(self, y: int) -> Strip:
        """DataTable's render_line with the widget's style of this repaint."""
        style = self._style_now
        if style is None:
            style = self.rich_style
        scroll_x, scroll_y = self.scroll_offset
        fixed_height = 0
        for i in range(self.fixed_rows):
            fixed_height += self.get_row_height(cast(RowKey, self._row_locations.get_key(i)))
        if self.show_header:
            fixed_height += self.get_row_height(self._header_row_key)
        if y >= fixed_height:
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + self.size.width, style)

    def _render_line_in_row(self, row_key: RowKey, line_no: int, base_style: Style, cursor_location: Coordinate,
                            hover_location: Coordinate):
        """DataTable's, for tables without row labels, less what it works out and does not use: the
        header's style for every row, the background colours for a row cursor, each column's width
        twice. (A row-cursor table without fixed columns draws its lines with _row_segments.)"""
        if self._labelled_row_exists and self.show_row_labels:
            return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)
        cursor_type, show_cursor, show_hover = self.cursor_type, self.show_cursor, self._show_hover_cursor
        cache_key = (row_key, line_no, base_style, cursor_location, hover_location, cursor_type, show_cursor,
                     show_hover, self._update_count, self._pseudo_class_state)
        cache = self._row_render_cache
        if cache_key in cache:
            return cache[cache_key]
        highlight, render_cell = self._should_highlight, self._render_cell
        row_index = self._row_index(row_key)
        columns, widths = self._columns_and_widths()
        n_fixed = self.fixed_columns
        row_style = self._get_row_style(row_index, base_style)

        def cells(start: int, end: int, style: Style) -> list:
            out = []
            for index in range(start, end):
                where = Coordinate(row_index, index)
                out.append(render_cell(row_index, index, style, widths[index],
                                       cursor=highlight(cursor_location, where, cursor_type),
                                       hover=highlight(hover_location, where, cursor_type))[line_no])
            return out

        fixed_row = []
        if n_fixed:
            if row_key is self._header_row_key:
                fixed_style = self.get_component_styles("datatable--header").rich_style
            else:
                fixed_style = self.get_component_styles("datatable--fixed").rich_style
                fixed_style += Style.from_meta({"fixed": True})
            fixed_row = cells(0, min(n_fixed, len(columns)), fixed_style)
        scrollable_row = cells(0, len(columns), row_style)
        remaining = max(0, self.size.width - sum(widths[n_fixed:]))
        if cursor_type == "row":
            extend_style, _ = self._get_styles_to_render_cell(
                row_index == -1, False, False, highlight(hover_location, Coordinate(row_index or 0, 0), cursor_type),
                row_index == cursor_location.row, show_cursor, show_hover, False, False)
            extend_style = row_style + extend_style
        elif row_style.bgcolor is not None:
            faded = Color.from_rich_color(row_style.bgcolor).blend(self.background_colors[1], factor=0.25)
            extend_style = Style.from_color(color=row_style.color, bgcolor=faded.rich_color)
        else:
            extend_style = Style.from_color(row_style.color, row_style.bgcolor)
        extend_style += Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
        scrollable_row.append([Segment(" " * remaining, extend_style)])
        cache[cache_key] = pair = (fixed_row, scrollable_row)
        return pair

    def _clear_caches(self) -> None:
        """DataTable drops its renders when a setting changes (zebra stripes, cell padding, the cursor
        shown, the header): the kept rows and lines go with them (their keys hold none of those)."""
        self._row_cells.clear()
        self._row_lines.clear()
        super()._clear_caches()

    def notify_style_update(self) -> None:
        """A theme or class change: the kept rows and lines carry the old component styles (the cursor's,
        the header's), which are not in their keys."""
        self._row_cells.clear()
        self._row_lines.clear()
        super().notify_style_update()

    def remove_row(self, row_key: RowKey | str) -> None:
        rk = RowKey(row_key) if isinstance(row_key, str) else row_key
        self._row_cells.pop(rk, None)
        self._row_lines.pop(rk, None)
        super().remove_row(row_key)

    def clear(self, columns: bool = False):
        self._row_cells.clear()
        self._row_lines.clear()
        return super().clear(columns)

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: CellType, *,
                    update_width: bool = False) -> None:
        if update_width or self._require_update_dimensions:
            super().update_cell(row_key, column_key, value, update_width=update_width)
            return
        rk = RowKey(row_key) if isinstance(row_key, str) else row_key
        ck = ColumnKey(column_key) if isinstance(column_key, str) else column_key
        if rk not in self._row_locations or ck not in self._column_locations:
            super().update_cell(row_key, column_key, value)  # raises CellDoesNotExist
            return
        self._data[rk][ck] = value
        index = self._row_locations.get(rk)
        assert index is not None
        self._forget_cell(rk, ck, index)
        if self._repaint_later is not None:
            self._repaint_later.add(index)
        else:
            self._repaint_row(index)

    def _set_quietly(self, row_key: str, column_key: str, value: CellType) -> None:
        """update_cell for a row about to be drawn anyway: its data and its kept renders, no repaint."""
        rk, ck = RowKey(row_key), ColumnKey(column_key)
        index = self._row_locations.get(rk) if rk in self._row_locations else None
        if index is None or ck not in self._column_locations:
            return
        self._data[rk][ck] = value
        self._forget_cell(rk, ck, index)

    def repaint_after(self) -> _RepaintAfter:
        """`with table.repaint_after(): …update_cell…`: each changed row is repainted once, at the end
        (a row whose figure and sparkline both moved is one refresh, not two)."""
        return _RepaintAfter(self)

    def _repaint_row(self, index: int) -> None:
        self._repaint_rows((index,))

    def _repaint_rows(self, indices: Iterable[int]) -> None:
        """refresh_row for each row without its cost: DataTable finds a row's line by adding up the
        heights of every row above it (100 changed cells of a 500-row table: ~10 ms a second); with
        one-line rows it is the row's index. A row out of sight is not repainted (its renders were
        dropped: it is drawn afresh when scrolled to). The rows in sight are marked dirty in one
        refresh (one per row before: each a look-up of the widget's region and a check for idle)."""
        if self._total_row_height != len(self.rows):  # rows of other heights: DataTable's own way
            for index in indices:
                self.refresh_row(index)
            return
        header = self.header_height if self.show_header else 0
        top, height, fixed = self.scroll_y, self.outer_size.height, self.fixed_rows
        width = max(self.size.width, self.virtual_size.width)
        window: Region | None = None
        regions = []
        for index in indices:
            y = index + header
            if not fixed and (y < top - 1 or y > top + height + 1):
                continue  # well out of sight (the exact test is the window's, below)
            if window is None:
                window = self.window_region
            region = Region(0, y, width, 1)
            if window.overlaps(region):  # as DataTable's _refresh_region
                regions.append(region)
        if regions:
            offset = -self.scroll_offset
            self.refresh(*(region.translate(offset) for region in regions))

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False):
        if column_index < 0:  # a row label
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        header = row_index == -1
        row_key = self._header_row_key if header else cast(RowKey, self._row_locations.get_key(row_index))
        column_key = cast(ColumnKey, self._column_locations.get_key(column_index))
        # DataTable's cache and key (the cache is a _CellRenders: _forget_cell drops one cell's renders)
        key = (row_key, column_key, base_style, cursor, hover, self._show_hover_cursor, self._update_count,
               self._pseudo_class_state)
        cache = self._cell_render_cache
        if key in cache:
            return cache[key]
        line = None
        height = self.header_height if header else getattr(self.rows.get(row_key), "height", 0)
        if height == 1:
            # a non-empty Text is its own renderable (DataTable's formatter gives it back as it is):
            # taken from the row's data, without formatting every cell of the row
            datum = None if header else self._data.get(row_key, _NO_ROW).get(column_key)
            cell = datum if type(datum) is Text and datum else self._get_row_renderables(row_index).cells[column_index]
            if type(cell) is Text:
                fixed = not header and (row_index < self.fixed_rows or column_index < self.fixed_columns)
                component, post = self._get_styles_to_render_cell(
                    header, False, fixed, hover, cursor, self.show_cursor, self._show_hover_cursor,
                    self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
                pre = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component
                line = text_cell_line(self.app.console, cell, width, self.cell_padding, pre, post)
        if line is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cache[key] = lines = [line]
        return lines

    def _forget_cell(self, rk: RowKey, ck: ColumnKey, index: int) -> None:
        """Drop the renders of one cell, and the row and line renders (cleared whole: rebuilt from the
        cached cells for the rows that are painted again)."""
        self._cell_render_cache.forget(rk, ck)  # type: ignore[attr-defined]
        self._row_lines.pop(rk, None)
        entry = self._row_cells.get(rk)
        if entry is not None:
            column = self._column_locations.get(ck)
            if column is not None and column < len(entry[1]):
                entry[1][column] = None
        self._row_render_cache.clear()
        self._row_renderable_cache.discard((self._update_count, index))
        self._line_cache.clear()
