"""QuietTable repaints only the rows whose cells changed, and shows exactly what a plain DataTable shows
after the same updates (cursor moves, scrolling, a column that must grow, rows added and removed)."""
from __future__ import annotations

import random

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from nodeconsole.screens.widgets.quiet_table import QuietTable

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


async def test_same_picture_as_datatable_after_random_updates():
    rng = random.Random(3)
    app = Pair()
    async with app.run_test(size=(70, 20)) as pilot:
        plain, quiet = app.tables()
        for t in (plain, quiet):
            for c in COLS:
                t.add_column(c, key=c)
            for i in range(15):
                t.add_row(f"vm-{i}", f"{i}%", "1G", "host", key=f"r{i}")
        app.set_focus(None)  # neither has focus: the same pseudo-classes, the same styles
        await pilot.pause()
        for step in range(120):
            op = rng.random()
            if op < 0.7:
                key, col = f"r{rng.randrange(15)}", rng.choice(COLS[1:])
                value = Text(f"{rng.randrange(100)}%" if col == "util" else rng.choice(["a", "b", "c"]))
                wide = rng.random() < 0.05
                if wide:
                    value = Text("x" * rng.randint(5, 12))
                for t in (plain, quiet):
                    t.update_cell(key, col, value, update_width=wide)
            elif op < 0.8:
                for t in (plain, quiet):
                    t.move_cursor(row=step % 15)
            elif op < 0.85:  # focus moves: both render under the other pseudo-class state, then back
                for t in (plain, quiet):
                    t.focus()
                    await pilot.pause()
                    app.set_focus(None)
            else:
                y = rng.randrange(8)
                for t in (plain, quiet):
                    t.scroll_to(y=y, animate=False)
            await pilot.pause()
            assert lines(quiet) == lines(plain), f"step {step}"
        # the counter every cache hangs on moved only for the updates that had to grow a column
        assert quiet._update_count < plain._update_count


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
        real = quiet._render_line_in_row

        def counting(row_key, *a, **kw):
            rendered.append(quiet._row_locations.get(row_key))
            return real(row_key, *a, **kw)

        quiet._render_line_in_row = counting  # type: ignore[method-assign]
        quiet.update_cell("r3", "util", Text("99%"))
        await pilot.pause()
        assert set(rendered) == {3}, rendered
        assert "99%" in "".join(s.text for s in quiet.render_line(4))


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
