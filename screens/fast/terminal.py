"""Only the cells that changed go to the terminal.

Textual repaints whole widget regions: a table whose one cell changed is written again line by line,
with the colours of every cell. Over a slow SSH link during an incident that is most of what the
console writes. `ScreenShadow` keeps what the terminal shows, cell by cell (character and style), and
turns each compositor update into the escape sequences for the cells that differ from it, the way
curses does for htop. Runs of changed cells close together are joined (a cursor move costs about as much
as a few cells).

The shadow is forgotten, and the next frame written whole, when the terminal may no longer show what we
wrote: a new size, a return from suspension, an update of an unknown kind, and on ctrl+l (the admin's
"redraw": another program wrote over the screen).
"""
from __future__ import annotations

from typing import Any

from rich.cells import get_character_cell_size
from rich.color import ColorSystem
from rich.console import Console
from rich.segment import ControlType
from rich.style import Style
from textual.strip import Strip

WIDE = ""  # the right half of a double-width character (the character itself sits in the cell before)
RUN_CELLS = 20_000  # cells the shadow keeps for the runs it has seen (then it starts over)
GAP = 6  # unchanged cells between two changed runs rewritten rather than moving the cursor over them

# a cell: its character and how it looks on the terminal (the style's rendering, not the Style: two
# styles differing only in metadata — DataTable's row/column, Textual's click actions — look the same)
Cell = tuple[str, str]
NO_STYLE = ""


class ScreenShadow:
    def __init__(self) -> None:
        self.width = 0
        self.height = 0
        self.rows: list[list[Cell | None]] = []
        self._looks: dict[Style, str] = {}  # style → its rendering's escape codes (bounded below)
        self._style_of: dict[str, Style] = {}  # rendering → a style that renders so
        # (text, look) → its cells: a repainted line is mostly the segments it had, and the same cell
        # objects compare at once with the shadow's (bounded below)
        self._runs: dict[tuple[str, str], list[Cell]] = {}
        self._run_cells = 0

    def reset(self, width: int | None = None, height: int | None = None) -> None:
        """Forget what the terminal shows (the next update is written whole)."""
        if width is not None and height is not None:
            self.width, self.height = width, height
        self.rows = [[None] * self.width for _ in range(self.height)]

    def render(self, update: Any, console: Console, size: tuple[int, int]) -> str:
        """The escape sequences that bring the terminal from what it shows to what `update` paints."""
        if size != (self.width, self.height):
            self.reset(*size)
        changed = self._apply(update, console)
        return self._emit(changed, console)

    # -- painting the update into the shadow ------------------------------------------------------
    def _apply(self, update: Any, console: Console) -> dict[int, list[int]]:
        """Write the update's cells into the shadow; the x of every cell that changed, per line."""
        rows, width, height = self.rows, self.width, self.height
        changed: dict[int, list[int]] = {}
        x = y = 0
        row: list[Cell | None] | None = None
        marks: list[int] = []
        look = self._look_of(console)
        known = self._runs
        if self._run_cells > RUN_CELLS:  # bounded by the cells kept (~100 bytes each), not the runs
            known.clear()
            self._run_cells = 0
        for segment in update.__rich_console__(console, console.options):
            if segment.control:
                for code in segment.control:
                    if code[0] == ControlType.CURSOR_MOVE_TO:
                        x, y = code[1], code[2]
                        row = rows[y] if 0 <= y < height else None
                        marks = changed.setdefault(y, []) if row is not None else []
                continue
            text = segment.text
            if row is None or text == "\n":
                continue
            style = look(segment.style)
            end = x + len(text)
            if end <= width and text.isascii() and text.isprintable():
                # the common case, one cell a character: compare the run at once, cell by cell only
                # where it differs
                cells = known.get((text, style))
                if cells is None:
                    cells = known[(text, style)] = [(ch, style) for ch in text]
                    self._run_cells += len(cells)
                if row[x:end] != cells:
                    for i, cell in enumerate(cells, x):
                        if row[i] != cell:
                            row[i] = cell
                            marks.append(i)
                if end < width and row[end] is not None and row[end][0] == WIDE:  # type: ignore[index]
                    row[end] = None  # the left half of a wide character was overwritten
                    marks.append(end)
                x = end
            else:
                x = _paint_chars(row, x, text, style, width, marks)
        return {y: xs for y, xs in changed.items() if xs}

    def _look_of(self, console: Console):
        """A function: Style → the key of how it looks (its escape codes), remembered per style."""
        looks, style_of = self._looks, self._style_of
        if len(looks) > 20000:  # styles with per-cell metadata come and go with the rows: start over
            looks.clear()
        color_system = console._color_system or ColorSystem.TRUECOLOR
        render = Strip.render_style

        def look(style: Style | None) -> str:
            if style is None:
                return NO_STYLE
            key = looks.get(style)
            if key is None:
                key = looks[style] = render(style, "\0", color_system=color_system)
                style_of.setdefault(key, style)
            return key
        return look

    # -- writing the difference -------------------------------------------------------------------
    def _emit(self, changed: dict[int, list[int]], console: Console) -> str:
        out: list[str] = []
        # what Textual's own strips are rendered with
        color_system = console._color_system or ColorSystem.TRUECOLOR
        render = Strip.render_style
        style_of = self._style_of
        for y in sorted(changed):
            row = self.rows[y]
            for a, b in _runs(sorted(set(changed[y])), row):
                if row[a] is not None and row[a][0] == WIDE and a > 0:  # type: ignore[index]
                    a -= 1  # start on the whole character
                if b + 1 < self.width and row[b + 1] is not None and row[b + 1][0] == WIDE:  # type: ignore[index]
                    b += 1
                out.append(f"\x1b[{y + 1};{a + 1}H")
                text: list[str] = []
                key = NO_STYLE
                for x in range(a, b + 1):
                    cell = row[x]
                    if cell is None:  # never painted (cannot happen inside a run); keep positions right
                        cell = (" ", NO_STYLE)
                    ch, k = cell
                    if k != key:
                        if text:
                            out.append(_styled(render, "".join(text), style_of.get(key), color_system))
                        text, key = [], k
                    if ch != WIDE:
                        text.append(ch)
                if text:
                    out.append(_styled(render, "".join(text), style_of.get(key), color_system))
        return "".join(out)


