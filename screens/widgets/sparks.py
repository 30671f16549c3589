"""Each VM's sparkline, drawn again only when its history changed: a history moves once a bar, and on a
host of hundreds of VMs most of them are idle, so a poll redraws a few sparklines, not every one."""
from __future__ import annotations

from collections.abc import Sequence

from nodeconsole.screens.widgets.text import spark


class Sparks:
    def __init__(self) -> None:
        self._last: dict[str, tuple[tuple, str]] = {}

    def __call__(self, name: str, values: Sequence[float | None]) -> str:
        seen = self._last.get(name)
        if seen is not None and seen[0] == values:
            return seen[1]
        line = spark(values)
        self._last[name] = (values if isinstance(values, tuple) else tuple(values), line)
        return line

    def keep(self, count: int) -> None:
        """Forget every line once far more are held than the `count` VMs there are now (VMs gone)."""
        if len(self._last) > 2 * count + 64:
            self._last.clear()
