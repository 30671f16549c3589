"""9 Events: GPU events from the kernel log (Xid, fallen off the bus, PCIe AER, host failures), the changes applied
through the audit log, and the sources the console lost or got back, newest first.

The kernel log is read by the collector's poll (in its worker, incrementally: console/event_watch.py);
its events and the source changes come in the snapshot the screen is handed. The audit log is read here
in a thread worker, on show and every few seconds — never on the UI thread.
Host text (process names, log lines, VM names, titles) is plain text.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from nodeconsole.console.audit_log import AuditRecord, Status
from nodeconsole.console.events import XID, KernelEvent
from nodeconsole.console.gpu_events import SourceChange, local_text
from nodeconsole.console.host_failures import FAILURES
from nodeconsole.console.hosttext import show
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.xid import RESET_GPU, lookup
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.cadence import REFRESH_S
from nodeconsole.screens.messages import PlanChange
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.screens.widgets.text import plain_text

if TYPE_CHECKING:
    from nodeconsole.actions.session import Request
    from nodeconsole.console.seams import Seams

COLS = [("when", "When"), ("kind", "What"), ("gpu", "GPU"), ("vm", "VM"), ("severity", "Severity"),
        ("meaning", "Meaning"), ("action", "Action")]
TEXT_MAX = 100


def _epoch(iso: str) -> float | None:
    import datetime as dt

    try:
        when = dt.datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def event_rows(snap: HostSnapshot | None, events: tuple[KernelEvent, ...], changes: list[AuditRecord],
               sources: tuple[SourceChange, ...]) -> list[tuple[str, tuple]]:
    """Rows newest first, in local time: kernel events (on the wall clock: console/event_time.py), applied
    changes and source changes in one order; events the log gives no wall-clock time (a tree without a
    boot time) on top, in log order."""
    index = {g.address: g.index for g in snap.gpus} if snap is not None else {}
    untimed: list[tuple[str, tuple]] = []
    dated: list[tuple[float, int, str, tuple]] = []
    for n, ev in enumerate(events):
        meaning = show(ev.text, TEXT_MAX)
        if ev.kind == XID and ev.xid is not None:
            meaning = lookup(ev.xid).meaning
        elif ev.failure in FAILURES:
            meaning = FAILURES[ev.failure].meaning
        gpu = f"{index[ev.gpu]} {ev.gpu}" if ev.gpu in index else ev.gpu
        row = (f"ev{n}", (ev.when, ev.what, gpu, Text(show(ev.vm or "-", 64)), ev.severity, Text(meaning), ev.action))
        if ev.wall is None:
            untimed.append(row)
        else:
            dated.append((ev.wall, n, *row))
    for n, r in enumerate(changes):
        at = _epoch(r.when or "")
        dated.append((at if at is not None else 0.0, n, f"ch{r.id}",
                      (local_text(at) if at is not None else "-", "change", "", "", str(r.result or "?"),
                       Text(show(r.title or "", TEXT_MAX)), r.action or "")))
    for n, src in enumerate(sources):
        dated.append((src.at, n, f"src{n}", (local_text(src.at), "source", "", "", "lost" if src.lost else "back",
                                            Text(show(f"{src.source}: {src.was} → {src.now}", TEXT_MAX)), "")))
    dated.sort(key=lambda x: (x[0], x[1]), reverse=True)
    return list(reversed(untimed)) + [(key, cells) for _, _, key, cells in dated]


def plan_for(ev: KernelEvent) -> Request | None:
    """The change an event's action names, as a request: a GPU reset where it says "reset GPU" (an Xid
    that needs a reset, a reset started with transactions pending, a refused power change); else None."""
    if ev.gpu and RESET_GPU.lower() in ev.action.lower():
        from nodeconsole.actions.session import Reset

        return Reset(ev.gpu)
    return None


class EventsScreen(SnapshotScreen):
    TITLE = "Events"
    BINDINGS = [Binding("f", "fix", "Fix")]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changes: list[AuditRecord] = []
        self._read_at = -REFRESH_S
        self._keys: list[str] = []

    def compose_body(self) -> ComposeResult:
        yield Static(Text("reading events…"), id="events-summary")
        yield KeyedTable(COLS, id="events-table")
        yield Static(id="events-table-more", classes="more")  # rows out of sight, when some are

    def render_snapshot(self, snap: HostSnapshot) -> None:
        if self.view.seams is not None and time.monotonic() - self._read_at >= REFRESH_S:
            self._read_at = time.monotonic()
            self._read_audit(self.view.seams)
        self._show()

    def on_screen_resume(self) -> None:
        self._read_at = -REFRESH_S
        super().on_screen_resume()

    @work(thread=True, exclusive=True, group="events", exit_on_error=False)
    def _read_audit(self, seams: Seams) -> None:
        from nodeconsole.console.audit_log import host_audit

        try:
            records = host_audit(seams).records()
        except Exception:  # no audit log (a replay, not read yet): the kernel events still show
            records = []
        self.app.call_from_thread(self._got, [r for r in records if r.result == Status.APPLIED])

    def _got(self, records: list[AuditRecord]) -> None:
        self.changes = records
        self._show()

    def _show(self) -> None:
        snap = self.snapshot
        events = snap.kernel_events if snap is not None else ()
        sources = snap.source_changes if snap is not None else ()
        error = snap.kernel_log_error if snap is not None else ""
        rows = event_rows(snap, events, self.changes, sources)
        table = self.query_one("#events-table", KeyedTable)
        if [k for k, _ in rows] != self._keys:  # new rows go on top: rebuild (the list is short)
            self._keys = [k for k, _ in rows]
            table.clear_rows()
        table.sync(rows)
        head = (f"{len(events)} GPU event(s) from the kernel log, {len(self.changes)} applied change(s), "
                f"{len(sources)} source change(s); newest first")
        self.query_one("#events-summary", Static).update(plain_text(head + (f"\nwarning: {error}" if error else "")))

    def _event(self, key: str | None) -> KernelEvent | None:
        events = self.snapshot.kernel_events if self.snapshot is not None else ()
        if key and key.startswith("ev") and key[2:].isdigit() and int(key[2:]) < len(events):
            return events[int(key[2:])]
        return None

    def action_fix(self) -> None:
        """`f`: plan the change the selected event's action names (shown in the plan modal, applied on yes)."""
        ev = self._event(self.query_one("#events-table", KeyedTable).selected_key())
        if ev is None:
            self.notify("select a GPU event: f plans what its action names", severity="warning")
            return
        request = plan_for(ev)
        if request is None:
            self.notify(f"no plan for this event's action: {ev.action}", timeout=6)
            return
        self.app.post_message(PlanChange(request))

    def details_for(self, table: KeyedTable, key: str) -> tuple[str, str] | None:
        ev = self._event(key)
        if ev is not None:
            lines = [f"{ev.what} on {ev.gpu} at {ev.when} (logged as {ev.time or '-'})", f"VM {ev.vm or '-'}",
                     f"severity {ev.severity}; action: {ev.action}", ev.text]
            if ev.pid is not None or ev.process:
                lines.append(f"pid {ev.pid if ev.pid is not None else '?'} {ev.process or ''}")
            if ev.port:
                lines.append(f"reported by port {ev.port}")
            if plan_for(ev) is not None:
                lines.append(f"f plans the reset of {ev.gpu} (the VMs holding it stopped and started around it)")
            return f"Event on {ev.gpu}", "\n".join(lines)
        return None
