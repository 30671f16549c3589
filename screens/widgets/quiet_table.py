"""A DataTable whose cell updates re-render only their row.

DataTable keys every render cache on one update counter: changing one cell re-renders every cell of the
table (and repaints all of it). A console table changes a few figures each second (utilization, CPU %),
so `update_cell` here forgets only the changed row's cached renders and repaints only that row, unless
the column has to grow (then DataTable's own path re-measures everything).

This relies on DataTable's cache keys (the cell cache's key tuple, (update count, row index) in the row
renderables):
tests/screens/test_quiet_table.py compares every frame with a plain DataTable's, so a Textual upgrade
that changes them fails there.
"""
from __future__ import annotations

from rich.style import Style
from textual.geometry import Region
from textual.widgets import DataTable
from textual.widgets.data_table import CellType, ColumnKey, RowKey


class QuietTable(DataTable):
    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._seen_styles: set[Style] = set()
        self._seen_states: set[object] = set()
        self._seen_at = -1  # the update count the two sets above are for

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
        self._repaint_row(index)

    def _repaint_row(self, index: int) -> None:
        """refresh_row without its cost: DataTable finds a row's line by adding up the heights of every
        row above it (100 changed cells of a 500-row table: ~10 ms a second); with one-line rows it is
        the row's index. A row out of sight is not repainted (its renders were dropped: it is drawn
        afresh when scrolled to)."""
        if self._total_row_height != len(self.rows):  # rows of other heights: DataTable's own way
            self.refresh_row(index)
            return
        y = index + (self.header_height if self.show_header else 0)
        self._refresh_region(Region(0, y, max(self.size.width, self.virtual_size.width), 1))

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False):
        # the styles and pseudo-class states cells are rendered under: the keys _forget_cell drops (a
        # new update count makes every older key unreachable: start the sets again)
        if self._seen_at != self._update_count:
            self._seen_styles.clear()
            self._seen_states.clear()
            self._seen_at = self._update_count
        self._seen_styles.add(base_style)
        self._seen_states.add(self._pseudo_class_state)
        return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)

    def _forget_cell(self, rk: RowKey, ck: ColumnKey, index: int) -> None:
        """Drop the renders of one cell (each key it can have been cached under: a few dozen exact
        lookups, not a scan of a cache of thousands) and the row and line renders (cleared whole:
        rebuilt from the cached cells for the rows that are painted again)."""
        cache, count = self._cell_render_cache, self._update_count
        for style in self._seen_styles:
            for state in self._seen_states:
                for cursor in (False, True):
                    for hover in (False, True):
                        for show_hover in (False, True):
                            cache.discard((rk, ck, style, cursor, hover, show_hover, count, state))
        self._row_render_cache.clear()
        self._row_renderable_cache.discard((count, index))
        self._line_cache.clear()
