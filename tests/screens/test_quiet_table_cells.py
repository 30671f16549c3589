"""text_cell_line gives, segment for segment, what rich's pipeline gives for a DataTable cell
(Styled(Padding(cell)) rendered one line high without wrapping), over random cells: justify, overflow,
cells wider than the column, double-width and combining characters, styled spans (overlapping,
empty), the text's own style, padding, pre and post styles. Cells it cannot draw (newlines, tabs,
wrapping asked for, overflow "ignore", an unusual end) answer None and go through rich."""
from __future__ import annotations

import random

import pytest
from rich.console import Console
from rich.padding import Padding
from rich.style import Style
from rich.text import Span, Text
from textual.renderables.styled import Styled

from nodeconsole.screens.fast.table import text_cell_line

# a test of screens/fast/: the stock mode (--stock-textual) has none of it
pytestmark = pytest.mark.fast_textual

CHARS = "ab xyz01%…漢字é\u0301-"
STYLES = [None, "", "bold", "red on blue", Style(italic=True), Style(color="green", meta={"k": 1}), "not-a-style"]


def rich_line(console: Console, cell: Text, width: int, padding: int, pre: Style, post: Style):
    options = console.options.update_dimensions(width, 1).update(no_wrap=True)
    return console.render_lines(Styled(Padding(cell, (0, padding)), pre_style=pre, post_style=post), options)


def random_cell(rng: random.Random) -> Text:
    plain = "".join(rng.choice(CHARS) for _ in range(rng.choice([0, 1, 3, 6, 12, 20])))
    if rng.random() < 0.04:
        plain += rng.choice(["\n", "\t"]) + "z"
    text = Text(plain, style=rng.choice(STYLES[:-1]) or "",
                justify=rng.choice([None, None, "default", "left", "center", "right", "full"]),
                overflow=rng.choice([None, "fold", "crop", "ellipsis", "ellipsis", "ignore"]),
                no_wrap=rng.choice([None, True, True, False]),
                end=rng.choice(["\n", "\n", "", " "]))
    for _ in range(rng.choice([0, 0, 1, 2, 4])):
        start = rng.randrange(len(plain) + 1)
        end = min(len(plain), start + rng.randrange(6))
        text.spans.append(Span(start, end, rng.choice(STYLES) or "dim"))
    return text


def test_same_segments_as_rich_for_random_cells():
    rng = random.Random(7)
    console = Console(width=200, color_system="truecolor", force_terminal=True)
    drawn = 0
    for case in range(3000):
        cell = random_cell(rng)
        width, padding = rng.randint(1, 16), rng.choice([0, 1, 1, 2])
        pre = Style(color="white", bgcolor="black", meta={"row": case, "column": 2})
        post = rng.choice([Style.null(), Style(bgcolor="red"), Style(color="yellow", bold=True)])
        if rng.random() < 0.05:
            pre = Style.null()
        before = (cell.plain, list(cell.spans), cell.style)
        got = text_cell_line(console, cell, width, padding, pre, post)
        assert (cell.plain, list(cell.spans), cell.style) == before, "the cell itself was changed"
        if got is None:
            continue
        drawn += 1
        want = rich_line(console, cell, width, padding, pre, post)
        assert len(want) == 1 and got == want[0], (case, cell, cell.spans, width, padding)
    assert drawn > 1000  # most of the mix (every kind a console table has) is drawn here, not handed back


def test_cells_rich_must_draw_are_handed_back():
    console = Console(width=80)
    pre, post = Style(bold=True), Style.null()
    for cell, width in [(Text("two\nlines"), 10), (Text("a\tb"), 10), (Text("wrap me please", no_wrap=False), 6),
                        (Text("x", overflow="ignore"), 5), (Text("x", end=" "), 5), (Text("x"), 2)]:
        assert text_cell_line(console, cell, width, 1, pre, post) is None, cell
    # a wrappable text that fits is the same line either way: still handed back (rich's wrap decides)
    assert text_cell_line(console, Text("ok", no_wrap=False), 6, 1, pre, post) is None
