"""A scrolling view that says how much of it is out of sight: the line below it (`#<id>-more`) counts
the lines above and below the view and names the keys that scroll it (j/k and the arrows, PgUp/PgDn,
g/G), hidden while everything fits."""
from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static


def _lines(n: int) -> str:
    return f"{n} line{'s' if n != 1 else ''}"


def scroll_hint(above: int, below: int) -> str:
    parts = ([f"▲ {_lines(above)} above"] if above else []) + ([f"▼ {_lines(below)} below"] if below else [])
    return "  ".join(parts) + ": j/k PgUp/PgDn g/G scroll" if parts else ""


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
        for hint in self.screen.query(f"#{self.id}-more").results(Static):
            self._shown_hint = more
            hint.update(scroll_hint(*more))
            hint.display = bool(more[0] or more[1])

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
