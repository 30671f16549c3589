"""How the console draws: with the faster paths of `screens/fast/` (the default) or with stock Textual.

`screens/fast/` is the one place that uses Textual's private modules and attributes (its compositor,
styles cache, segment tools, key parser; `App._display`, `Screen._compositor`, DataTable's render
internals). Those paths exist for a console used over a slow SSH link: fewer bytes to the terminal,
a faster first frame, less CPU while idle. `NODECONSOLE_STOCK_TEXTUAL=1` draws with stock Textual
everywhere instead: `screens/fast/` is then never imported, and the console uses Textual's public API
only (a Textual release that changed those internals still runs the console this way).

The choice is read once, when this module is first imported (the app's and the tables' base classes
are made from it). The rest of screens/ asks this module, never `screens/fast/` directly.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from textual.widgets import Footer

from nodeconsole.screens.stock_app import StockApp

if TYPE_CHECKING:
    from textual.screen import Screen

STOCK_ENV = "NODECONSOLE_STOCK_TEXTUAL"
STOCK = os.environ.get(STOCK_ENV, "") == "1"


def app_base() -> type[StockApp]:
    """The console app's base class: the stock one, or screens/fast/'s (which writes only the cells
    that changed, and reads keys with a thread that sleeps until one comes)."""
    if STOCK:
        return StockApp
    from nodeconsole.screens.fast import app_base as fast_base

    return fast_base()


def prepare_screen(screen: Screen) -> None:
    """Called by a console screen's __init__: in the fast mode a partial repaint renders only the
    widgets that can show in it."""
    if not STOCK:
        from nodeconsole.screens.fast import prepare_screen as fast_prepare

        fast_prepare(screen)


def footer() -> Footer:
    """The key footer: Textual's, or one built again only when the keys it shows changed."""
    if STOCK:
        return Footer()
    from nodeconsole.screens.fast import key_footer

    return key_footer()

