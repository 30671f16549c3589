"""The console's table base as stock Textual draws it (NODECONSOLE_STOCK_TEXTUAL=1, screens/rendering.py):
a DataTable with the two calls the console's tables make beyond DataTable's own, in its public API.
The fast table (screens/fast/table.py) does the same with fewer repaints."""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from textual.widgets import DataTable
from textual.widgets.data_table import CellType


class StockTable(DataTable):
    def repaint_after(self) -> AbstractContextManager[None]:
        """`with table.repaint_after(): …update_cell…`: DataTable repaints as it goes."""
        return nullcontext()

    def _set_quietly(self, row_key: str, column_key: str, value: CellType) -> None:
        """update_cell for a row about to be drawn anyway: DataTable's own, for a cell that is there."""
        if row_key in self.rows and column_key in self.columns:
            DataTable.update_cell(self, row_key, column_key, value)
