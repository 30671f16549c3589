"""QuietTable repaints only the rows whose cells changed, and shows exactly what a plain DataTable shows
after the same updates (cursor moves, hover, focus, scrolling, a column that must grow, rows added and
removed), with its own drawing of Text cells and DataTable's for the rest."""
from __future__ import annotations

import random

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from nodeconsole.screens.fast import table as quiet_table
from nodeconsole.screens.fast.table import QuietTable

# a test of screens/fast/: the stock mode (--stock-textual) has none of it
pytestmark = pytest.mark.fast_textual

COLS = ["name", "util", "mem", "owner"]


class Pair(App):
    CSS = "DataTable { height: 8; width: 60; }"

    def compose(self) -> ComposeResult:
        yield DataTable(id="plain", cursor_type="row")
        yield QuietTable(id="quiet", cursor_type="row")

    def tables(self) -> tuple[DataTable, DataTable]:
        return self.query_one("#plain", DataTable), self.query_one("#quiet", DataTable)


def lines(t: DataTable) -> list[list[tuple[str, object]]]:
    return [[(s.text, s.style) for s in t.render_line(y)] for y in range(t.size.height)]


def random_value(rng: random.Random, wide: bool = False):
    """What a console cell holds: Text with its own justify, style and spans, double-width and combining
    characters; now and then a str (DataTable reads it as markup) or a Text with a tab (drawn by
    DataTable's own path)."""
    if rng.random() < 0.1:
        return rng.choice(["[b]7[/b]%", "plain", "", Text("tab\tbed")])
    plain = "".join(rng.choice("ab01 %漢é\u0301") for _ in range(rng.randint(0, 12 if wide else 4)))
    text = Text(plain, style=rng.choice(["", "bold", "red"]), justify=rng.choice([None, "right", "center", "left"]))
    if plain and rng.random() < 0.5:
        start = rng.randrange(len(plain))
        text.stylize(rng.choice(["green", "reverse", "italic"]), start, start + rng.randint(1, 3))
    if rng.random() < 0.7:  # as KeyedTable shows its cells
        text.no_wrap, text.overflow = True, "ellipsis"
    return text


@pytest.mark.parametrize("cursor_type,zebra,fixed", [("row", False, 0), ("cell", True, 1), ("column", False, 1)])
async def test_same_picture_as_datatable_after_random_updates(cursor_type, zebra, fixed, monkeypatch):
    """Every frame equals a plain DataTable's: cursor of each kind, hover, zebra stripes, a fixed column,
    focus and blur, scrolling down and sideways, a table narrower than its columns, columns narrower than
    their cells (cut), a column that must grow, rows added and removed."""
    drawn = []
    real_line = quiet_table.text_cell_line

    def counting(*a, **kw):
        line = real_line(*a, **kw)
        drawn.append(line is not None)
        return line

    monkeypatch.setattr(quiet_table, "text_cell_line", counting)
    rng = random.Random(3)
    app = Pair()
    async with app.run_test(size=(70, 20)) as pilot:
        plain, quiet = app.tables()
        for t in (plain, quiet):
            t.cursor_type, t.zebra_stripes, t.fixed_columns = cursor_type, zebra, fixed
            for c in COLS:
                t.add_column(Text(c.upper(), justify="right") if c == "util" else c, key=c,
                             width=5 if c == "owner" else None)
        rows = []
        for i in range(15):
            values = (f"vm-{i}", random_value(rng), "1G", random_value(rng, wide=True))
            rows.append(f"r{i}")
            for t in (plain, quiet):
                t.add_row(*values, key=f"r{i}")
        app.set_focus(None)  # neither has focus: the same pseudo-classes, the same styles
        await pilot.pause()
        for step in range(60):
            op = rng.random()
            if op < 0.6:
                key, col = rng.choice(rows), rng.choice(COLS[1:])
                wide = rng.random() < 0.1
                value = random_value(rng, wide=wide or col == "owner")
                for t in (plain, quiet):
                    t.update_cell(key, col, value, update_width=wide)
            elif op < 0.68:
                row, column = rng.randrange(len(rows)), rng.randrange(len(COLS))
                for t in (plain, quiet):
                    t.move_cursor(row=row, column=column)
            elif op < 0.74:
                row, column = rng.randrange(len(rows)), rng.randrange(len(COLS))
                for t in (plain, quiet):
                    t._show_hover_cursor = True
                    t.hover_coordinate = Coordinate(row, column)
            elif op < 0.8:  # each in turn has focus (the :focus styles), then neither
                seen = []
                for t in (plain, quiet):
                    t.focus()
                    await pilot.pause()
                    seen.append(lines(t))
                app.set_focus(None)
                assert seen[1] == seen[0], f"step {step}: focused"
            elif op < 0.86:
                key = f"n{step}"
                values = (f"new-{step}", random_value(rng), "2G", random_value(rng))
                rows.append(key)
                for t in (plain, quiet):
                    t.add_row(*values, key=key)
            elif op < 0.9 and len(rows) > 5:
                key = rows.pop(rng.randrange(len(rows)))
                for t in (plain, quiet):
                    t.remove_row(key)
            elif op < 0.95:
                y = rng.randrange(8)
                for t in (plain, quiet):
                    t.scroll_to(y=y, animate=False)
            else:  # narrower than its columns now and then, scrolled sideways: lines cropped and padded
                width, x = rng.choice([18, 30, 60]), rng.randrange(12)
                for t in (plain, quiet):
                    t.styles.width = width
                await pilot.pause()
                for t in (plain, quiet):
                    t.scroll_to(x=x, animate=False)
            await pilot.pause()
            assert lines(quiet) == lines(plain), f"step {step}"
        # the counter every cache hangs on moved only for the updates that had to grow a column
        assert quiet._update_count < plain._update_count
    assert drawn.count(True) > 100 and False in drawn  # both ways of drawing a cell were compared


