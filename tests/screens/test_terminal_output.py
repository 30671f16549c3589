"""What the console leaves on a real terminal: its output, fed into a VT100 emulator (pyte), must show
exactly what a fresh, whole render of the same screen shows — after polls, screen switches, dialogs and
resizes at 80x24, 160x50 and 240x70 — while writing only the cells that changed."""
from __future__ import annotations

import random

import pyte
import pytest
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual._compositor import ChopsUpdate, CompositorUpdate, LayoutUpdate
from textual.geometry import Region
from textual.strip import Strip

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.fast import terminal as terminal_module
from nodeconsole.screens.fast.display import _ShadowedUpdate
from nodeconsole.screens.fast.terminal import ScreenShadow
from tests.screens.helpers import wait_until

from .conftest import FIXED_IDS

# a test of screens/fast/: the stock mode (--stock-textual) has none of it
pytestmark = pytest.mark.fast_textual


def terminal(width: int, height: int) -> tuple[pyte.Screen, pyte.Stream]:
    screen = pyte.Screen(width, height)
    return screen, pyte.Stream(screen)


def cells(screen: pyte.Screen) -> list[list[tuple]]:
    """Every cell: character, colours and attributes."""
    return [[(c.data, c.fg, c.bg, c.bold, c.italics, c.underscore, c.reverse)
             for c in (screen.buffer[y][x] for x in range(screen.columns))] for y in range(screen.lines)]


def text(screen: pyte.Screen) -> str:
    return "\n".join(screen.display)


def console(width: int, height: int) -> Console:
    return Console(width=width, height=height, color_system="256", force_terminal=True, legacy_windows=False)


# -- the shadow on synthetic updates ----------------------------------------------------------------
STYLES = [Style(color="red"), Style(color="green", bold=True), Style(bgcolor="blue"), None,
          Style(color="color(208)", reverse=True)]
CHARS = "ab c▃█✖界-"  # 界: a double-width character


def random_strip(rng: random.Random, width: int) -> Strip:
    """Exactly `width` cells of random text and styles (a double-width character that would not fit
    becomes a space, as Textual's strips do at a region's edge)."""
    segs, used = [], 0
    while used < width:
        piece = ""
        for ch in (rng.choice(CHARS) for _ in range(rng.randint(1, 6))):
            w = Segment(ch).cell_length
            if used + Segment(piece).cell_length + w > width:
                break
            piece += ch
        if not piece:
            piece = " " * (width - used)
        segs.append(Segment(piece, rng.choice(STYLES)))
        used += Segment(piece).cell_length
    return Strip(segs)


# widget regions side by side: the compositor repaints whole regions, so updates start and end on
# these columns (a character always belongs to one widget)
EDGES = [0, 7, 13, 29, 40]


def chops_update(rng: random.Random, width: int, height: int) -> ChopsUpdate:
    """A few lines repainted across one or more neighbouring regions, as the compositor sends for
    refreshed widgets."""
    chops: list[dict] = [{} for _ in range(height)]
    ends: list[list[int]] = [[] for _ in range(height)]
    spans = []
    for y in sorted(rng.sample(range(height), rng.randint(1, height))):
        i = rng.randint(0, len(EDGES) - 2)
        j = rng.randint(i + 1, len(EDGES) - 1)
        x1, x2 = EDGES[i], EDGES[j]
        chops[y] = {x1: Strip.join([random_strip(rng, b - a) for a, b in zip(EDGES[i:j], EDGES[i + 1:j + 1])])}
        ends[y] = [x2]
        spans.append((y, x1, x2))
    return ChopsUpdate(chops, spans, ends)


