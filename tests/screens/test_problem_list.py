"""The Overview's problem list keeps its highlight on the problem, not on a position, when problems come
before it (a kernel event's problem is put first); unfocused, `f` means the first problem."""
from __future__ import annotations

from textual.app import App, ComposeResult

from nodeconsole.console.model import Problem
from nodeconsole.screens.overview import ProblemList

A = Problem("warning", "0000:bb:00.0", "GPU 7: PCIe link x8 of x16")
B = Problem("warning", "train-b", "VM train-b: vCPUs across nodes")
XID = Problem("error", "0000:18:00.0", "GPU 0: Xid 79, fallen off the bus")


class One(App):
    def compose(self) -> ComposeResult:
        yield ProblemList(id="problems")


async def test_the_highlight_follows_its_problem():
    app = One()
    async with app.run_test(size=(80, 12)) as pilot:
        plist = app.query_one(ProblemList)
        plist.show((A, B))
        plist.focus()
        await pilot.press("j")
        assert plist.selected() == 1
        plist.show((XID, A, B))  # a new problem comes first
        assert plist.problems[plist.selected()] == B
        plist.show((XID, A))  # the highlighted one goes: the same place, kept in range
        assert plist.selected() == 1
        app.set_focus(None)
        await pilot.pause()
        assert plist.selected() == 0  # not focused: no highlight, the first problem