async def test_one_changed_cell_repaints_one_row():
    app = Pair()
    async with app.run_test(size=(70, 20)) as pilot:
        _, quiet = app.tables()
        for c in COLS:
            quiet.add_column(c, key=c)
        for i in range(6):
            quiet.add_row(f"vm-{i}", "1%", "1G", "host", key=f"r{i}")
        await pilot.pause()
        rendered: list[int] = []
        real = quiet._row_segments

        def counting(row_key, *a, **kw):
            rendered.append(quiet._row_locations.get(row_key))
            return real(row_key, *a, **kw)

        quiet._row_segments = counting  # type: ignore[method-assign]
        quiet.update_cell("r3", "util", Text("99%"))
        await pilot.pause()
        assert set(rendered) == {3}, rendered
        assert "99%" in "".join(s.text for s in quiet.render_line(4))

        # cells changed in a repaint_after() block: each row repainted once, at the end, in one refresh
        repainted: list[int] = []
        real_repaint = quiet._repaint_rows
        quiet._repaint_rows = lambda indices: repainted.extend(indices) or real_repaint(indices)  # type: ignore[method-assign]
        refreshes: list[tuple] = []
        real_refresh = quiet.refresh
        quiet.refresh = lambda *regions, **kw: refreshes.append(regions) or real_refresh(*regions, **kw)  # type: ignore[method-assign]
        with quiet.repaint_after():
            quiet.update_cell("r1", "util", Text("42%"))
            quiet.update_cell("r1", "mem", Text("7G"))
            quiet.update_cell("r5", "util", Text("5%"))
            with quiet.repaint_after():  # nested: the outer block repaints
                quiet.update_cell("r5", "mem", Text("9G"))
            assert repainted == []
        assert repainted == [1, 5]
        assert [len(r) for r in refreshes] == [2]  # both rows' lines in one refresh
        rendered.clear()
        await pilot.pause()
        assert set(rendered) == {1, 5}, rendered
        line = "".join(s.text for s in quiet.render_line(2))
        assert "42%" in line and "7G" in line


