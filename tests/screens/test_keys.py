"""Keys: table movement (j/k/g/G/Home/End), a footer that offers only what works on the screen, `/`
where there is nothing to filter, `t` naming the theme, the NCCL GPU choice on `P`, and the Overview's
problem list saying how many more there are at 80×24. One demo host for the module."""
from __future__ import annotations

import pytest
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.nccl import NcclScreen
from nodeconsole.screens.nccl_pick import GpuPickModal
from nodeconsole.screens.overview import MORE_HINT, problems_view
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.themes import NAMES
from tests.screens.conftest import FrozenCollector, make_frozen_seams

SIZE = (80, 24)


@pytest.fixture(scope="module")
def seams(tmp_path_factory):
    return make_frozen_seams(tmp_path_factory.mktemp("keys") / "demo")


async def _until(pilot, cond, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if cond():
            return
        await pilot.pause(0.02)
    assert cond(), "condition not reached in time"


def _footer(app) -> list[str]:
    return [k.description for k in app.screen.query(FooterKey)]


def _messages(app) -> list[str]:
    return [n.message for n in app._notifications]


def _text(widget: Static) -> list[str]:
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text().splitlines()


async def test_keys_footer_filter_theme_and_nccl_pick(seams) -> None:
    app = NodeConsoleApp(seams, interval=60, collector=FrozenCollector(seams))
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: app.polls >= 1)
        await pilot.pause()
        # the Overview offers no GPU or VM action: they work on the GPUs and VMs screens only
        shown = _footer(app)
        assert "Filter" in shown and not {"Passthrough", "Pin", "Release", "MIG"} & set(shown)
        await pilot.press("a")  # inactive here: no plan, no warning
        await pilot.pause()
        assert not any("first" in m for m in _messages(app))

        await pilot.press("4")
        await _until(pilot, lambda: app.current_mode == "gpus")
        await pilot.pause()
        assert {"Passthrough", "Release", "MIG"} <= set(_footer(app)) and "Pin" not in _footer(app)
        table = app.screen.query_one("#gpu-table", KeyedTable)
        table.focus()
        await pilot.pause()
        last = table.row_count - 1
        assert last >= 3 and table.cursor_row == 0
        for key, row in (("j", 1), ("j", 2), ("k", 1), ("G", last), ("g", 0), ("end", last), ("home", 0)):
            await pilot.press(key)
            assert table.cursor_row == row, (key, table.cursor_row)

        await pilot.press("5")
        await _until(pilot, lambda: app.current_mode == "vms")
        await pilot.pause()
        assert "Pin" in _footer(app) and "Passthrough" not in _footer(app)

        await pilot.press("2")  # Topology has no table: `/` says so instead of doing nothing
        await _until(pilot, lambda: app.current_mode == "topology")
        await pilot.press("slash")
        await pilot.pause()
        assert any("no table to filter" in m for m in _messages(app))

        before = app.theme
        await pilot.press("t")
        await pilot.pause()
        assert app.theme != before and app.theme in NAMES
        assert any(f"theme: {app.theme}" in m for m in _messages(app))

        await pilot.press("6")
        await _until(pilot, lambda: isinstance(app.screen, NcclScreen) and app.screen.plan is not None)
        assert "GPUs" in _footer(app)
        await pilot.press("P")
        await _until(pilot, lambda: isinstance(app.screen, GpuPickModal))
        await pilot.press("escape")
        await _until(pilot, lambda: isinstance(app.screen, NcclScreen))


async def test_overview_problems_at_80x24_say_how_many_more(seams) -> None:
    app = NodeConsoleApp(seams, interval=60, collector=FrozenCollector(seams))
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: app.polls >= 1)
        widget = app.screen.query_one("#problems", Static)
        await _until(pilot, lambda: widget.content_size.height > 0 and widget.content is not None)
        await pilot.pause()
        problems = app.snapshot.problems
        height = widget.content_size.height
        assert len(problems) > height, "the demo host has more problems than fit at 80x24"
        lines = [line.strip() for line in _text(widget) if line.strip()]
        assert len(lines) == height  # every line shown; the last one counts the rest
        assert lines[-1].endswith(f"{len(problems) - (height - 1)} more: {MORE_HINT}")
        assert widget.region.bottom <= SIZE[1] - 1  # on screen, above the footer's row


def test_problems_view_keeps_the_more_line_within_the_height() -> None:
    problems = [type("P", (), {"severity": "warning", "check": "", "message": f"p{i}"})() for i in range(6)]
    assert len(problems_view(problems, 3).renderables) == 3
    assert problems_view(problems, 3).renderables[-1].plain.endswith(f"4 more: {MORE_HINT}")
    assert len(problems_view(problems, 6).renderables) == 6  # all fit: no "more" line
    assert len(problems_view(problems, 1).renderables) == 1