def test_random_updates_leave_what_unoptimized_output_leaves():
    """Two terminals: one fed Textual's own output for every update, one fed the shadow's; after every
    update they show the same cells, and the shadow wrote fewer of them."""
    rng = random.Random(7)
    width, height = 40, 8
    con = console(width, height)
    plain, plain_stream = terminal(width, height)
    ours, our_stream = terminal(width, height)
    shadow = ScreenShadow()
    plain_bytes = our_bytes = 0
    for step in range(300):
        if step % 50 == 0:
            update: CompositorUpdate = LayoutUpdate(
                [[random_strip(rng, b - a) for a, b in zip(EDGES, EDGES[1:])] for _ in range(height)],
                Region(0, 0, width, height))
        else:
            update = chops_update(rng, width, height)
        full = update.render_segments(con)
        diff = shadow.render(update, con, (width, height))
        plain_stream.feed(full)
        our_stream.feed(diff)
        plain_bytes += len(full)
        our_bytes += len(diff)
        assert cells(ours) == cells(plain), f"step {step}"
    assert our_bytes < plain_bytes


def test_the_kept_runs_stay_bounded_and_output_stays_right(monkeypatch):
    """The shadow keeps the cells of the runs it has seen, up to a bound on the cells kept; past it
    it starts over, and what it writes is still what Textual's output leaves."""
    monkeypatch.setattr(terminal_module, "RUN_CELLS", 500)
    rng = random.Random(11)
    width, height = 40, 8
    con = console(width, height)
    plain, plain_stream = terminal(width, height)
    ours, our_stream = terminal(width, height)
    shadow = ScreenShadow()
    most = 0
    for step in range(200):
        update = chops_update(rng, width, height)
        plain_stream.feed(update.render_segments(con))
        our_stream.feed(shadow.render(update, con, (width, height)))
        kept = sum(map(len, shadow._runs.values()))
        assert kept == shadow._run_cells
        most = max(most, kept)
        assert cells(ours) == cells(plain), f"step {step}"
    assert 500 < most <= 500 + width * height  # one update's runs at most past the bound


def test_one_changed_cell_is_one_cell_on_the_wire():
    width, height = 30, 3
    con = console(width, height)
    shadow = ScreenShadow()
    line = [Segment("GPU0 ", Style(color="red")), Segment("util 45%".ljust(25))]
    first = LayoutUpdate([[Strip(line)] for _ in range(height)], Region(0, 0, width, height))
    shadow.render(first, con, (width, height))
    line2 = [Segment("GPU0 ", Style(color="red")), Segment("util 47%".ljust(25))]
    again = LayoutUpdate([[Strip(line)], [Strip(line2)], [Strip(line)]], Region(0, 0, width, height))
    out = shadow.render(again, con, (width, height))
    assert out == "\x1b[2;12H7"  # line 2, column 12: the one digit that changed, unstyled as it was
    assert shadow.render(again, con, (width, height)) == ""  # nothing changed: nothing written


def test_a_new_size_or_a_reset_writes_everything_again():
    width, height = 10, 2
    con = console(width, height)
    shadow = ScreenShadow()
    upd = LayoutUpdate([[Strip([Segment("x" * width)])] for _ in range(height)], Region(0, 0, width, height))
    assert "x" in shadow.render(upd, con, (width, height))
    assert shadow.render(upd, con, (width, height)) == ""
    shadow.reset()
    assert shadow.render(upd, con, (width, height)).count("x") == width * height
    assert shadow.render(upd, con, (width, height + 1)).count("x") == width * height


