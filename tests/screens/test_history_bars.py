"""A VM's CPU sparkline: one bar per 5 s of polls, bars aligned for every VM, so between two bars only the
last bar changes (one cell a second on the terminal, not the whole sparkline)."""
from __future__ import annotations

from dataclasses import replace

from nodeconsole.console.collector import Collector
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.widgets.text import spark


async def test_bars_average_five_seconds_of_polls(demo_seams):
    snap = Collector(demo_seams).collect()
    name = next(v.name for v in snap.vms if v.state == "running")

    def with_cpu(pct: float):
        return replace(snap, vms=tuple(replace(v, cpu_percent=pct) for v in snap.vms))

    app = NodeConsoleApp(demo_seams, interval=1.0)
    app.paused = True  # no poll of its own: the polls are fed by hand below
    async with app.run_test(size=(80, 24)):
        lines = []
        for pct in [100, 100, 100, 100, 100, 300, 300, 300, 300, 300, 50]:
            app._apply(with_cpu(pct))
            lines.append(spark(app.host_view().history[name]))
        assert app.host_view().history[name] == (100.0, 300.0, 50.0)
        # within a bar only its own cell changes; a new bar appends one
        assert [len(x) for x in lines] == [1] * 5 + [2] * 5 + [3]
        assert all(a[:-1] == b[:-1] for a, b in zip(lines[5:9], lines[6:10]))
