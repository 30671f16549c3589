"""Pilot tests of the NCCL screen on the demo host, with the stand-in all_reduce_perf as the check:
preflight findings for the automatic pick of idle, healthy GPUs, choosing other GPUs (g), progress
advancing row by row, the rows table, the chart, the verdict, what ran, a stalled run shown as such, and
cancel (or leaving the app) stopping everything the run started.

The demo host is generated once for the module (the screen changes nothing on it); each test gets fresh
seams over it."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console
from textual.widgets import ProgressBar, SelectionList, Static

from nodeconsole.actions.nccl.parse import parse_text
from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams, simulated_host
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.nccl import NcclScreen, size_label
from nodeconsole.screens.nccl_pick import GpuChoice, GpuPickModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.actions.test_nccl_cli import synthetic_output
from tests.screens.conftest import FIXED_IDS

FAKE = Path(__file__).resolve().parents[1] / "actions" / "fixtures" / "fake_all_reduce_perf.py"
SIZE = (100, 40)


def _text(widget: Static) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content if hasattr(widget, "content") else widget.renderable)
    return console.export_text()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def _demo_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("nccl-panel") / "demo"
    ensure_demo(d)
    return d


@pytest.fixture()
def demo_seams(_demo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Seams:
    """Fresh seams (and simulated NVML) over the module's demo host."""
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(_demo_dir))
    host = ensure_demo(_demo_dir)
    root = Root(host.root)
    lib = SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True)
    return simulated_host(root=root, libvirt_uri=host.libvirt_uri, nvml_lib=lib, state_dir=_demo_dir,
                 pci_ids=FIXED_IDS)


