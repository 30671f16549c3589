"""Layout that follows the terminal, on a frozen demo host: one app per terminal size walks every screen,
keeping an SVG picture of each and what its tables show; the tests then check the pictures against the
recorded snapshots (update with --snapshot-update, then look at them) and that no cell of a table is
cut while the table has free columns. Also: the column fitting itself, the Overview at 160x50 (all
14 VMs, no model, owner or pin cut), problems with their fixes and the key that goes to them, the help's
columns at 80 columns, and a GPU's passthrough problem never naming its own card as a blocker."""
from __future__ import annotations

import asyncio
import io
import re
from dataclasses import dataclass, field

import pytest
from pytest_textual_snapshot import SVGImageExtension
from rich.console import Console
from rich.text import Text
from textual.widgets import Static

from nodeconsole.console.iommu import slot_of
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.gpus import GpusScreen, gpu_panel
from nodeconsole.screens.modals.details import DetailsModal
from nodeconsole.screens.modals.help import KEY_WIDTH, help_rows, help_text
from nodeconsole.screens.overview import ProblemList, fix_target, problems_view
from nodeconsole.screens.vms import VmsScreen
from nodeconsole.screens.widgets.details import gpu_details
from nodeconsole.screens.widgets.gpu_text import gpu_group_text
from nodeconsole.screens.widgets.keyed_table import Col, KeyedTable, fit_widths
from tests.screens.conftest import FrozenCollector, make_frozen_seams
from tests.screens.helpers import wait_until

SIZES = {"80x24": (80, 24), "160x50": (160, 50)}
SCREENS = {"1": "overview", "2": "topology", "3": "iommu", "4": "gpus", "5": "vms", "6": "nccl", "7": "setup",
           "8": "changes", "9": "events"}
# what a screen reads in a worker before its picture is whole (the others show the app's snapshot)
READY = {"nccl": lambda s: s.plan is not None, "setup": lambda s: s.report is not None,
         "changes": lambda s: s.read_once}


@dataclass
class TableSeen:
    """One table as the app showed it: each visible row's rendered line and its cells in full."""

    id: str
    room: int  # the cells the table's columns may take (its width less the scrollbar)
    used: int  # the cells its columns take
    rows: list[tuple[str, str, list[tuple[str, str]]]] = field(default_factory=list)  # key, line, cells


@dataclass
class ScreenSeen:
    svg: str
    tables: list[TableSeen]


@pytest.fixture(scope="module")
def seams(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        state = tmp_path_factory.mktemp("layout") / "demo"
        mp.setenv("NODECONSOLE_STATE_DIR", str(state))
        yield make_frozen_seams(state)


def _app(seams) -> NodeConsoleApp:
    return NodeConsoleApp(seams, interval=3600, collector=FrozenCollector(seams))


def _tables(screen) -> list[TableSeen]:
    seen = []
    for table in screen.query(KeyedTable):
        if not table.display or table.size.height == 0:
            continue
        header = table.header_height if table.show_header else 0
        t = TableSeen(table.id or "", table.size.width - table.scrollbar_size_vertical,
                      table.virtual_size.width)
        top = round(table.scroll_y)
        for y in range(header, table.scrollable_content_region.height):
            index = top + y - header
            if index >= table.row_count:
                break
            key = table.coordinate_to_cell_key((index, 0)).row_key.value or ""
            t.rows.append((key, table.render_line(y).text, table.full_row(key)))
        seen.append(t)
    return seen


async def _walk(seams, size) -> dict[str, ScreenSeen]:
    app = _app(seams)
    seen: dict[str, ScreenSeen] = {}
    async with app.run_test(size=size) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1, tries=200)
        for key, mode in SCREENS.items():
            await pilot.press(key)
            assert await wait_until(pilot, lambda m=mode: app.current_mode == m)
            ready = READY.get(mode, lambda s: True)
            assert await wait_until(pilot, lambda r=ready: r(app.screen), tries=200), mode
            await app.workers.wait_for_complete()  # what the screen reads in a worker (doctor, log, events)
            if mode == "changes":  # the audit log's path is a temporary directory: the same in every picture
                summary = app.screen.query_one("#changes-summary", Static)
                summary.update(Text(str(summary.content).replace(str(seams.audit_dir), "<state>")))
            for _ in range(3):
                await pilot.pause()
            await pilot.wait_for_scheduled_animations()
            seen[mode] = ScreenSeen(app.export_screenshot(title=app.title), _tables(app.screen))
    return seen


@pytest.fixture(scope="module")
def walked(seams) -> dict[str, dict[str, ScreenSeen]]:
    return {name: asyncio.run(_walk(seams, size)) for name, size in SIZES.items()}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", SCREENS.values())
def test_screen_pictures(walked, snapshot, size, mode):
    svg = walked[size][mode].svg
    assert svg == snapshot.use_extension(SVGImageExtension)


