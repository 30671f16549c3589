"""A QuietTable's lines go through a lean styles cache: for a table without border, outline, padding,
tint, opacity or hatch the line is the table's own; otherwise Textual's. Either way each line equals
what Textual's own styles cache makes of the same table (after the colour filters the app applies)."""
from __future__ import annotations

import pytest
from rich.text import Text
from textual._styles_cache import StylesCache
from textual.app import App, ComposeResult

from nodeconsole.screens.fast.table import QuietTable, _LeanStylesCache

# a test of screens/fast/: the stock mode (--stock-textual) has none of it
pytestmark = pytest.mark.fast_textual

STYLES = {
    "plain": "",
    "padded": "padding: 0 1;",
    "bordered": "border: round red;",
    "outlined": "outline: heavy blue;",
    "tinted": "tint: red 30%;",
    "faded": "opacity: 60%;",
    "text faded": "text-opacity: 50%;",
    "hatched": "hatch: cross green;",
}


class One(App):
    def __init__(self, css: str) -> None:
        self.CSS = "QuietTable { height: 9; width: 50; " + css + " }"
        super().__init__()

    def compose(self) -> ComposeResult:
        yield QuietTable(id="t", cursor_type="row", zebra_stripes=True)


def filtered(table, strips):
    background = table.background_colors[1]
    out = []
    for strip in strips:
        for f in table.app.get_line_filters():
            strip = strip.apply_filter(f, background)
        out.append([(s.text, s.style) for s in strip])
    return out


@pytest.mark.parametrize("name", list(STYLES))
async def test_lines_equal_textuals_styles_cache(name, monkeypatch):
    lean_lines = []
    real = _LeanStylesCache.render_line

    def watching(self, *a, **kw):
        lean_lines.append(self._lean)
        return real(self, *a, **kw)

    monkeypatch.setattr(_LeanStylesCache, "render_line", watching)
    app = One(STYLES[name])
    async with app.run_test(size=(60, 14)) as pilot:
        table = app.query_one(QuietTable)
        assert isinstance(table._styles_cache, _LeanStylesCache)
        table.add_column("name", key="name")
        table.add_column(Text("util", justify="right"), key="util")
        for i in range(20):
            table.add_row(f"vm-{i}", Text(f"{i * 7 % 100}%", justify="right"), key=f"r{i}")
        for step in range(4):
            await pilot.pause()
            table.update_cell(f"r{step}", "util", Text(f"{step}9%", justify="right"))
            table.move_cursor(row=step * 3)
            table.scroll_to(y=step * 2, animate=False)
            await pilot.pause()
            crop = table.region.reset_offset  # the whole widget, border and padding included
            ours = filtered(table, table.render_lines(crop))
            textuals = filtered(table, StylesCache().render_widget(table, crop))
            assert ours == textuals, (name, step)
    assert lean_lines, "the table drew no line through its cache"
    assert all(lean_lines) if name == "plain" else not any(lean_lines), name
