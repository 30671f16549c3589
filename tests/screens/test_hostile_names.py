"""Hostile host text in the console: every screen (keys 1-6) and the details modal at 80x24 show markup
and escape sequences from sysfs, NVML, libvirt literally, with visible escapes, and a 3,000-character
VM name does not push the table's columns away; clicking a name never runs an action."""
from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.widgets import Static

from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.hosttext import show, visible
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams, simulated_host
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.details import DetailsModal
from nodeconsole.screens.widgets.keyed_table import TABLE_CELL_MAX, KeyedTable
from tests.console.test_host_text import (
    AUDIO,
    DRIVER,
    DRIVER_VERSION,
    GPU_NAME,
    HOSTNAME,
    RAW,
    VM_CLICK,
    VM_LINK,
    VM_LONG,
    hostile_demo,
)
from tests.screens.conftest import FIXED_IDS
from tests.screens.helpers import wait_until

SIZE = (80, 24)
SCREENS = {"1": "Overview", "2": "Topology", "3": "IOMMU", "4": "GPUs", "5": "VMs", "6": "NCCL"}


def _seams(tmp_path, monkeypatch) -> Seams:
    state = tmp_path / "demo"
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(state))
    hostile_demo(state)
    root = Root(state / "root")
    lib = SimulatedNvml.from_file(state / "nvml.json", root=root, privileged=True)
    return simulated_host(root=root, libvirt_uri=f"test:///{state / 'libvirt.xml'}", nvml_lib=lib, state_dir=state,
                          pci_ids=FIXED_IDS)


def _no_action_style(style: Style | str | None) -> None:
    """A span made from host text carries no link and no @click (what markup would have produced)."""
    if isinstance(style, Style):
        actions = [k for k in (style.meta or {}) if k.startswith("@")]  # Textual's own meta: offsets
        assert not style.link and not actions, f"host text became a link/action: {style!r}"


def _check_text(t: Text) -> str:
    for span in t.spans:
        _no_action_style(span.style)
    _no_action_style(t.style if isinstance(t.style, Style) else None)
    return t.plain


def _shown(app) -> str:
    """Everything the current screen draws: each widget's lines (whole content, not only what the
    80x24 window shows) and every table cell; asserts no raw control byte and no action span."""
    parts = []
    for w in app.screen.query("*"):
        if isinstance(w, KeyedTable):
            for row in w.ordered_rows:
                for cell in w.get_row(row.key):
                    assert isinstance(cell, Text), f"a str cell is parsed as markup: {cell!r}"
                    parts.append(_check_text(cell))
        elif isinstance(w, Static) and w.size.area:
            for strip in w.render_lines(Region(0, 0, w.size.width, w.size.height)):
                for seg in strip:
                    _no_action_style(seg.style)
                    parts.append(seg.text)
                parts.append("\n")
    out = "".join(parts)
    for ch in RAW:
        assert ch not in out, f"raw {ch!r} drawn: {out[max(0, out.find(ch) - 40):out.find(ch) + 40]!r}"
    svg = app.export_screenshot()
    for ch in RAW:
        assert ch not in svg
    return out


async def _started(app, pilot) -> None:
    assert await wait_until(pilot, lambda: app.polls >= 1), "no full snapshot"
    await pilot.pause(0.05)


async def test_every_screen_shows_hostile_text_literally(tmp_path, monkeypatch):
    app = NodeConsoleApp(_seams(tmp_path, monkeypatch), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        seen = {}
        for key, title in SCREENS.items():
            await pilot.press(key)
            await pilot.pause(0.2)
            assert app.is_running and app.screen.TITLE == title
            seen[title] = _shown(app)
            line = app.screen.query_one("#hostline", Static).content  # its tail is cut at 80 columns
            assert isinstance(line, Text) and show(HOSTNAME) in _check_text(line)
            if title == "Overview":  # one line, cut at 80 columns: its whole content
                info = app.screen.query_one("#host-info", Static).content
                assert isinstance(info, Text) and f"driver {visible(DRIVER_VERSION)}" in _check_text(info)
        overview = seen["Overview"]
        assert show(HOSTNAME) in overview
        for name in (VM_CLICK, VM_LINK, show(VM_LONG)):
            assert name in overview and name in seen["VMs"]
        assert VM_LONG not in seen["VMs"]  # capped for display
        iommu = seen["IOMMU"]
        assert "GPU 0000:18:00.0[nvidia]" in iommu  # our own `addr[driver]` text, not a style
        assert f"{AUDIO}[{show(DRIVER)}]" in iommu
        assert visible(GPU_NAME) in seen["GPUs"]  # the selected GPU's panel
        assert app.return_code is None


async def test_long_vm_name_leaves_the_columns_on_screen(tmp_path, monkeypatch):
    app = NodeConsoleApp(_seams(tmp_path, monkeypatch), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("5")
        await pilot.pause(0.2)
        table = app.screen.query_one("#vm-table", KeyedTable)
        # the long name is cut to leave the other columns their room: the row fits the 80 columns
        widths = table.column_widths()
        assert widths["name"] < len(show(VM_LONG, TABLE_CELL_MAX))
        assert sum(widths.values()) <= table.room()
        svg = app.export_screenshot()
        for head in ("State", "vCPU", "CPU%"):
            assert head in svg, f"column {head} pushed off the 80-column table"


async def test_details_title_click_does_not_run_host_markup(tmp_path, monkeypatch):
    app = NodeConsoleApp(_seams(tmp_path, monkeypatch), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("5")
        await pilot.pause(0.2)
        table = app.screen.query_one("#vm-table", KeyedTable)
        table.focus()
        table.move_cursor(row=table.get_row_index(VM_CLICK))
        await pilot.pause(0.05)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DetailsModal))
        text = _shown(app)
        assert f"VM {VM_CLICK}" in text
        for offset in range(0, 24, 3):  # click along the title, where `q` and the name are drawn
            await pilot.click("#details-title", offset=(offset, 0))
            await pilot.pause(0.05)
        assert app.is_running and app.return_code is None
        assert isinstance(app.screen, DetailsModal), "a click on host text changed the screen"
        await pilot.press("escape")
        await pilot.pause(0.05)

        # the details of a GPU with an escape sequence in its NVML name
        await pilot.press("4")
        await pilot.pause(0.2)
        gpus = app.screen.query_one("#gpu-table", KeyedTable)
        gpus.focus()
        gpus.move_cursor(row=0)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DetailsModal))
        body = _shown(app)
        assert visible(GPU_NAME) in body
        await pilot.press("escape")
        assert app.is_running


async def test_notifications_are_plain_text(tmp_path, monkeypatch):
    app = NodeConsoleApp(_seams(tmp_path, monkeypatch), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        app.screen.notify(f"passthrough: VM {VM_CLICK} {HOSTNAME}", severity="error")  # markup=True default
        await pilot.pause(0.1)
        note = list(app._notifications)[-1]
        assert note.message == f"passthrough: VM {VM_CLICK} {visible(HOSTNAME)}"
        assert note.markup is False
