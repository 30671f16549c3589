"""Each VM's sparkline, drawn again only when its history changed: a history moves once a bar, and on a
host of hundreds of VMs most of them are idle, so a poll redraws a few sparklines, not every one."""
from __future__ import annotations

from collections.abc import Sequence

from nodeconsole.screens.widgets.text import BLOCKS, SPARK_FLOOR, SPARK_WIDTH, spark


class Sparks:
    def __init__(self) -> None:
        self._last: dict[str, tuple[tuple, str]] = {}

    def __call__(self, name: str, values: Sequence[float | None]) -> str:
        values = values if isinstance(values, tuple) else tuple(values)
        seen = self._last.get(name)
        if seen is not None:
            old, line = seen
            if old == values:
                return line
            last = values[-1] if values else None
            if (line and last is not None and old[-1] is not None and len(old) == len(values)
                    and last <= SPARK_FLOOR and values[:-1] == old[:-1] and _floor_scaled(line)):
                # between two bars only the bar filling now moves: its block alone is worked out again
                # (the scale is the floor's while every bar in sight is below it)
                line = line[:-1] + BLOCKS[min(8, max(0, round(last / SPARK_FLOOR * 8)))]
                self._last[name] = (values, line)
                return line
            if (line and last is not None and len(old) == len(values) and values[:-1] == old[:-1]
                    and len(line) == min(len(values), SPARK_WIDTH) and None not in values and None not in old):
                # a busy VM above the floor: while the highest bar in sight stays the highest, the
                # scale is the same and again only the last block moves
                top = max(max(values[-SPARK_WIDTH:]), SPARK_FLOOR)
                if top == max(max(old[-SPARK_WIDTH:]), SPARK_FLOOR):
                    line = line[:-1] + BLOCKS[min(8, max(0, round(last / top * 8)))]
                    self._last[name] = (values, line)
                    return line
            if line and last is not None:
                shifted = _new_bar(old, values, line, last)
                if shifted is not None:
                    self._last[name] = (values, shifted)
                    return shifted
        line = spark(values)
        self._last[name] = (values, line)
        return line

    def keep(self, count: int) -> None:
        """Forget every line once far more are held than the `count` VMs there are now (VMs gone)."""
        if len(self._last) > 2 * count + 64:
            self._last.clear()


def _new_bar(old: tuple, values: tuple, line: str, last: float) -> str | None:
    """A new bar started (a value appended, the oldest one dropped once the history is full): the line in
    sight moves left by a block and gains the new one, when the bars in sight before and after have
    the same scale; None when it must be drawn anew."""
    was, now = old[-SPARK_WIDTH:], values[-SPARK_WIDTH:]
    if len(now) == len(was):
        drop = 1
    elif len(now) == len(was) + 1:
        drop = 0
    else:
        return None
    if len(line) != len(was) or now[:-1] != was[drop:] or None in was or None in now:
        return None
    top = max(max(now), SPARK_FLOOR)
    if top != max(max(was), SPARK_FLOOR):
        return None
    return line[drop:] + BLOCKS[min(8, max(0, round(last / top * 8)))]


def _floor_scaled(line: str) -> bool:
    """Whether a sparkline was drawn on the floor's scale: no bar in it is full, or a full one is exactly
    the floor (spark() scales to the highest bar when one is above SPARK_FLOOR)."""
    return BLOCKS[8] not in line
