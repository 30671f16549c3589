"""Lines that wrap with a hanging indent: a long plan or log line continues under its own text (past its
indentation and its `$ ` / `| ` / `- ` / `why: ` / `1. ` marker), so a wrapped command reads as one."""
from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from nodeconsole.console.hosttext import lines

# What a plan line starts with after its indentation; a wrapped line continues under the text after it.
_MARKER = re.compile(r"(\$ |\| |- |why: |fix: |\d+\. |\[ok\] |\[FAILED\] )")
_MAX_HANG = 24  # never indent continuations further than this (a narrow terminal keeps some width)


def hanging_indent(line: str) -> int:
    """Where a wrapped continuation of `line` starts: past its leading spaces and its marker
    (`$ `, `| `, `- `, `why: `, `1. `, …), so a long command reads as one command."""
    lead = len(line) - len(line.lstrip(" "))
    m = _MARKER.match(line, lead)
    return min(lead + (len(m.group(1)) if m else 0), _MAX_HANG)


class HangingLines:
    """Plain lines (host text already made visible) that wrap at the render width with a hanging
    indent: the continuation of a line starts under its text, not at the left edge."""

    def __init__(self, body: Iterable[str]) -> None:
        self.lines = list(body)

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((Text(line).cell_len for line in self.lines), default=0)
        return Measurement(min(widest, 1), min(widest, options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width, 1)
        for line in self.lines:
            text = Text(line, no_wrap=True, overflow="fold")
            if text.cell_len <= width:
                yield text
                continue
            indent = hanging_indent(line)
            if width - indent < 16:  # too narrow for a hanging indent: plain folding
                indent = 0
            head, rest = Text(line[:indent]), Text(line[indent:])
            for n, part in enumerate(rest.wrap(console, width - indent, overflow="fold")):
                part.rstrip()
                if n:  # the space a line broke at belongs to neither line
                    part = part[len(part.plain) - len(part.plain.lstrip(" ")):]
                row = head.copy() if n == 0 else Text(" " * indent)
                row.append_text(part)
                row.no_wrap = True
                yield row


def hanging(text: object) -> HangingLines:
    """Host text (several lines) with visible escapes, never markup, wrapped with hanging indents."""
    return HangingLines(lines(text).split("\n"))
