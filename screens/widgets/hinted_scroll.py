"""A scrolling view that says how much of it is out of sight: the line below it (`#<id>-more`) counts
the lines above and below the view and names the keys that scroll it (j/k and the arrows, PgUp/PgDn,
g/G), hidden while everything fits."""
from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.widgets import Static


def _lines(n: int) -> str:
    return f"{n} line{'s' if n != 1 else ''}"


def hint_line(above: int, below: int, unit: Callable[[int], str], keys: str) -> str:
    """`▲ N … above  ▼ N … below: keys`, or "" when nothing is out of sight."""
    parts = ([f"▲ {unit(above)} above"] if above else []) + ([f"▼ {unit(below)} below"] if below else [])
    return "  ".join(parts) + f": {keys}" if parts else ""


def put_hint(node: DOMNode, owner_id: str, text: str) -> bool:
    """Show `text` in the line below the view `owner_id` (the Static `#<owner_id>-more`), hidden when
    empty; False when there is no such line."""
    found = False
    for hint in node.query(f"#{owner_id}-more").results(Static):
        hint.update(text)
        hint.display = bool(text)
        found = True
    return found


def scroll_hint(above: int, below: int) -> str:
    return hint_line(above, below, _lines, "j/k PgUp/PgDn g/G scroll")


class HintedScroll(VerticalScroll):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
        Binding("g", "scroll_home", "Top", show=False),
        Binding("G", "scroll_end", "Bottom", show=False),
    ]

    def __init__(self, *children, **kw) -> None:
        super().__init__(*children, **kw)
        self._shown_hint: tuple[int, int] | None = None

    def out_of_sight(self) -> tuple[int, int]:
        above = round(self.scroll_y)
        return (above, max(0, round(self.max_scroll_y) - above))

    def _hint(self) -> None:
        more = self.out_of_sight()
        if more == self._shown_hint or not self.id or not self.is_mounted:
            return
        if put_hint(self.screen, self.id, scroll_hint(*more)):
            self._shown_hint = more

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._hint()

    def watch_virtual_size(self) -> None:
        self._hint()

    def on_resize(self) -> None:
        self._hint()


def scroll_bindings(action: str, typing: bool = False) -> list[BindingType]:
    """A dialog's keys for its HintedScroll, whatever has the focus: j/k and the arrows, PgUp/PgDn, g/G,
    each calling `action(lines)`. `typing`: the dialog has a text box, so space, Home and End stay the
    box's."""
    page, top, bottom = ("pagedown", "g", "G") if typing else ("pagedown,space", "g,home", "G,end")
    return [Binding("j,down", f"{action}(1)", "Down", show=False),
            Binding("k,up", f"{action}(-1)", "Up", show=False),
            Binding(page, f"{action}(10)", "Page down", show=False),
            Binding("pageup", f"{action}(-10)", "Page up", show=False),
            Binding(top, f"{action}(-100000)", "Top", show=False),
            Binding(bottom, f"{action}(100000)", "Bottom", show=False)]