@pytest.fixture()
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The console finds the stand-in through $NODECONSOLE_ALL_REDUCE_PERF; it replays a synthetic
    28-row sweep and records its pids."""
    exe = tmp_path / "bin" / "all_reduce_perf"
    exe.parent.mkdir()
    exe.write_text(f"#!{os.sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(FAKE)!r}\n"
                   f"runpy.run_path({str(FAKE)!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    output = tmp_path / "out.txt"
    output.write_text(synthetic_output(3.6))
    record = tmp_path / "record.json"
    for k in list(os.environ):
        if k.startswith(("NCCL_", "FAKE_NCCL_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("NODECONSOLE_ALL_REDUCE_PERF", str(exe))
    monkeypatch.setenv("FAKE_NCCL_OUTPUT", str(output))
    monkeypatch.setenv("FAKE_NCCL_RECORD", str(record))
    return {"exe": exe, "output": output, "record": record}


async def _until(pilot, cond, timeout: float = 10.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(step)


async def _nccl_screen(app, pilot) -> NcclScreen:
    await _until(pilot, lambda: app.polls >= 1)
    await pilot.press("6")
    await _until(pilot, lambda: isinstance(app.screen, NcclScreen) and app.screen.plan is not None)
    return app.screen


async def test_preflight_findings_for_the_idle_healthy_gpus(demo_seams, stand_in) -> None:
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _nccl_screen(app, pilot)
        snap = app.snapshot
        host = [g for g in snap.gpus if g.owner.kind == "host"]
        # the demo's host GPUs: 0 busy (python3, torchrun), 7 busy and downtrained with rows to remap, 4 idle,
        # 8 and 9 idle (the H100 PCIe pair)
        idle = [g for g in host if not g.processes and not g.link.downtrained]
        assert [g.index for g in idle] == [4, 8, 9]
        assert screen.plan.automatic and [g.address for g in screen.plan.gpus] == [g.address for g in idle]
        plan = _text(screen.query_one("#nccl-plan", Static))
        assert idle[0].address in plan and "picked: idle and healthy" in plan
        assert "would run (nccl-tests)" in plan and str(stand_in["exe"]) in plan
        preflight = _text(screen.query_one("#nccl-preflight", Static))
        assert f"GPU 0 ({snap.gpus[0].address}) skipped: busy: 2 processes (python3, torchrun)" in preflight
        assert f"GPU 7 ({snap.gpus[7].address}) skipped: busy: 1 process (ollama)" in preflight
        assert "degraded: " in preflight and "PCIe link x8 of x16" in preflight.replace("\n", " ")
        assert "only GPU" not in preflight  # three GPUs: links to measure
        assert "not run yet" in _text(screen.query_one("#nccl-status", Static))


async def test_P_chooses_the_gpus_of_the_next_run_and_the_screen_shows_what_ran(demo_seams, stand_in) -> None:
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _nccl_screen(app, pilot)
        snap = app.snapshot
        await pilot.press("P")
        await _until(pilot, lambda: isinstance(app.screen, GpuPickModal))
        modal = app.screen
        lst = modal.query_one("#nccl-pick-list", SelectionList)
        assert lst.selected == [4, 8, 9]  # the automatic pick, ticked
        options = [lst.get_option_at_index(i) for i in range(lst.option_count)]
        assert [o.value for o in options] == [g.index for g in snap.gpus]
        # the GPUs the host cannot drive are listed, marked and cannot be ticked
        prompts = {o.value: str(getattr(o.prompt, "plain", o.prompt)) for o in options}
        assert {o.value for o in options if o.disabled} == {1, 2, 3, 5, 6}
        assert "on vfio-pci (VM train-a)" in prompts[1] and "MIG enabled" in prompts[2]
        assert "busy: 2 processes (python3, torchrun)" in prompts[0] and "PCIe link x8 of x16" in prompts[7]
        assert "idle" in prompts[4]
        for i in (8, 9):  # untick the pair
            lst.highlighted = i
            await pilot.press("space")
        lst.highlighted = 0
        await pilot.press("space")  # tick GPU 0 (busy): allowed, with a warning
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, NcclScreen) and screen.plan is not None)
        assert screen.selection == (0, 4) and not screen.plan.automatic
        assert [g.index for g in screen.plan.gpus] == [0, 4]
        preflight = _text(screen.query_one("#nccl-preflight", Static))
        assert f"GPU 0 ({snap.gpus[0].address}) is busy: 2 processes" in preflight and "skipped" not in preflight
        plan = _text(screen.query_one("#nccl-plan", Static))
        assert "chosen with P" in plan and "would run (nccl-tests)" in plan
        await pilot.press("r")
        await _until(pilot, lambda: screen.result is not None and not screen.running, timeout=20)
        seen = json.loads(stand_in["record"].read_text())
        assert seen["env"]["CUDA_VISIBLE_DEVICES"] == f"{snap.gpus[0].uuid},{snap.gpus[4].uuid}"
        plan = _text(screen.query_one("#nccl-plan", Static))
        assert "would run" not in plan
        ran = plan[plan.index("ran (nccl-tests) on GPUs 0, 4: "):]
        assert f"CUDA_VISIBLE_DEVICES={snap.gpus[0].uuid},{snap.gpus[4].uuid}" in ran and str(stand_in["exe"]) in ran
        # back to the automatic pick
        await pilot.press("P")
        await _until(pilot, lambda: isinstance(app.screen, GpuPickModal))
        assert app.screen.query_one("#nccl-pick-list", SelectionList).selected == [0, 4]
        await pilot.press("a")
        await _until(pilot, lambda: isinstance(app.screen, NcclScreen) and screen.plan is not None)
        assert screen.selection is None and [g.index for g in screen.plan.gpus] == [4, 8, 9]
        plan = _text(screen.query_one("#nccl-plan", Static))
        assert "ran (nccl-tests) on GPUs 0, 4" in plan and "next run (nccl-tests)" in plan


async def test_run_advances_row_by_row_and_ends_with_a_verdict(demo_seams, stand_in, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_NCCL_DELAY", "0.03")
    expected = parse_text(stand_in["output"].read_text())
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _nccl_screen(app, pilot)
        screen._gpus_chosen(GpuChoice((0, 4)))  # two GPUs (one is busy): a bandwidth to judge
        await _until(pilot, lambda: screen.plan is not None)
        bar = screen.query_one("#nccl-progress", ProgressBar)
        table = screen.query_one("#nccl-rows", KeyedTable)
        seen: list[tuple[float, int, bool]] = []  # after each row: bar, table rows, child still running
        original = screen._on_progress

        def watch(p):
            original(p)
            pid = json.loads(stand_in["record"].read_text())["pids"][0]
            seen.append((bar.progress, len(table.ordered_rows), _alive(pid)))

        screen._on_progress = watch
        await pilot.press("r")
        await _until(pilot, lambda: screen.result is not None and not screen.running, timeout=20)
        # rows are shown as they come: the bar and the table grow with each report, never back, never
        # all at the end (a loaded machine may hand two rows over in one report: 0.03 s apart is tight)
        bars, rows = [s[0] for s in seen], [s[1] for s in seen]
        assert bars == sorted(set(bars)) and bars[-1] == 28 and len(bars) >= 14, bars
        assert rows == bars, "the table grows with the bar"
        assert seen[0][2], "the first row is shown while the test still runs"
        assert bar.total == 28 and bar.progress == 28
        cells = [[str(getattr(c, "plain", c)) for c in table.get_row(r.key)] for r in table.ordered_rows]
        assert len(cells) == len(expected.rows) == 28
        for got, row in zip(cells, expected.rows):
            assert got[0] == size_label(row.size)
            assert float(got[2]) == pytest.approx(row.out_of_place.busbw, abs=0.005)
            assert got[3] == "0" and got[6] == "0"
        chart = _text(screen.query_one("#nccl-chart", Static))
        assert "█" in chart and size_label(1 << 30) in chart
        verdict = _text(screen.query_one("#nccl-verdict", Static))
        assert "against expected" in verdict and "peak bus bandwidth" in verdict
        status = _text(screen.query_one("#nccl-status", Static))
        assert "finished (exit 0): 28 rows" in status
        snap = app.snapshot
        uuids = f"{snap.gpus[0].uuid},{snap.gpus[4].uuid}"
        assert json.loads(stand_in["record"].read_text())["env"]["CUDA_VISIBLE_DEVICES"] == uuids


async def test_cancel_kills_the_run_and_its_children(demo_seams, stand_in, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_NCCL_HANG_AFTER", "20")  # a few rows, then it hangs
    monkeypatch.setenv("FAKE_NCCL_CHILD", "1")
    monkeypatch.setenv("FAKE_NCCL_IGNORE_TERM", "1")  # only SIGKILL ends it
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _nccl_screen(app, pilot)
        screen.kill_grace = 0.3
        screen.stall_after = 0.3
        await pilot.press("r")
        await _until(pilot, lambda: stand_in["record"].exists() and len(screen.rows) > 0)
        pids = json.loads(stand_in["record"].read_text())["pids"]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        # no new row: the screen says it looks stalled, and the run goes on
        await _until(pilot, lambda: screen.stall is not None and screen.stall.rows == len(screen.rows) > 0)
        status = _text(screen.query_one("#nccl-status", Static))
        assert "looks stalled: no new row for" in status and f"after row {len(screen.rows)}" in status
        assert "c cancels it" in status
        assert screen.running and screen.result is None and all(_alive(p) for p in pids)
        await pilot.press("c")
        await _until(pilot, lambda: screen.result is not None, timeout=15)
        assert screen.result.cancelled and not screen.running
        assert not any(_alive(p) for p in pids)
        assert "cancelled" in _text(screen.query_one("#nccl-status", Static))
        assert "cancelled after" in _text(screen.query_one("#nccl-verdict", Static))
        assert 0 < len(screen.query_one("#nccl-rows", KeyedTable).ordered_rows) < 28


async def test_leaving_the_app_stops_a_running_check(demo_seams, stand_in, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_NCCL_HANG_AFTER", "20")
    monkeypatch.setenv("FAKE_NCCL_CHILD", "1")
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _nccl_screen(app, pilot)
        await pilot.press("r")
        await _until(pilot, lambda: stand_in["record"].exists() and len(screen.rows) > 0)
        pids = json.loads(stand_in["record"].read_text())["pids"]
        assert all(_alive(p) for p in pids)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, "the check outlived the app"
        time.sleep(0.05)


async def test_run_and_cancel_refuse_politely(demo_seams, stand_in) -> None:
    app = NodeConsoleApp(demo_seams, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _nccl_screen(app, pilot)
        await pilot.press("c")  # nothing running: nothing happens but a note
        await pilot.pause(0.1)
        assert not screen.running and screen.result is None
        assert "not run yet" in _text(screen.query_one("#nccl-status", Static))
