"""GPU events in the console: an Xid 79 injected on the MIG GPU (VMs hold its MIG-backed vGPUs) and a
fatal AER error on the GPU train-a holds through vfio-pci each show in the Events view (9), in the GPU's
details, as an Overview problem naming the VM and the action, and in `events --json` with the VM."""
from __future__ import annotations

import io
import json

from rich.console import Console
from textual.widgets import Static

from nodeconsole.actions.cli import main
from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.collector import Collector
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.events import EventsScreen
from nodeconsole.screens.widgets.details import gpu_details
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

MIG_GPU, VFIO_GPU = "0000:3a:00.0", "0000:19:00.0"


def _rows(screen) -> list[str]:
    table = screen.query_one("#events-table", KeyedTable)
    return [" | ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


async def test_injected_events_reach_every_view(demo_seams, capsys):
    collector = Collector(demo_seams)
    assert not collector.collect().problems or all("Xid" not in p.message for p in collector.collect().problems)
    assert main(["demo", "inject", "xid", MIG_GPU, "79"]) == 0
    assert main(["demo", "inject", "aer", "19:00.0", "fatal"]) == 0
    assert main(["demo", "inject", "aer", VFIO_GPU, "sideways"]) == 2  # bad input: one line, nothing written
    capsys.readouterr()

    # the collector reads only what was added (the next poll finds nothing new)
    snap = collector.collect()
    assert [(e.gpu, e.xid, e.severity) for e in snap.kernel_events] == [(MIG_GPU, 79, "fatal"),
                                                                          (VFIO_GPU, None, "fatal")]
    assert collector.watch.poll(demo_seams.root, False) == []
    mig_vms = snap.kernel_events[0].vms
    assert mig_vms and snap.kernel_events[1].vms == ("train-a",)
    problems = {p.subject: p for p in snap.problems}
    assert "Xid 79" in problems[MIG_GPU].message and mig_vms[0] in problems[MIG_GPU].message
    # MIG slices of running VMs: the advice speaks of the VMs before the host's action
    assert problems[MIG_GPU].fix.startswith("VM mig-infer-a uses this GPU")  # mig-infer-b is shut off
    assert "then: reboot node" in problems[MIG_GPU].fix
    # a whole GPU a running VM holds: the guest and the VM first (the host cannot reset it while the VM runs)
    assert "train-a" in problems[VFIO_GPU].message
    assert problems[VFIO_GPU].fix.startswith("VM train-a's guest drives this GPU")
    assert "virsh shutdown train-a" in problems[VFIO_GPU].fix and "then: reset GPU" in problems[VFIO_GPU].fix
    assert snap.problems[0].severity == "error"
    details = gpu_details(snap, snap.gpu(VFIO_GPU), snap.kernel_events)
    assert "Last events (1" in details and "AER fatal  VM train-a" in details
    assert "Xid 79 fatal" in gpu_details(snap, snap.gpu(MIG_GPU), snap.kernel_events)
    collector.close()

    assert main(["--demo", "events", "--json"]) == 0
    out = {(e["gpu"], e["xid"]): e for e in json.loads(capsys.readouterr().out)}
    assert out[(MIG_GPU, 79)]["vm"] == ", ".join(mig_vms) and out[(VFIO_GPU, None)]["vm"] == "train-a"

    app = NodeConsoleApp(demo_seams, interval=60)
    async with app.run_test(size=(160, 40)) as pilot:
        def overview() -> str:  # what the Overview's problem list shows now
            console = Console(width=160, file=io.StringIO(), record=True)
            console.print(app.screen.query_one("#problems", Static).content)
            return console.export_text()

        assert await wait_until(pilot, lambda: app.polls >= 1 and any(
            "Xid 79" in p.message for p in app.snapshot.problems), tries=200)
        # the screen renders the snapshot the app posts it a moment later (a message): wait for the picture
        assert await wait_until(pilot, lambda: "Xid 79" in overview(), tries=100), overview()
        assert "train-a" in overview()
        await pilot.press("9")
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        assert await wait_until(pilot, lambda: len(_rows(screen)) >= 2)
        rows = _rows(screen)
        assert rows[0].split(" | ")[1] == "AER" and "train-a" in rows[0] and "reset GPU" in rows[0]
        assert "Xid 79" in rows[1] and MIG_GPU in rows[1] and mig_vms[0] in rows[1]
        assert "GPU has fallen off the bus" in rows[1]


def test_events_changes_and_source_changes_are_in_one_order_of_local_time():
    from nodeconsole.console.event_watch import SourceChange
    from nodeconsole.console.gpu_events import KernelEvent, local_text
    from nodeconsole.screens.events import event_rows

    def ev(wall):
        return KernelEvent(kind="xid", time="1.0", gpu="0000:19:00.0", xid=79, pid=None, process=None, text="t",
                           severity="fatal", action="reset GPU", wall=wall, uptime_s=1.0)

    t = 1_796_200_000.0  # 2026-12-02 08:26:40 UTC
    events = (ev(t), ev(None), ev(t + 20))
    changes = [AuditRecord.from_dict({"id": "c1", "when": "2026-12-02T08:26:50+00:00", "result": "applied",
                                      "title": "x"})]  # t + 10
    sources = (SourceChange(t + 5, "nvml", "ok", "unavailable: lost"),)
    rows = event_rows(None, events, changes, sources)
    # the undated event on top, then newest first across kinds: ev2 (t+20), the change (t+10), the source (t+5),
    # ev0 (t)
    assert [key for key, _ in rows] == ["ev1", "ev2", "chc1", "src0", "ev0"]
    assert rows[0][1][0] == "[1.000000]"  # no wall-clock time: the uptime
    cells = dict(rows)
    assert cells["ev2"][0] == local_text(t + 20) and cells["chc1"][0] == local_text(t + 10)
    assert cells["src0"][0] == local_text(t + 5)
