"""A sync gives DataTable the changed cells of the rows in sight (and a screenful either side) at once,
and those of rows further away when they are drawn or read: what the table shows and returns is always
the last sync's, wherever the rows are when they change."""
from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult

from nodeconsole.screens import rendering
from nodeconsole.screens.widgets.keyed_table import Col, KeyedTable

COLS = [Col("name", "Name", 2), Col("cpu", "CPU", 1), Col("hist", "History", 0, 4, 6, keep_end=True)]


class _App(App):
    CSS = "KeyedTable { height: 12; }"

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLS, id="t")


def rows(n: int, tick: int, skip: set[int] = frozenset()):
    return [(f"vm{i:03}", (f"vm{i:03}", f"{(i * 7 + tick) % 100}", Text("▁▂▃▄▅▆▇█"[: (i + tick) % 8 + 1])))
            for i in range(n) if i not in skip]


def line_text(table: KeyedTable, y: int) -> str:
    return "".join(s.text for s in table.render_line(y))


async def test_rows_out_of_sight_show_and_return_the_last_sync():
    app = _App()
    async with app.run_test(size=(60, 20)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows(200, 0))
        await pilot.pause()
        updates: list[str] = []
        real = table.update_cell
        table.update_cell = lambda k, *a, **kw: updates.append(k) or real(k, *a, **kw)  # type: ignore[method-assign]
        for tick in (1, 2, 3):  # every row changes, three times
            table.sync(rows(200, tick))
            await pilot.pause()
        near = set(updates)
        assert near
        # only the rows near sight were given their cells at once (stock DataTable re-measures a column
        # whose cell shrank by reading the whole column, which hands every row its cells)
        assert rendering.STOCK or len(near) < 60
        # read: every row's cells are the last sync's
        want = rows(200, 3)
        assert [tuple(str(c) for c in table.get_row_at(r)) for r in range(table.row_count)] == \
            [tuple(str(c) for c in cells) for _, cells in want]
        # drawn: scrolled far down, the rows show the last sync's cells
        table.sync(rows(200, 4))
        table.scroll_to(y=150, animate=False)
        await pilot.pause()
        top = int(table.scroll_y)
        for y in range(1, 10):
            name, cpu, hist = rows(200, 4)[top + y - 1][1]
            text = line_text(table, y)
            assert name in text and f" {cpu} " in text and hist.plain in text, (y, text)


async def test_a_row_changed_out_of_sight_then_again_near_sight_gets_all_its_cells():
    app = _App()
    async with app.run_test(size=(60, 20)) as pilot:
        table = app.query_one(KeyedTable)
        base = rows(100, 0)
        table.sync(base)
        await pilot.pause()
        far = dict(base)
        far["vm090"] = ("vm090", "55", Text("▁"))  # both figures change while it is far away
        table.sync(list(far.items()))
        await pilot.pause()
        table.scroll_to(y=70, animate=False)  # near sight now, not in it: not drawn
        await pilot.pause()
        far["vm090"] = ("vm090", "56", Text("▁"))  # only its CPU changes
        table.sync(list(far.items()))
        await pilot.pause()
        table.scroll_to(y=85, animate=False)
        await pilot.pause()
        index = table.get_row_index("vm090")
        text = line_text(table, index - int(table.scroll_y) + 1)
        assert "vm090" in text and " 56 " in text and "▁" in text and "▁▂" not in text, text
        # a row gone while its cells wait is simply gone
        del far["vm095"]
        far["vm096"] = ("vm096", "1", Text("█"))
        table.scroll_to(y=0, animate=False)
        await pilot.pause()
        table.sync(list(far.items()))
        del far["vm096"]
        table.sync(list(far.items()))
        await pilot.pause()
        assert not table.has_row("vm096") and table.row_count == 98
        assert [str(table.get_row_at(r)[0]) for r in range(table.row_count)] == list(far)


async def test_after_a_sort_the_rows_in_sight_still_show_the_last_sync():
    """sort() moves the rows away from the places the syncs gave them: which rows are in sight follows
    the table, not the sync's order (the rows on screen are drawn again with their new cells)."""
    app = _App()
    async with app.run_test(size=(60, 20)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows(200, 0))
        await pilot.pause()
        table.sort("name", key=lambda name: str(name), reverse=True)  # vm199 first
        await pilot.pause()
        table.sync(rows(200, 5))
        await pilot.pause()
        want = dict(rows(200, 5))
        top = int(table.scroll_y)
        for index in range(top, top + 10):  # what the screen shows: the lines drawn since the sync
            key = table.coordinate_to_cell_key((index, 0)).row_key
            if rendering.STOCK:  # DataTable keeps no line by row: the line drawn now
                text = line_text(table, index - top + table.header_height)
            else:
                kept = table._row_lines.get(key)
                assert kept is not None, index  # drawn again after the sync (its cells changed)
                text = "".join(seg.text for seg in kept[1])
            assert f" {want[key.value][1]} " in text, (index, text)
        assert rendering.STOCK or "vm005" in table._stale  # far down after the sort: its cells wait
        table.remove_row("vm005")  # removed by hand while they wait: the table is read without it
        assert str(table.get_row_at(0)[0]) == "vm199" and table.row_count == 199
