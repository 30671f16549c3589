"""The Events view (9) renders the snapshot it is handed: the kernel log's events, the source changes and
why the log cannot be read come in the snapshot (HostSnapshot.kernel_events, .source_changes,
.kernel_log_error), never from the app's collector; the snapshot's JSON leaves them out (each GPU's
events are in it, and `events --json` writes the log's)."""
from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console
from textual.app import App
from textual.widgets import Static

from nodeconsole.console.assembly import assemble
from nodeconsole.console.gpu_events import KernelEvent, SourceChange
from nodeconsole.console.model import Sources
from nodeconsole.screens.events import EventsScreen
from nodeconsole.screens.messages import HostView, SnapshotUpdated
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

GPU = "0000:19:00.0"
EVENT = KernelEvent(kind="xid", time="1.0", gpu=GPU, xid=79, pid=None, process=None, text="fell off",
                    severity="fatal", action="reset GPU", vms=("train-a",), wall=1_796_200_000.0, uptime_s=1.0)
LOST = SourceChange(1_796_200_005.0, "nvml", "ok", "unavailable: lost")


def _snapshot():
    snap = assemble(None, None, None, None, Sources())
    return replace(snap, kernel_events=(EVENT,), source_changes=(LOST,), kernel_log_error="no root: kmsg denied")


def test_the_snapshots_json_leaves_the_kernel_log_out():
    snap = _snapshot()
    data = snap.to_dict()
    assert not {"kernel_events", "source_changes", "kernel_log_error"} & set(data)
    assert data == assemble(None, None, None, None, Sources()).to_dict() | {"taken_at": data["taken_at"]}


async def test_the_events_view_shows_the_kernel_log_of_the_snapshot_it_is_handed():
    class Bare(App):  # no collector, no session: the screen has only what it is handed
        def on_mount(self) -> None:
            self.push_screen(EventsScreen())

    app = Bare()
    async with app.run_test(size=(160, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        screen.post_message(SnapshotUpdated(HostView(_snapshot())))
        table = screen.query_one("#events-table", KeyedTable)
        assert await wait_until(pilot, lambda: table.row_count == 2)
        rows = [" | ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
        assert "source" in rows[0] and "nvml: ok → unavailable: lost" in rows[0]
        assert "Xid 79" in rows[1] and "train-a" in rows[1]
        console = Console(width=160, file=io.StringIO(), record=True)
        console.print(screen.query_one("#events-summary", Static).content)
        summary = console.export_text()
        assert "1 GPU event(s)" in summary and "1 source change(s)" in summary
        assert "warning: no root: kmsg denied" in summary
        assert screen.details_for(table, "ev0") is not None
