"""The console's faster paths over Textual: the one place in screens/ that uses Textual's private
modules (`textual._compositor`, `_styles_cache`, `_segment_tools`, `_xterm_parser`, `_time`) and private
attributes (`App._display`, `Screen._compositor`, DataTable's `_render_cell`, `_render_line`, its
caches). They are for a console used over a slow SSH link (fewer terminal bytes, a faster first frame,
less CPU while idle), and they are tied to the Textual versions they were tested with (pyproject pins
Textual; the README names them).

Nothing else imports this package's modules: screens/rendering.py asks the functions below, and skips
the package altogether under NODECONSOLE_STOCK_TEXTUAL=1. The tests compare every fast path with
Textual's own result (tests/screens/test_compositor.py, test_quiet_table.py, test_lean_styles.py,
test_terminal_output.py), so a Textual upgrade that changes the internals fails there.

- display.py: the app's base class: only the cells that changed are written (terminal.py, the shadow
  of what the terminal shows), and the input thread sleeps until a key comes (driver.py).
- compositor.py: a partial repaint renders only the widgets that can show in it.
- footer.py: the key footer is built again only when its keys changed.
- table.py, cells.py: a DataTable whose changed cells re-render only their row.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.widgets import Footer

    from nodeconsole.screens.stock_app import StockApp
    from nodeconsole.screens.widgets.stock_table import StockTable


def app_base() -> type[StockApp]:
    from nodeconsole.screens.fast.display import FastApp

    return FastApp  # type: ignore[return-value]  # the same hooks as StockApp, another base


def prepare_screen(screen: Screen) -> None:
    from nodeconsole.screens.fast.compositor import FrontCompositor

    screen._compositor = FrontCompositor()


def key_footer() -> Footer:
    from nodeconsole.screens.fast.footer import QuietFooter

    return QuietFooter()


def table_base() -> type[StockTable]:
    from nodeconsole.screens.fast.table import QuietTable

    return QuietTable
