"""KeyedTable.sync makes the table hold exactly the rows it is given, in their order: rows added, changed,
removed (from the middle, several at once), reordered (the cursor stays on its key), and filtered."""
from __future__ import annotations

import random

from textual.app import App, ComposeResult

from nodeconsole.screens.widgets.keyed_table import Col, KeyedTable


class _App(App):
    def compose(self) -> ComposeResult:
        yield KeyedTable([Col("name", "Name", 2), Col("cpu", "CPU", 1)], id="t")


def shown(table: KeyedTable) -> list[tuple[str, str, str]]:
    return [(str(table.coordinate_to_cell_key((r, 0)).row_key.value),
             *(str(c) for c in table.get_row_at(r))) for r in range(table.row_count)]


async def test_the_table_holds_exactly_the_rows_given():
    rng = random.Random(11)
    app = _App()
    async with app.run_test(size=(50, 30)) as pilot:
        table = app.query_one(KeyedTable)
        keys = [f"vm{i}" for i in range(12)]
        for step in range(40):
            op = rng.random()
            if op < 0.2 and len(keys) > 3:
                for k in rng.sample(keys, rng.randint(1, 3)):
                    keys.remove(k)
            elif op < 0.35:
                keys.insert(rng.randrange(len(keys) + 1), f"new{step}")
            elif op < 0.45:
                rng.shuffle(keys)
            table.filter_text = "7" if op > 0.9 else ""
            cursor = table.selected_key()
            rows = [(k, (k, str(rng.randrange(3)))) for k in keys]
            table.sync(rows)
            await pilot.pause()
            want = [(k, *cells) for k, cells in rows if not table.filter_text or "7" in "".join(cells)]
            assert shown(table) == want, step
            if cursor in [w[0] for w in want] and op >= 0.2:
                assert table.selected_key() == cursor, step  # reordered or changed: the cursor keeps its row
            if step == 10:
                table.move_cursor(row=4)