@pytest.mark.parametrize("size", SIZES)
def test_no_cell_is_cut_while_the_table_has_room(walked, size):
    checked = 0
    for mode, screen in walked[size].items():
        for table in screen.tables:
            for key, line, cells in table.rows:
                for label, full in cells:
                    checked += 1
                    if full.strip() and full not in line:
                        assert table.used >= table.room, (
                            f"{mode} #{table.id} row {key}: {label} {full!r} is cut ({line!r}) while the "
                            f"table uses {table.used} of {table.room} columns")
    assert checked > 300  # every screen's rows were seen


def test_overview_at_160x50_lists_every_vm_and_cuts_no_model_owner_or_pin(walked):
    overview = {t.id: t for t in walked["160x50"]["overview"].tables}
    assert len(overview["vms"].rows) == 14
    for table, labels in ((overview["gpus"], ("Model", "Owner", "Address")),
                          ({t.id: t for t in walked["160x50"]["vms"].tables}["vm-table"], ("VM", "Pinned to"))):
        for _, line, cells in table.rows:
            for label, full in cells:
                if label in labels:
                    assert full in line, (label, full, line)
    pins = [c for _, _, cells in {t.id: t for t in walked["160x50"]["vms"].tables}["vm-table"].rows
            for label, c in cells if label == "Pinned to"]
    assert "10-13,34-37,74-77,98-101" in pins
    owners = [c for _, _, cells in overview["gpus"].rows for label, c in cells if label == "Owner"]
    assert "mig→mig-infer-a,mig-infer-b" in owners


def test_tables_cut_short_at_80x24_say_how_many_more(walked):
    svg = walked["80x24"]
    assert "more:&#160;Tab&#160;to&#160;the&#160;table" in svg["overview"].svg  # the VMs' section title
    assert "more&#160;below:&#160;j/k" in svg["iommu"].svg  # the group table's line below it
    assert "lines&#160;below:&#160;j/k&#160;PgUp/PgDn" in svg["topology"].svg  # the topology's scrolling view


# -- the column fitting ------------------------------------------------------------------------------
def test_fit_widths_shrinks_the_lowest_priority_first():
    cols = [Col("a", "A", 0), Col("name", "Name", 2), Col("b", "Bee", 1, 6)]
    assert fit_widths(cols, [10, 20, 10], 40) == [10, 20, 10]  # it fits: every column its widest cell
    assert fit_widths(cols, [10, 20, 10], 35) == [5, 20, 10]  # the low one gives first
    assert fit_widths(cols, [10, 20, 10], 30) == [4, 20, 6]  # then the next, down to its minimum 6
    assert fit_widths(cols, [10, 20, 10], 28) == [4, 18, 6]  # then the priority column
    assert fit_widths(cols, [10, 20, 10], 20) == [4, 10, 6]
    assert fit_widths(cols, [10, 20, 10], 5) == [4, 4, 6]  # too narrow: all at their minimum (it scrolls)
    even = fit_widths([Col("x", "X"), Col("y", "Y")], [30, 10], 30)
    assert even == [20, 10] and fit_widths([Col("x", "X"), Col("y", "Y")], [30, 30], 40) == [20, 20]


