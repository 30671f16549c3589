"""FrontCompositor: every partial update it renders equals Textual's own for the same changes, while it
renders only the changed widgets and those in front of them."""
from __future__ import annotations

from dataclasses import replace

import pytest
from textual._compositor import Compositor

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.fast import compositor as fast_compositor
from nodeconsole.screens.fast.compositor import FrontCompositor

from .conftest import FIXED_IDS
from .helpers import wait_until

# a test of screens/fast/: the stock mode (--stock-textual) has none of it
pytestmark = pytest.mark.fast_textual


def _written(update) -> list[list[tuple[str, object]]]:
    """The cells an update writes: for each span, (character, style) from x1 to x2. (Textual's own way
    may add a cursor move that writes nothing, at a strip starting at a span's end.)"""
    out = []
    for y, x1, x2 in update.spans:
        cells: dict[int, tuple[str, object]] = {}
        for x, strip in update.chops[y].items():
            if strip is None:
                continue
            for segment in strip:
                for ch in segment.text:  # the console's text here is one cell a character
                    if x1 <= x < x2:
                        cells.setdefault(x, (ch, segment.style))
                    x += 1
        out.append([cells.get(x) for x in range(x1, x2)])
    return out


class Checking(FrontCompositor):
    """Renders each partial update its own way, then Textual's way from the same changes, and compares
    what each would write to the terminal."""

    updates = 0
    narrowed = 0  # updates that rendered fewer widgets than Textual's way

    def render_partial_update(self):
        regions, owners = set(self._dirty_regions), {r: list(w) for r, w in self._owners.items()}
        needed = self.needed_for(regions, owners) if regions else None
        ours = super().render_partial_update()
        self._dirty_regions.update(regions)
        theirs = Compositor.render_partial_update(self)
        assert (ours is None) == (theirs is None)
        if ours is not None:
            assert ours.spans == theirs.spans
            assert _written(ours) == _written(theirs)
            Checking.updates += 1
            if needed is not None and len(needed) < len(self.visible_widgets):
                Checking.narrowed += 1
        return ours


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_partial_updates_equal_textuals(size, demo_seams, monkeypatch):
    monkeypatch.setattr(fast_compositor, "FrontCompositor", Checking)
    Checking.updates = Checking.narrowed = 0
    app = NodeConsoleApp(replace(demo_seams, pci_ids=FIXED_IDS), interval=0.1)
    async with app.run_test(size=size) as pilot:
        for _ in range(60):
            await pilot.pause(0.05)
            if app.polls >= 5:
                break
        assert app.polls >= 5
        for key in ["j", "j", "k", "G", "g", "tab", "j", "2", "3", "4", "j", "j", "5", "k", "1", "question_mark",
                    "escape", "slash", "t", "r", "a", "i", "n", "escape", "enter", "escape"]:
            await pilot.press(key)
            await pilot.pause(0.15)  # a poll or two between keys: figures change under the cursor
        app.paused = True
        assert await wait_until(pilot, lambda: not app.poller.busy)
    assert Checking.updates > 20
    assert Checking.narrowed > 10  # the polls' updates rendered only what changed
