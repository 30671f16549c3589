"""A DataTable whose cell updates re-render only their row.

DataTable keys every render cache on one update counter: changing one cell re-renders every cell of the
table (and repaints all of it). A console table changes a few figures each second (utilization, CPU %),
so `update_cell` here forgets only the changed row's cached renders and repaints only that row, unless
the column has to grow (then DataTable's own path re-measures everything).

This relies on DataTable's cache keys (row key then column key in the cell cache, row key first in the
row cache, the virtual line first in the line cache, (update count, row index) in the row renderables):
tests/screens/test_quiet_table.py compares every frame with a plain DataTable's, so a Textual upgrade
that changes them fails there.
"""
from __future__ import annotations

from textual.widgets import DataTable
from textual.widgets.data_table import CellType, ColumnKey, RowKey


class QuietTable(DataTable):
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
        self.refresh_row(index)

    def _forget_cell(self, rk: RowKey, ck: ColumnKey, index: int) -> None:
        """Drop the renders of one cell and of the row and line holding it (the other cells' renders
        stay: the row is put together again from them)."""
        for key in [k for k in self._cell_render_cache.keys() if k[0] == rk and k[1] == ck]:
            self._cell_render_cache.discard(key)
        for key in [k for k in self._row_render_cache.keys() if k[0] == rk]:
            self._row_render_cache.discard(key)
        self._row_renderable_cache.discard((self._update_count, index))
        y = (self.header_height if self.show_header else 0) + index  # the row's line (rows are one line)
        for key in [k for k in self._line_cache.keys() if k[0] == y]:
            self._line_cache.discard(key)
