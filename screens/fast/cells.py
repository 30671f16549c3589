"""The cell-level parts of the fast table (table.py): a one-line Text cell drawn without rich's
pipeline, DataTable's cell render cache held by cell, and a styles cache that hands a plain table's
lines over as they are. Part of screens/fast/ (Textual's private `_styles_cache` is used here).
"""
from __future__ import annotations

from rich.containers import Lines
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._styles_cache import StylesCache
from textual.strip import Strip
from textual.widgets.data_table import ColumnKey, RowKey

_NULL = Style.null()
_NEWLINE = Text("\n")


def text_cell_line(console, cell: Text, width: int, padding: int, pre: Style, post: Style) -> list[Segment] | None:
    """The line of segments `console.render_lines(Styled(Padding(cell, (0, padding)), pre, post), options)`
    gives for a one-line `cell` at `width` with no_wrap (DataTable's rendering of a cell of a one-line
    row), or None when the cell needs rich's pipeline (a newline or tab in it, wrapping asked for,
    overflow "ignore", an unusual end, no room).

    The steps are rich's: Text.wrap without wrapping (justify, then truncate), Text.join's line (the
    text's own style a span over it), Text.render, the padding to the content width, Padding's side
    cells, then Styled's `pre + style (+ post)` on every segment."""
    inner = width - 2 * padding
    plain = cell.plain
    if inner < 1 or cell.no_wrap is False or cell.end not in ("\n", "") or "\n" in plain or "\t" in plain:
        return None
    justify = cell.justify or "default"  # the app's console options set neither justify nor overflow
    overflow = cell.overflow or "fold"
    if overflow == "ignore":
        return None
    line = cell
    if justify not in ("default", "full") or cell.cell_len > inner:  # "full" leaves a text's last line alone
        line = cell.copy()
        if justify != "default":
            Lines([line]).justify(console, inner, justify=justify, overflow=overflow)
        line.truncate(inner, overflow=overflow)
    joined = _NEWLINE.join([line])
    shown = list(joined.render(console))
    used = joined.cell_len
    if used > inner:
        return None
    if used < inner:
        shown.append(Segment(" " * (inner - used), _NULL))
    if padding:
        side = Segment(" " * padding, _NULL)
        shown = [side, *shown, side]
    if pre:
        shown = [Segment(text, pre + style) for text, style, _ in shown]
    if post:
        shown = [Segment(text, style + post if style else post) for text, style, _ in shown]
    return shown


def _kept_cell(line: list[Segment]) -> tuple[list[Segment], int, bool]:
    """A cell's line as a row keeps it: simplified, its cell length, and whether it is free of control
    segments (only then may the kept cells of a line be joined without simplifying the line again)."""
    return list(Segment.simplify(line)), Segment.get_line_length(line), not any(s.control for s in line)


class _CellRenders:
    """DataTable's cell render cache, held by cell so that one cell's renders are forgotten in one step.
    A key is DataTable's: (row key, column key, base style, cursor, hover, show hover, update count,
    pseudo-class state). It holds the renders of one update count: the first key of a new count starts
    it afresh (every older key is unreachable)."""

    __slots__ = ("_cells", "_count")

    def __init__(self) -> None:
        self._cells: dict[tuple, dict[tuple, object]] = {}
        self._count: object = None

    def __contains__(self, key: tuple) -> bool:
        renders = self._cells.get((key[0], key[1]))
        return renders is not None and key in renders

    def __getitem__(self, key: tuple):
        return self._cells[(key[0], key[1])][key]

    def __setitem__(self, key: tuple, lines) -> None:
        if key[6] != self._count:
            self._cells.clear()
            self._count = key[6]
        self._cells.setdefault((key[0], key[1]), {})[key] = lines

    def __len__(self) -> int:
        return sum(map(len, self._cells.values()))

    def clear(self) -> None:
        self._cells.clear()

    def discard(self, key: tuple) -> None:
        renders = self._cells.get((key[0], key[1]))
        if renders is not None:
            renders.pop(key, None)

    def forget(self, row_key: RowKey, column_key: ColumnKey) -> None:
        self._cells.pop((row_key, column_key), None)


class _LeanStylesCache(StylesCache):
    """Textual's per-widget line cache, for a table drawn without border, outline, padding, tint,
    opacity, text opacity or hatch (every table of the console): a line is then the table's own line
    as it is. Textual's way works out ~10 things a line (the border and outline edges, the inner and
    outer styles, two closures, a copy of the line) to find it has nothing to add; the copy also made
    every line new to the colour filter after it, which keeps its result on the line. A table styled
    with any of those is drawn Textual's way."""

    _lean = False
    _inner: Style = _NULL

    def render(self, styles, size, base_background, background, render_content_line, filters,  # type: ignore[override]
               border_title, border_subtitle, content_size=None, padding=None, crop=None, opacity=1.0, **kw):
        spacing = styles.padding if padding is None else padding
        self._lean = lean = (
            opacity == 1.0 and (content_size is None or content_size == size) and not any(spacing)
            and not any(edge for edge, _ in styles.border) and not any(edge for edge, _ in styles.outline)
            and not styles.tint.a and styles.text_opacity == 1.0
            and not (styles.has_rule("hatch") and styles.hatch != "none"))
        if lean:
            self._inner = self.get_inner_outer(base_background, background)[0].rich_style
        return super().render(styles, size, base_background, background, render_content_line, filters,
                              border_title, border_subtitle, content_size=content_size, padding=padding,
                              crop=crop, opacity=opacity, **kw)

    def render_line(self, styles, y, size, content_size, padding, base_background, background,
                    render_content_line, border_title, border_subtitle, opacity, ansi_theme, native_ansi) -> Strip:
        if not self._lean:
            return super().render_line(styles, y, size, content_size, padding, base_background, background,
                                       render_content_line, border_title, border_subtitle, opacity, ansi_theme,
                                       native_ansi)
        if y < size.height:
            return render_content_line(y).adjust_cell_length(size.width, self._inner)
        return Strip.blank(size.width, self._inner)
