"""How screens show a GPU's drain (console/drains.py): a mark in the owner cell of every GPU table, and a
line in the GPU panel. The reason, the user and the time are host text: plain Text, visible escapes."""
from __future__ import annotations

from rich.text import Text

from nodeconsole.console.hosttext import LINE_MAX, show
from nodeconsole.console.model import Gpu
from nodeconsole.screens.widgets.gpu_text import owner_text

MARK = "drained:"  # before the owner in the tables' owner column


def owner_cell(g: Gpu) -> str:
    """The owner column's text: "drained:vfio→train-a" for a drained GPU, the owner alone otherwise."""
    return f"{MARK}{owner_text(g)}" if g.drain is not None else owner_text(g)


def drain_text(g: Gpu) -> Text | None:
    """"drained: RMA ticket 42 (alice, 2026-12-02T09:15:03Z) — `D` lifts it"; None when not drained."""
    if g.drain is None:
        return None
    t = Text()
    t.append("drained", style="bold red")
    t.append(f": {show(g.drain.reason, LINE_MAX)} ({show(g.drain.who)}, {show(g.drain.when)})"
             " — no new work; D undrains")
    return t
