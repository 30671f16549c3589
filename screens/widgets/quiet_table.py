"""The base of the console's tables (KeyedTable): the fast table of screens/fast/ (a changed cell
re-renders and repaints only its row), or, under NODECONSOLE_STOCK_TEXTUAL=1, DataTable as it is
(screens/rendering.py decides)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from nodeconsole.screens import rendering
from nodeconsole.screens.widgets.stock_table import StockTable

if TYPE_CHECKING:
    QuietTable = StockTable
elif rendering.STOCK:
    QuietTable = StockTable
else:
    from nodeconsole.screens.fast import table_base

    QuietTable = table_base()

__all__ = ["QuietTable"]
