"""Small text renderings shared by screens: sparklines, bars, N/A-aware numbers, host text.

Host text (names, drivers, messages) is rendered as plain `Text` built through console/hosttext.py:
never as a markup string, never with raw control characters."""
from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text

from nodeconsole.console.hosttext import CELL_MAX, lines, show, visible
from nodeconsole.console.model import format_metric

BLOCKS = " ▁▂▃▄▅▆▇█"


SPARK_WIDTH = 12  # bars a sparkline shows (the newest); its table column is this wide from the start
SPARK_FLOOR = 100.0  # percent of one CPU: a full block is at least one busy CPU


def spark(values: Iterable[float | None], width: int = SPARK_WIDTH, top: float | None = None) -> str:
    vals = [v for v in values if v is not None][-width:]
    if not vals:
        return ""
    hi = top or max(max(vals), SPARK_FLOOR)
    return "".join(BLOCKS[min(8, max(0, round(v / hi * 8)))] for v in vals)


metric = format_metric  # the screens' short name for it


def severity_text(sev: str, message: str) -> Text:
    mark = {"error": "✖", "warning": "▲", "info": "•"}.get(sev, "•")
    t = Text()
    t.append(f"{mark} ", style=_rich_style(sev))
    t.append(visible(message))
    return t


def _rich_style(sev: str) -> str:
    return {"error": "bold red", "warning": "yellow", "info": "dim"}.get(sev, "")


def host_text(value: object, limit: int = CELL_MAX, style: str = "") -> Text:
    """One line of host text: visible escapes, capped at `limit` characters, plain (no markup)."""
    return Text(show(value, limit), style=style)


def plain_text(value: object, style: str = "", limit: int = 0) -> Text:
    """Text that may hold host data (several lines kept): visible escapes, no markup; each line
    capped at `limit` characters when limit > 0."""
    return Text(lines(value, limit), style=style)