# -- problems and their fixes ------------------------------------------------------------------------
def _plain(renderable, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_each_problem_shows_its_fix_and_where_f_goes(walked, seams):
    snap = FrozenCollector(seams).collect()
    targets = [fix_target(snap, p) for p in snap.problems]
    lines = _plain(problems_view(snap.problems, 40, targets=[t[2] if t else None for t in targets]), 1000)
    for p, target in zip(snap.problems, targets):
        at = next(i for i, line in enumerate(lines) if p.message in line)
        assert p.fix and p.fix in lines[at + 1], (p.message, lines[at + 1])
        if target is not None:
            assert f"f: {target[2]}" in lines[at + 1]
    kinds = {t[0] for t in targets if t}
    assert kinds == {"setup", "gpus", "vms"}, kinds  # the demo has problems of each kind
    assert "↳&#160;fix:" in walked["160x50"]["overview"].svg  # on the screen too, under each problem


async def test_f_goes_to_the_gpu_or_vm_the_problem_is_about(seams):
    app = _app(seams)
    async with app.run_test(size=(160, 50)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1, tries=200)
        snap = app.snapshot
        targets = [fix_target(snap, p) for p in snap.problems]
        for mode, screen_type in (("gpus", GpusScreen), ("vms", VmsScreen)):
            i, target = next((i, t) for i, t in enumerate(targets) if t and t[0] == mode)
            await pilot.press("1")
            assert await wait_until(pilot, lambda: app.current_mode == "overview")
            problems = app.screen.query_one("#problems", ProblemList)
            problems.focus()
            await pilot.press("g", *["j"] * i)
            assert problems.selected() == i
            await pilot.press("enter")  # the problem in full, with its fix
            assert await wait_until(pilot, lambda: isinstance(app.screen, DetailsModal))
            body = str(app.screen.query_one("#details-body", Static).content)
            assert snap.problems[i].fix in body and target[2] in body
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: isinstance(app.screen, SnapshotScreen))
            await pilot.press("f")
            assert await wait_until(pilot, lambda st=screen_type: isinstance(app.screen, st))
            table = app.screen.query_one(f"#{app.screen.SELECTION_TABLE}", KeyedTable)
            assert await wait_until(pilot, lambda t=table, k=target[1]: t.selected_key() == k)
            selected = app.selected_gpu if mode == "gpus" else app.selected_vm
            assert await wait_until(pilot, lambda m=mode, k=target[1]: (
                app.selected_gpu if m == "gpus" else app.selected_vm) == k), selected

        # narrower: the columns are laid out again, and a cut cell shows its whole text under the mouse
        await pilot.press("1")
        assert await wait_until(pilot, lambda: app.current_mode == "overview")
        gpus = app.screen.query_one("#gpus", KeyedTable)
        owner = "mig→mig-infer-a,mig-infer-b"
        assert gpus.column_widths()["owner"] >= len(owner)
        await pilot.resize_terminal(80, 24)
        assert await wait_until(pilot, lambda: gpus.column_widths()["owner"] < len(owner))
        assert gpus.column_widths()["addr"] == len("0000:18:00.0")  # an address is never cut
        x = sum(w + 2 for k, w in gpus.column_widths().items() if k in ("idx", "smi", "addr", "name")) + 1
        await pilot.hover("#gpus", offset=(x, 3))  # GPU 2's owner
        assert await wait_until(pilot, lambda: gpus.tooltip == f"Owner: {owner}"), gpus.tooltip

        # GPU 7's details are longer than an 80x24 dialog: the line below them says so, and j scrolls
        gpus.focus()
        await pilot.press("G", "k", "k", "enter")  # the last row is GPU 9: two up
        assert gpus.selected_key() == "0000:bb:00.0"
        assert await wait_until(pilot, lambda: isinstance(app.screen, DetailsModal))
        hint = app.screen.query_one("#details-scroll-more", Static)
        assert await wait_until(pilot, lambda: hint.display and "lines below" in str(hint.content))
        await pilot.press("j")
        assert await wait_until(pilot, lambda: "1 line above" in str(hint.content)), hint.content


def _blockers(text: str) -> list[str]:
    return re.findall(r"shares group \d+ with ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])", text)


def test_a_gpu_passthrough_problem_never_names_its_own_card(seams):
    """The issue saw "GPU 7 … shares group 34 with 0000:bb:00.0", itself: its problem, its panel on the
    GPUs screen and its details judge the group from the GPU's side."""
    snap = FrozenCollector(seams).collect()
    seen = 0
    for g in snap.gpus:
        texts = [p.message for p in snap.problems if p.subject == g.address and "shares group" in p.message]
        texts += [gpu_group_text(snap, g), gpu_details(snap, g)]
        texts.append(_plain(gpu_panel(snap, g.address), 500)[-1])  # the GPUs screen's panel: its group last
        for text in texts:
            for address in _blockers(text):
                assert slot_of(address) != slot_of(g.address), f"GPU {g.index} blocked by itself: {text}"
                seen += 1
    assert seen >= 8  # GPU 6 and GPU 7 share group 34 on the demo host, each with other cards' functions
    gpu7 = next(g for g in snap.gpus if g.address == "0000:bb:00.0")
    assert _blockers(gpu_group_text(snap, gpu7)) == ["0000:ba:00.1", "0000:bc:00.0", "0000:bd:00.0"]


# -- the help --------------------------------------------------------------------------------------
def test_help_keeps_its_key_column_at_80_columns():
    lines = _plain(help_text(), 68)  # the help's frame inside an 80-column terminal
    rows = [line for line in lines if line.startswith(" ")]  # not the group headings
    assert rows and all(len(line) <= 68 for line in lines)
    titles = max(len(t) for _, rows in help_rows() for _, t, _ in rows)
    assert titles <= 12  # short titles leave the descriptions their width
    desc = KEY_WIDTH + 1 + titles + 1  # where every description starts
    for line in rows:
        key = line[:KEY_WIDTH]
        # the keys stay in their column (right-aligned, a space after), the titles in theirs, and a
        # description, wrapped or not, continues under itself
        assert (not key.strip() or key.endswith(key.strip())) and line[KEY_WIDTH] == " ", line
        assert line[desc - 1] == " " and (len(line) <= desc or line[desc] != " "), line
    assert any(not line[:desc].strip() for line in rows), "some description wraps at 68 columns"
    assert any("GPUs, VMs and the most important problems" in line for line in rows)  # one line, at 80


def test_problem_text_is_not_markup():
    t = problems_view([type("P", (), {"severity": "warning", "check": "", "message": "[b]x[/b]",
                                      "fix": "[red]y"})()], 4)
    assert "[b]x[/b]" in _plain(t, 80)[0] and "[red]y" in _plain(t, 80)[1]
    assert isinstance(t.renderables[0], Text)
