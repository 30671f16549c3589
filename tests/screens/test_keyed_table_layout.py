"""KeyedTable's column layout on its own (no host): widths follow the widest cell, the lowest-priority
column gives way first when the row is wider than the table, a quiet tick lays nothing out again, the
widest row's going narrows its column, and a resize fits the columns to the new width."""
from __future__ import annotations

from textual.app import App, ComposeResult

from nodeconsole.screens import rendering
from nodeconsole.screens.widgets.keyed_table import Col, KeyedTable

COLS = [Col("name", "Name", 2), Col("cpu", "CPU", 1), Col("note", "Note", 0)]


class _App(App):
    def compose(self) -> ComposeResult:
        yield KeyedTable(COLS, id="t")


def _rows(cpu: str = "1", note: str = "fine", extra: bool = False):
    rows = [("a", ("alpha", cpu, note)), ("b", ("bravo-long-name", "22", "ok"))]
    if extra:
        rows.append(("c", ("charlie-has-the-longest-name", "3", "x")))
    return rows


async def test_columns_follow_their_cells_and_the_width():
    app = _App()
    async with app.run_test(size=(60, 10)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(_rows())
        await pilot.pause()
        assert table.column_widths() == {"name": 15, "cpu": 3, "note": 4}

        count = table._update_count
        table.sync(_rows(cpu="7"))  # a figure changed, no wider: nothing laid out again
        await pilot.pause()
        assert table.column_widths()["cpu"] == 3
        assert rendering.STOCK or table._update_count == count  # stock DataTable: every update counts

        table.sync(_rows(extra=True))  # a wider name: the column grows
        await pilot.pause()
        assert table.column_widths()["name"] == len("charlie-has-the-longest-name")
        table.sync(_rows())  # …and narrows when that row goes
        await pilot.pause()
        assert table.column_widths()["name"] == 15

        table.sync(_rows(note="a note far longer than the table has room for, by a lot"))
        await pilot.pause()
        widths = table.column_widths()
        assert widths["name"] == 15 and widths["cpu"] == 3  # the note (lowest priority) gives way
        assert sum(widths.values()) == table.room()
        line = table.render_line(1).text
        assert "alpha" in line and line.rstrip().endswith("…")
        assert table.is_cut("a") and not table.is_cut("b")
        assert dict(table.full_row("a"))["Note"].endswith("by a lot")  # the whole text, for details

        await pilot.resize_terminal(24, 10)  # narrower still: the name gives way last, after the others
        await pilot.pause()
        widths = table.column_widths()
        assert widths == {"name": 24 - 6 - 4 - 3, "cpu": 3, "note": 4}  # 6: each column's padding
        assert sum(widths.values()) == table.room()
        await pilot.resize_terminal(120, 10)  # wide again: every cell whole
        await pilot.pause()
        assert not table.is_cut("a") and table.column_widths()["name"] == 15


class _Spark(App):
    def compose(self) -> ComposeResult:
        yield KeyedTable([Col("name", "Name", 2), Col("hist", "Hist", 0, 4, keep_end=True)], id="t")


async def test_a_keep_end_column_narrower_than_its_cells_shows_their_ends():
    """A sparkline squeezed by a narrow terminal shows its newest bars, not its oldest; wide again, all."""
    app = _Spark()
    async with app.run_test(size=(30, 6)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync([("a", ("a-name-long-enough-to-squeeze", "▁▂▃▄▅▆▇█"))])
        await pilot.pause()
        assert table.column_widths()["hist"] == 4
        line = table.render_line(1).text
        assert "▅▆▇█" in line and "▃" not in line
        table.sync([("a", ("a-name-long-enough-to-squeeze", "▁▂▃▄▅▆▇▁"))])  # the bar filling now moved
        await pilot.pause()
        line = table.render_line(1).text
        assert "▅▆▇▁" in line and "▃" not in line
        assert dict(table.full_row("a"))["Hist"] == "▁▂▃▄▅▆▇▁"  # the whole of it, for details
        await pilot.resize_terminal(60, 6)
        await pilot.pause()
        assert "▁▂▃▄▅▆▇▁" in table.render_line(1).text