# -- the console itself -----------------------------------------------------------------------------
class TerminalApp(NodeConsoleApp):
    """The console with a VT100 emulator as its terminal: every display step goes through the same
    shadow the real driver's output goes through."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.term: pyte.Screen | None = None
        self.stream: pyte.Stream | None = None
        self.con = console(80, 24)
        self.written = 0

    def _display(self, screen, renderable) -> None:
        if isinstance(renderable, CompositorUpdate):
            w, h = self.size.width, self.size.height
            if self.term is None or (self.term.columns, self.term.lines) != (w, h):
                self.term, self.stream = terminal(w, h)  # a resized terminal: what it kept is unknown
                self.shadow.reset(w, h)
                self.con = console(w, h)
            assert self.stream is not None
            # the production path: the update wrapped as NodeConsoleApp._display wraps it
            out = _ShadowedUpdate(renderable, self.shadow, self.size).render_segments(self.con)
            self.written += len(out)
            self.stream.feed(out)

    def fresh(self) -> pyte.Screen:
        """A new terminal fed one whole render of the current screen, as a freshly started console
        writes it."""
        w, h = self.size.width, self.size.height
        term, stream = terminal(w, h)
        # (render_full_update leaves the compositor's pending repaints alone)
        stream.feed(self.screen._compositor.render_full_update().render_segments(self.con))
        return term


SIZES = [(80, 24), (160, 50), (240, 70)]


async def test_console_output_equals_a_fresh_render(state_ro):
    """Polls, every screen, help, then each size in turn with polls at it, and ^L: after each, the
    emulated terminal shows what a fresh whole render shows, cell for cell."""
    from dataclasses import replace

    from nodeconsole.console.cli import build_parser
    from nodeconsole.console.cli_base import seams_from_args

    args = build_parser().parse_args(["--demo"])
    app = TerminalApp(lambda: replace(seams_from_args(args), pci_ids=FIXED_IDS), interval=0.2)
    async with app.run_test(size=SIZES[0]) as pilot:

        async def settle_and_compare(where: str) -> None:
            await pilot.pause(0.05)
            await app.workers.wait_for_complete()
            assert await wait_until(pilot, lambda: not app.poller.busy)
            await pilot.pause()
            assert app.term is not None
            fresh = app.fresh()
            assert text(app.term) == text(fresh), where
            assert cells(app.term) == cells(fresh), where

        for _ in range(40):  # the first snapshot and a few polls with changing figures
            await pilot.pause(0.1)
            if app.polls >= 4:
                break
        assert app.polls >= 4
        await settle_and_compare("overview at 80x24")
        for key in "234519":
            await pilot.press(key)
            await settle_and_compare(f"screen {key}")
        await pilot.press("question_mark")
        await settle_and_compare("help")
        await pilot.press("escape", "1")
        for size in SIZES[1:]:
            await pilot.resize_terminal(*size)
            await settle_and_compare(f"resized to {size}")
            polls, before = app.polls, app.written
            while app.polls < polls + 3:  # polls that move utilization, temperatures and VM CPU
                await pilot.pause(0.1)
            await settle_and_compare(f"polls at {size}")
            w, h = size
            # a poll rewrites the few figures that moved, not the screen
            assert (app.written - before) / (app.polls - polls) < w * h / 4, size
        assert app.stream is not None
        app.stream.feed("\x1b[1;1HSOMETHING ELSE WROTE HERE\x1b[5;3Hand here")  # another program
        await pilot.press("ctrl+l")
        await settle_and_compare("after ^L")


def test_a_failing_shadow_writes_the_update_whole(monkeypatch):
    """The output optimisation must never take the console down: if it fails, the update is written as
    Textual writes it and the shadow starts over."""
    from textual.geometry import Size


    width, height = 10, 2
    con = console(width, height)
    shadow = ScreenShadow()
    upd = LayoutUpdate([[Strip([Segment("x" * width)])] for _ in range(height)], Region(0, 0, width, height))

    def broken(*a):
        raise RuntimeError("bug")

    monkeypatch.setattr(shadow, "_apply", broken)
    assert _ShadowedUpdate(upd, shadow, Size(width, height)).render_segments(con) == upd.render_segments(con)
    monkeypatch.undo()
    assert shadow.render(upd, con, (width, height)).count("x") == width * height  # starts over: all of it


def test_scrollbars_are_drawn_in_whole_cells():
    """No eighth-block glyph (▁…▇) at a thumb's ends: in a terminal's text those read as stray cells."""
    from textual.scrollbar import ScrollBar

    from nodeconsole.screens.app import WholeCellScrollBar

    assert ScrollBar.renderer is WholeCellScrollBar
    for position in (0, 3.3, 7.7, 12.5, 30):
        for vertical in (True, False):
            segments = WholeCellScrollBar.render_bar(size=20, virtual_size=57, window_size=20, position=position,
                                                     vertical=vertical)
            segs = list(segments.segments)
            text = "".join(s.text for s in segs)
            assert set(text) <= {" ", "\n"}, (position, vertical, text)
            assert any(s.style and s.style.reverse for s in segs)  # the thumb is there