async def test_a_static_whose_size_cannot_change_is_repainted_without_a_layout():
    from textual.widgets import Static

    from nodeconsole.screens.widgets.quiet_static import update_static

    class One(App):
        def compose(self) -> ComposeResult:
            yield Static("node0 cpu 10%", id="line")
            yield Static("x", id="auto", classes="auto")

        CSS = "#auto { width: auto; }"

    app = One()
    async with app.run_test(size=(40, 10)) as pilot:
        line, auto = app.query_one("#line", Static), app.query_one("#auto", Static)
        await pilot.pause()
        layouts: list[str] = []
        real = app.screen._refresh_layout

        def counting(*a, **kw):
            layouts.append("layout")
            return real(*a, **kw)

        app.screen._refresh_layout = counting  # type: ignore[method-assign]
        update_static(line, "node0 cpu 37%")
        await pilot.pause()
        assert layouts == [] and "37%" in str(line.render())
        update_static(line, "two\nlines")  # taller: laid out again
        await pilot.pause()
        assert layouts and line.size.height == 2
        layouts.clear()
        update_static(auto, "wider text")  # width auto: laid out again
        await pilot.pause()
        assert layouts and auto.size.width == len("wider text")


async def test_a_theme_change_recolours_the_kept_rows():
    """The rows and lines QuietTable keeps carry the component styles (the cursor's, the header's): a
    theme that changes only those still shows, as on a plain DataTable."""
    from textual.theme import Theme

    app = Pair()
    async with app.run_test(size=(70, 20)) as pilot:
        for name, primary in (("red", "#ff0000"), ("green", "#00ff00")):
            app.register_theme(Theme(name=name, primary=primary, surface="#101010", foreground="#e0e0e0",
                                     background="#000000", dark=True))
        app.theme = "red"
        for t in app.tables():
            for c in COLS:
                t.add_column(c, key=c)
            for i in range(4):
                t.add_row(f"vm-{i}", "1%", "1G", "host", key=f"r{i}")
        app.set_focus(None)  # neither has focus: the same pseudo-classes, the same styles
        await pilot.pause()
        plain, quiet = app.tables()
        assert lines(quiet) == lines(plain)
        app.theme = "green"
        await pilot.pause()
        assert lines(quiet) == lines(plain)


def _fill(tables, n: int, row) -> None:
    """The columns and `n` rows (`row(i)`: its cells, keyed r0, r1…) in each table."""
    for t in tables:
        for c in COLS:
            t.add_column(c, key=c)
        for i in range(n):
            t.add_row(*row(i), key=f"r{i}")


async def test_a_table_narrower_than_its_columns_scrolled_sideways():
    """A row's line is cropped at the scroll offset and cut at the table's width exactly as DataTable
    does (the kept cells joined are longer than the table), and padded when the table is wider."""
    app = Pair()
    async with app.run_test(size=(70, 20)) as pilot:
        plain, quiet = app.tables()
        _fill((plain, quiet), 12, lambda i: (f"vm-{i}-long-name", Text("1%" * 5, justify="right"), "1G",
                                             Text("host 漢字")))
        for t in (plain, quiet):
            t.move_cursor(row=2)
        app.set_focus(None)
        await pilot.pause()
        assert lines(quiet) == lines(plain)
        for width in (18, 45, 60):
            for t in (plain, quiet):
                t.styles.width = width
            await pilot.pause()
            for x in (0, 1, 5, 13, 40):
                for t in (plain, quiet):
                    t.scroll_to(x=x, animate=False)
                await pilot.pause()
                for t in (plain, quiet):
                    t.update_cell("r2", "util", Text(f"{x}%", justify="right"))
                await pilot.pause()
                assert lines(quiet) == lines(plain), (width, x)


async def test_a_changed_setting_redraws_the_kept_lines():
    """Zebra stripes, cell padding, the cursor shown or not, the header: a setting DataTable redraws for
    leaves no kept line or cell of the old look."""
    app = Pair()
    async with app.run_test(size=(70, 20)) as pilot:
        plain, quiet = app.tables()
        _fill((plain, quiet), 6, lambda i: (f"vm-{i}", Text(f"{i}%", justify="right"), "1G", Text("host")))
        app.set_focus(None)
        await pilot.pause()
        assert lines(quiet) == lines(plain)
        for setting, value in (("zebra_stripes", True), ("cell_padding", 2), ("show_cursor", False),
                               ("show_header", False), ("zebra_stripes", False), ("cell_padding", 0)):
            for t in (plain, quiet):
                setattr(t, setting, value)
            await pilot.pause()
            assert lines(quiet) == lines(plain), (setting, value)
