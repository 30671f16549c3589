"""Pilot tests: every screen on the demo host, asserting on what is shown."""
from __future__ import annotations

from textual.widgets import Static

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

SIZE = (80, 24)


def _text(widget: Static) -> str:
    content = widget.content if hasattr(widget, "content") else widget.renderable
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    console.print(content)
    return console.export_text()


def _cells(table: KeyedTable) -> list[list[str]]:
    out = []
    for row in table.ordered_rows:
        out.append([str(c.plain if hasattr(c, "plain") else c) for c in table.get_row(row.key)])
    return out


async def _started(app, pilot):
    for _ in range(100):
        await pilot.pause(0.05)
        if app.polls >= 1:
            break
    assert app.polls >= 1, "no full snapshot within 5 s"
    await pilot.pause(0.05)


async def test_overview_shows_every_gpu_owner_and_problem(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        rows = _cells(app.screen.query_one("#gpus", KeyedTable))
        assert len(rows) == 10
        owners = {r[4].split("→")[0] for r in rows}
        assert owners == {"host", "vfio", "mig", "vgpu", "unbound"}
        assert any(r[8].endswith("↓") for r in rows), "downtrained link is marked"
        assert [r for r in rows if r[4].startswith("vfio")][0][5] == "(in VM)"
        # nvidia-smi's index beside the console's: none for the GPUs NVML cannot see
        assert [r[1] for r in rows] == ["0", "–", "1", "2", "3", "–", "–", "4", "5", "6"]
        vms = _cells(app.screen.query_one("#vms", KeyedTable))
        assert len(vms) == len(app.snapshot.vms)
        problems = _text(app.screen.query_one("#problems", Static))
        assert "cannot be passed through" in problems


async def test_iommu_screen_names_the_blocking_devices(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("3")
        await pilot.pause(0.1)
        table = app.screen.query_one("#groups", KeyedTable)
        first = _cells(table)[0]
        assert "NOT viable" in first[1] and "0000:ba:00.0" in first[2]
        panel = _text(app.screen.query_one("#group-panel", Static))
        assert "NOT viable" in panel
        assert "bound to nvme" in panel.replace("\n", " ") and "bound to mlx5_core" in panel.replace("\n", " ")


async def test_gpus_screen_draws_the_mig_slice_bar(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("4")
        await pilot.pause(0.1)
        table = app.screen.query_one("#gpu-table", KeyedTable)
        mig_row = next(i for i, r in enumerate(_cells(table)) if r[4].startswith("enabled"))
        table.move_cursor(row=mig_row)
        await pilot.pause(0.1)
        panel = _text(app.screen.query_one("#gpu-panel", Static))
        assert "MIG enabled" in panel
        assert "[" in panel and "3g.40gb" in panel and "2g.20gb" in panel and "1g.10gb" in panel
        assert "slices 0-3" in panel and "util N/A" in panel
        assert "0       1       2       3       4       5       6       7" in panel


async def test_vms_screen_marks_cross_numa_vm(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("5")
        await pilot.pause(0.1)
        table = app.screen.query_one("#vm-table", KeyedTable)
        rows = {r[0]: r for r in _cells(table)}
        assert "CROSS" in rows["train-b"][7]
        assert rows["train-a"][7] == "ok"
        assert rows["train-c"][4] == "-"  # the Steal column: none for a VM that is not running
        table.move_cursor(row=list(rows).index("train-b"))
        await pilot.pause(0.1)
        panel = _text(app.screen.query_one("#vm-panel", Static))
        assert "not on the GPU's NUMA node" in panel
        assert "node 0 package 0" in panel and "node 1 package 1" in panel


async def test_topology_matrix_and_tree(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("2")
        await pilot.pause(0.1)
        matrix = _text(app.screen.query_one("#matrix", Static))
        rows = {ln.split()[0]: ln.split()[1:] for ln in matrix.splitlines()
                if ln.strip() and ln.split()[0] in ("G0", "G4", "G8") and len(ln.split()) == 16}
        assert rows["G0"][:2] == ["X", "PIX"]  # G1 on vfio-pci: NVML cannot see it, its PCIe level stays
        # NVLink through the NVSwitches between the GPUs NVML sees, across the sockets too (nvidia-smi topo -m)
        assert rows["G0"][4] == "NV18" and rows["G4"][7] == "NV18"
        assert rows["G8"][8:10] == ["X", "NV12"]  # the H100 PCIe pair: 12 links over their NVLink bridges
        assert rows["G0"][5] == "SYS" and rows["G4"][5] == "PIX"  # G5 (vfio-pci): across sockets; one switch
        assert "→ train-a" in matrix and "smi –" in matrix and "smi 3" in matrix
        tree = _text(app.screen.query_one("#tree", Static))
        assert "NUMA node 0" in tree and "NUMA node 1" in tree and "[vfio-pci]" in tree
        assert "[vfio-pci]  → train-a" in tree


async def test_help_lists_the_command_registry(demo_seams):
    from nodeconsole.screens.commands import COMMANDS

    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        body = _text(app.screen.query_one("#help-body", Static))
        for c in COMMANDS:
            assert c.title in body and c.help in body
        await pilot.press("escape")


async def test_filter_and_details(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("5")
        await pilot.pause(0.1)
        await pilot.press("slash", *"train")
        await pilot.pause(0.5)
        table = app.screen.query_one("#vm-table", KeyedTable)
        names = [r[0] for r in _cells(table)]
        assert names and all("train" in n for n in names)
        await pilot.press("enter")  # back to the table
        await pilot.press("enter")  # details of the selected VM
        await pilot.pause(0.1)
        body = _text(app.screen.query_one("#details-body", Static))
        assert "vCPU" in body and "memory policy" in body
        await pilot.press("escape")
        await pilot.pause(0.1)
        await pilot.press("escape")  # clears the filter
        await pilot.pause(0.5)
        assert len(_cells(app.screen.query_one("#vm-table", KeyedTable))) == len(app.snapshot.vms)


async def test_a_filter_typed_in_one_go_filters_by_all_of_it(demo_seams):
    """Over SSH `/train` arrives as one read: every key is queued before the first is handled. The keys
    after `/` go to the filter line, not to bindings (`t` theme, `n` pin…); `/` inside it is text."""
    from textual import events

    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("5")
        await pilot.pause(0.1)
        theme = app.theme
        for ch in "/train/":
            app.post_message(events.Key("slash" if ch == "/" else ch, ch))
        await pilot.pause(0.5)
        box = app.screen.query_one("#filter")
        assert box.value == "train/" and app.focused is box and app.theme == theme
        assert not app.screen.query("PlanModal")  # `n` did not plan a pinning


async def test_refresh_keeps_cursor_and_pause_stops_polls(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("5")
        table = app.screen.query_one("#vm-table", KeyedTable)
        table.move_cursor(row=4)
        polls = app.polls
        await pilot.pause(0.6)
        assert app.polls >= polls + 2
        assert table.cursor_row == 4
        await pilot.press("p")
        await pilot.pause(0.2)
        frozen = app.polls
        await pilot.pause(0.5)
        assert app.polls == frozen
        banner = _text(app.screen.query_one("#banner", Static))
        assert "paused" in banner
        await pilot.press("p")
        await pilot.pause(0.5)
        assert app.polls > frozen


async def test_source_loss_shows_banner_and_recovers(demo_seams):
    import pynvml

    app = NodeConsoleApp(demo_seams, interval=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        lib = demo_seams.nvml_lib
        # the driver goes away under a running console
        lib.set_no_driver(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        pynvml.nvmlShutdown()
        for _ in range(40):
            await pilot.pause(0.1)
            if app.snapshot.sources.nvml != "ok":
                break
        await pilot.pause(0.1)
        assert app.snapshot.sources.nvml.startswith("unavailable")
        banner = _text(app.screen.query_one("#banner", Static))
        assert "nvml unavailable" in banner
        # GPUs on vfio and every sysfs fact are still there
        assert len(app.snapshot.gpus) == 10 and app.screen.query_one("#banner").display
        lib.set_no_driver(None)
        for _ in range(80):
            await pilot.pause(0.1)
            if app.snapshot.sources.nvml == "ok":
                break
        assert app.snapshot.sources.nvml == "ok"
        await pilot.pause(0.1)
        assert not app.screen.query_one("#banner").display


async def test_libvirt_loss_shows_banner_and_recovers(demo_seams):
    from pathlib import Path

    app = NodeConsoleApp(demo_seams, interval=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        node = Path(demo_seams.libvirt_uri.removeprefix("test://"))
        hidden = node.with_suffix(".away")
        node.rename(hidden)
        app.collector._libvirt._conn.close()  # the daemon drops us
        for _ in range(40):
            await pilot.pause(0.1)
            if app.snapshot.sources.libvirt != "ok":
                break
        assert app.snapshot.sources.libvirt.startswith("unavailable")
        assert "libvirt unavailable" in _text(app.screen.query_one("#banner", Static))
        assert app.snapshot.vms == () and len(app.snapshot.gpus) == 10
        hidden.rename(node)
        for _ in range(40):
            await pilot.pause(0.1)
            if app.snapshot.sources.libvirt == "ok":
                break
        assert app.snapshot.sources.libvirt == "ok" and len(app.snapshot.vms) == 14


async def test_theme_switch(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.5, theme="light")
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        assert app.theme == "nodeconsole-light"
        # the theme chosen at start is in place from the first parse of the stylesheet on
        assert {"-theme-nodeconsole-light", "-light-mode"} <= set(app.classes) and "-dark-mode" not in app.classes
        assert app.screen.styles.background.hex.lower() == "#ffffff"
        await pilot.press("t")
        assert app.theme == "nodeconsole-contrast"
        await pilot.pause()
        assert "-dark-mode" in app.classes and app.screen.styles.background.hex.lower() == "#000000"


async def test_gpus_panel_shows_the_health_verdict_and_the_event_in_local_time(demo_seams, monkeypatch):
    from nodeconsole.actions.cli import main
    from nodeconsole.console.gpu_events import local_text

    monkeypatch.setenv("TZ", "Asia/Kolkata")  # local time is not UTC here: the panel must show local time
    import time as _time

    _time.tzset()
    try:
        before = _time.time()
        assert main(["demo", "inject", "aer", "0000:9a:00.0", "fatal"]) == 0
        app = NodeConsoleApp(demo_seams, interval=0.5)
        async with app.run_test(size=SIZE) as pilot:
            await _started(app, pilot)
            await pilot.press("4")
            await pilot.pause(0.1)
            table = app.screen.query_one("#gpu-table", KeyedTable)
            table.move_cursor(row=next(i for i, r in enumerate(_cells(table)) if r[2] == "0000:9a:00.0"))
            assert await wait_until(pilot, lambda: "unhealthy" in _text(app.screen.query_one("#gpu-panel", Static)))
            panel = _text(app.screen.query_one("#gpu-panel", Static)).replace("\n", " ")
            assert "health unhealthy: uncorrectable AER error (fatal)" in panel
            assert "AER fatal  VM train-c" in panel
            # the event's local time (+05:30), to the second of the injection or just after
            assert any(local_text(before + d) in panel for d in range(0, 4)), panel
    finally:
        monkeypatch.setenv("TZ", "UTC")
        _time.tzset()
