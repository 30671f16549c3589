"""Host failures (kind host) in the console: a D3cold failure of the GPU train-a holds and a refused power
change on its companion function show in the Events view (9) with their short name, meaning and action,
in the GPU's details and panel, and as the Overview's problem naming the VM."""
from __future__ import annotations

from nodeconsole.console.cli import main
from nodeconsole.console.collector import Collector
from nodeconsole.console.host_failures import D3COLD, FAILURES, POWER_REFUSED
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.events import EventsScreen, event_rows
from nodeconsole.screens.gpus import event_lines
from nodeconsole.screens.widgets.details import gpu_details
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

GPU, AUDIO = "0000:19:00.0", "0000:19:00.1"


def _rows(screen) -> list[list[str]]:
    table = screen.query_one("#events-table", KeyedTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_host_failures_reach_every_view(demo_seams, capsys):
    assert main(["demo", "inject", "host", GPU, "d3cold"]) == 0
    assert main(["demo", "inject", "host", AUDIO, "power-refused"]) == 0
    capsys.readouterr()
    collector = Collector(demo_seams)
    snap = collector.collect()
    g = snap.gpu(GPU)
    assert [(e.gpu, e.failure) for e in g.events] == [(GPU, D3COLD), (AUDIO, POWER_REFUSED)]
    assert g.health.state == "unhealthy" and g.health.reasons[0].startswith(f"host failure {D3COLD} on {GPU}")
    problem = {p.subject: p for p in snap.problems}[GPU]
    assert "host failure D3cold" in problem.message and "train-a" in problem.message
    assert problem.fix.startswith("VM train-a's guest drives this GPU") and "then: reboot node" in problem.fix

    rows = [cells for _, cells in event_rows(snap, snap.kernel_events, [], ())]
    assert [r[1] for r in rows] == ["host power refused", "host D3cold"]  # newest first
    assert str(rows[1][5]) == FAILURES[D3COLD].meaning and rows[1][6] == FAILURES[D3COLD].action
    assert str(rows[0][3]) == "train-a" and rows[0][4] == "warning"
    details = gpu_details(snap, g, snap.kernel_events)  # the companion function's event is the GPU's too
    assert "Last events (2" in details and "host D3cold fatal  VM train-a" in details
    assert "host power refused warning" in details
    assert [str(t).split("  ")[2] for t in event_lines(g)[1:]] == ["host power refused warning", "host D3cold fatal"]
    collector.close()

    app = NodeConsoleApp(demo_seams, interval=60)
    async with app.run_test(size=(160, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1, tries=200)
        await pilot.press("9")
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        assert await wait_until(pilot, lambda: len(_rows(screen)) >= 2)
        top = _rows(screen)[1]
        assert top[1:5] == ["host D3cold", f"{g.index} {GPU}", "train-a", "fatal"]
        assert top[5] == FAILURES[D3COLD].meaning