def _paint_chars(row: list[Cell | None], x: int, text: str, style: str, width: int, marks: list[int]) -> int:
    """Paint `text` into `row` from column `x` character by character (wide characters, combining
    marks, what runs past the edge); note each changed column in `marks`. The column after it."""
    for ch in text:
        w = get_character_cell_size(ch)
        if w == 0:  # a combining mark joins the character before it
            if 0 < x <= width and row[x - 1] is not None:
                prev = row[x - 1]
                assert prev is not None
                row[x - 1] = (prev[0] + ch, prev[1])
                marks.append(x - 1)
            continue
        if x + w > width:
            x += w
            continue
        cell = (ch, style)
        if row[x] != cell:
            row[x] = cell
            marks.append(x)
        if w == 2:
            half = (WIDE, style)
            if row[x + 1] != half:
                row[x + 1] = half
                marks.append(x + 1)
        elif x + 1 < width and row[x + 1] is not None and row[x + 1][0] == WIDE:  # type: ignore[index]
            row[x + 1] = None  # we overwrote the left half of a wide character: its right half is gone
            marks.append(x + 1)
        x += w
    return x


def _styled(render, text: str, style: Style | None, color_system) -> str:
    if style is None:
        return text
    return render(style, text, color_system=color_system)


def _runs(xs: list[int], row: list[Cell | None]) -> list[tuple[int, int]]:
    """Changed columns as [a, b] runs, joining runs GAP cells apart or closer (all painted)."""
    runs: list[tuple[int, int]] = []
    start = end = xs[0]
    for x in xs[1:]:
        if x - end - 1 <= GAP and all(row[i] is not None for i in range(end + 1, x)):
            end = x
            continue
        runs.append((start, end))
        start = end = x
    runs.append((start, end))
    return runs

