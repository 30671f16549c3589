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


def test_bars_are_the_same_tuple_while_unchanged():
    """A VM whose figure holds hands the screens the very same history (recognised at once by the
    sparkline and the table); any change, and each new bar, makes a new one with the right means."""
    from nodeconsole.screens.poller import Bars

    bars = Bars()
    bars.add(None, True)
    assert bars.values() == (None,)
    bars.add(100.00001, False)
    first = bars.values()
    assert first == (100.0,)
    bars.add(99.99999, False)  # the mean rounds to the same tenth
    assert bars.values() is first
    bars.add(40.0, False)
    assert bars.values() == (80.0,)
    bars.add(50.0, True)  # a new bar
    assert bars.values() == (80.0, 50.0)
    same = bars.values()
    bars.add(50.0, False)
    assert bars.values() is same


def test_a_full_history_shifts_even_when_the_new_bar_equals_the_last():
    """Once 30 bars are kept, a new bar drops the oldest: the history moves on even when the new bar's
    mean is the previous one's (a VM busy for a while, then shut off, ends with no bars in sight)."""
    from nodeconsole.screens.poller import HISTORY, Bars

    bars = Bars()
    for i in range(HISTORY + 3):
        bars.add(50.0 if i < HISTORY else None, True)
    assert bars.values() == (*(50.0,) * (HISTORY - 3), None, None, None)
    for _ in range(HISTORY):
        bars.add(None, True)
    assert bars.values() == (None,) * HISTORY
    assert spark(bars.values()) == ""
