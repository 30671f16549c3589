"""8 Changes: the audit log, newest first, and undo / redo of the selected change.

Each row is one recorded change: its id, when (UTC, as recorded), who, the action, the result, its state
in the undo history (undone, an undo, a redo) and whether it waits for a reboot. The panel shows the
selected record: its request, steps with their commands, failures and notes. `u` undoes the change the
selected row is about, `r` puts it back after an undo; both plan first and go through the same plan →
confirm → apply flow as every other change (the app's plan worker with an Undo / Redo request).

The log is read in a thread worker — on show, right after a change, and every few seconds (another
console or the CLI may have written it) — never on the UI thread.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from nodeconsole.console.audit_log import AuditRecord, Status
from nodeconsole.console.hosttext import show, visible
from nodeconsole.console.model import HostSnapshot
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.cadence import REFRESH_S
from nodeconsole.screens.messages import PlanChange
from nodeconsole.screens.widgets.hanging import hanging
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.screens.widgets.text import plain_text

if TYPE_CHECKING:
    from nodeconsole.console.seams import Seams

COLS = [("id", "Id"), ("when", "When (UTC)"), ("who", "Who"), ("action", "Action"), ("result", "Result"),
        ("state", "State"), ("title", "Title")]
BOOT_ID = "proc/sys/kernel/random/boot_id"
TITLE_MAX = 100  # a long title widens the table; the panel has it whole
Record = AuditRecord


def _or(value: str | None, default: str) -> str:
    return default if value is None else value


# -- the undo history of a record (pure: tested without a console) -----------------------------------

def original(record: Record, by_id: Mapping[str, Record]) -> Record:
    """The change an undo or redo is ultimately about: follow `undoes` back to a record that undoes
    nothing (a record it names that is missing from the log ends the walk)."""
    seen = {record.id}
    while record.undoes and record.undoes in by_id and record.undoes not in seen:
        record = by_id[record.undoes]
        seen.add(record.id)
    return record


def is_redo(record: Record, by_id: Mapping[str, Record]) -> bool:
    """Whether the record undoes an undo (puts a change back)."""
    target = by_id.get(record.undoes or "")
    return bool(target and target.undoes)


def pending_reboot(record: Record, boot_id: str) -> bool:
    """An applied change, not undone, that takes effect at the next boot and was applied in this boot
    (or the boot cannot be told)."""
    return (record.needs_reboot is True and record.result == Status.APPLIED
            and not record.undone_by and (not boot_id or record.boot_id == boot_id))


def state_text(record: Record, by_id: Mapping[str, Record], boot_id: str) -> str:
    """The record's place in the undo history, short: undone, undo, redo (… redone), reboot pending."""
    parts = []
    if record.undoes:
        parts.append("redo" if is_redo(record, by_id) else "undo")
        if record.undone_by:
            parts.append("undone" if is_redo(record, by_id) else "redone")
    elif record.undone_by:
        parts.append("undone")
    if pending_reboot(record, boot_id):
        parts.append("reboot pending")
    return ", ".join(parts)


def undo_target(record: Record, by_id: Mapping[str, Record]) -> tuple[str | None, str]:
    """(id to undo, '') for `u` on this row, or (None, why not): the change the row is about, while it
    is in effect."""
    o = original(record, by_id)
    if o.undone_by:
        return None, f"{o.id} is undone already (by {o.undone_by}): r redoes it"
    return o.id, ""


def redo_target(record: Record, by_id: Mapping[str, Record]) -> tuple[str | None, str]:
    """(undo record id to roll back, '') for `r` on this row, or (None, why not): the undo that
    reverted the change the row is about."""
    o = original(record, by_id)
    undo = o.undone_by
    if not undo:
        return None, f"{o.id} is in effect: nothing to redo (u undoes it)"
    return undo, ""


def latest_redo(records: Sequence[Record]) -> str | None:
    """The newest undo that still reverts its change (what a plain "Redo" puts back)."""
    by_id = {r.id: r for r in records}
    for r in reversed(records):
        target = by_id.get(r.undoes or "")
        if target is not None and not target.undoes and target.undone_by == r.id:
            return r.id
    return None


def _when(record: Record) -> str:
    """'2026-05-04T12:34:56+00:00' → '05-04 12:34' (the log's UTC time, never this machine's zone)."""
    when = record.when or "?"
    return f"{when[5:10]} {when[11:16]}" if len(when) >= 16 and when[10] == "T" else visible(when)[:11]


def _user(record: Record) -> str:
    who = record.who or {}
    return str(who.get("sudo_user") or who.get("user") or "?")


def _who(record: Record) -> str:
    """'root (uid 0, on /dev/pts/1, over ssh from 10.0.0.5, through sudo by alice)'."""
    who = record.who or {}
    more = [f"uid {who['uid']}" if who.get("uid") is not None else "",
            f"on {who['tty']}" if who.get("tty") else "",
            f"over ssh from {who['ssh_client']}" if who.get("ssh_client") else "",
            f"through sudo by {who['sudo_user']}" if who.get("sudo_user") else ""]
    more = [m for m in more if m]
    return f"{who.get('user', '?')}" + (f" ({', '.join(more)})" if more else "")


def change_rows(records: Sequence[Record], boot_id: str) -> list[tuple[str, tuple]]:
    """Table rows, newest first; host text (titles name VMs and GPUs) stays plain."""
    by_id = {r.id: r for r in records}
    rows = []
    for r in reversed(records):
        rows.append((r.id, (r.id, _when(r), _user(r), r.action or "?", str(r.result or "?"),
                            state_text(r, by_id, boot_id), Text(show(r.title or "", TITLE_MAX)))))
    return rows


def record_text(record: Record, records: Sequence[Record], boot_id: str) -> str:
    """The selected record in full: what, who, the request, its place in the undo history, the steps
    with their commands, failures and notes, and the keys / command that undo or redo it."""
    by_id = {r.id: r for r in records}
    rid = record.id
    out = [f"{rid}  {_or(record.action, '?')}  {_or(record.result, '?')}",
           record.title or "",
           f"when {_or(record.when, '?')}" + (f", finished {record.finished}" if record.finished else ""),
           f"by {_who(record)}"]
    request = record.request or {}
    if request:
        out.append("request: " + ", ".join(f"{k}={v}" for k, v in request.items() if v not in (None, "", [])))
    out += _history(record, by_id, boot_id)
    if record.failed:
        failed = record.failed
        out.append(f"failed at step {failed.get('step')} ({failed.get('title')}): {failed.get('error')}")
        out += [f"  undone: {u}" for u in record.undone]
        out += [f"  NOT undone: {u}" for u in record.undo_failed]
    steps = record.steps
    if steps:
        out.append(f"Steps ({len(steps)}):")
        for n, s in enumerate(steps, 1):
            out.append(f"  {n}. {s.get('title', '')}")
            if s.get("why"):
                out.append(f"     why: {s['why']}")
            out += [f"     $ {c}" for c in s.get("commands") or []]
            out += [f"     | {line}" for line in str(s.get("detail") or "").splitlines()]
            if s.get("needs_reboot"):
                out.append("     takes effect at the next boot")
    if record.notes:
        out.append("Notes:")
        out += [f"  - {n}" for n in record.notes]
    out.append(_keys(record, by_id))
    return "\n".join(out)


def _history(record: Record, by_id: Mapping[str, Record], boot_id: str) -> list[str]:
    out = []
    if record.undoes:
        o = original(record, by_id)
        verb = "redo: puts back" if is_redo(record, by_id) else "undo of"
        out.append(f"{verb} {record.undoes}" + (f" ({_or(o.title, '')})" if o is not record else ""))
    if record.undone_by:
        out.append(f"rolled back by {record.undone_by}")
    if pending_reboot(record, boot_id):
        out.append("pending reboot: applied in this boot; it takes effect after the next reboot")
    return out


def _keys(record: Record, by_id: Mapping[str, Record]) -> str:
    undo, _ = undo_target(record, by_id)
    redo, _ = redo_target(record, by_id)
    if undo:
        return f"u undoes {undo} (plan first; CLI: nodeconsole undo {undo} --apply)"
    if redo:
        return f"r redoes it (plan first; CLI: nodeconsole undo {redo} --apply)"
    return ""


# -- the screen ---------------------------------------------------------------------------------------

class ChangesTable(KeyedTable):
    """Newest first: a new record goes on top, where the keyed table (which appends new keys) cannot put
    it; a record that was not there rebuilds the rows, the cursor staying on its record. The log is
    small and changes rarely."""

    def sync(self, rows: Iterable[tuple[str, tuple]]) -> None:
        rows = list(rows)
        if self._rows and any(k not in self._rows for k, cells in rows if self._visible(cells)):
            cursor = self.selected_key()
            self.clear_rows()
            super().sync(rows)
            if cursor in self._rows:
                self.move_cursor(row=self.get_row_index(cursor))
            return
        super().sync(rows)


class ChangesScreen(SnapshotScreen):
    TITLE = "Changes"
    BINDINGS = [Binding("u", "undo_selected", "Undo"), Binding("r", "redo_selected", "Redo")]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[AuditRecord] = []
        self.boot_id = ""
        self.read_once = False  # the log has been read (an empty list then means "no changes")
        self._read_at = 0.0  # monotonic time of the last read
        self._read_for = -1  # the number of changes this console had applied at that read

    def compose_body(self) -> ComposeResult:
        yield Static(Text("reading the audit log…"), id="changes-summary")
        yield ChangesTable(COLS, id="changes-table")
        yield Static(id="changes-table-more", classes="more")  # rows out of sight, when some are
        with VerticalScroll(id="changes-panel-scroll"):
            yield Static(id="changes-panel")

    # -- the log, off the UI thread ----------------------------------------------------------------
    def render_snapshot(self, snap: HostSnapshot) -> None:
        self.refresh_log()
        self._show()

    def on_screen_resume(self) -> None:
        self._read_at = -REFRESH_S  # shown again: read the log now (render_snapshot does, given a view)
        super().on_screen_resume()
        if self.snapshot is None:
            self.refresh_log()

    def refresh_log(self) -> None:
        """Read the log again when it may have changed: a change was applied here since the last read,
        or a few seconds passed. Not before the app's view says which host (its first poll)."""
        changes, seams = self.view.changes, self.view.seams
        if seams is None:
            return
        if changes != self._read_for or time.monotonic() - self._read_at >= REFRESH_S:
            self._read_for, self._read_at = changes, time.monotonic()
            self._read_log(seams)

    @work(thread=True, exclusive=True, group="changes", exit_on_error=False)
    def _read_log(self, seams: Seams) -> None:
        from nodeconsole.console.audit_log import host_audit

        try:
            log = host_audit(seams)
            records = log.records()
            boot_id = seams.root.read(BOOT_ID) or ""
        except Exception as exc:  # an unreadable log degrades this screen, never the console
            self.app.call_from_thread(self._read_failed, exc)
            return
        self.app.call_from_thread(self._got, records, boot_id, str(log.path), list(log.problems))

    def _read_failed(self, exc: Exception) -> None:
        self.query_one("#changes-summary", Static).update(plain_text(f"cannot read the audit log: {exc}"))

    def _got(self, records: list[AuditRecord], boot_id: str, path: str, problems: list[str]) -> None:
        self.records, self.boot_id, self.read_once = records, boot_id, True
        head = (f"{len(records)} recorded change(s) in {path}, newest first; u undoes, r redoes the "
                "selected change (plan first)" if records else f"no recorded changes ({path})")
        summary = "\n".join([head, *(f"warning: {p}" for p in problems[:3])])
        self.query_one("#changes-summary", Static).update(plain_text(summary))
        self._show()

    # -- rendering -------------------------------------------------------------------------------
    def _show(self) -> None:
        table = self.query_one("#changes-table", KeyedTable)
        table.sync(change_rows(self.records, self.boot_id))
        self._show_record(table.selected_key())

    def _record(self, key: str | None) -> AuditRecord | None:
        return next((r for r in self.records if r.id == key), None) if key else None

    def _show_record(self, key: str | None) -> None:
        r = self._record(key)
        text = record_text(r, self.records, self.boot_id) if r is not None else ""
        self.set_static("#changes-panel", lambda: hanging(text), text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None:
            self._show_record(event.row_key.value)

    def details_for(self, table: KeyedTable, key: str) -> tuple[str, str] | None:
        r = self._record(key)
        return (f"Change {key}", record_text(r, self.records, self.boot_id)) if r is not None else None

    # -- undo / redo -----------------------------------------------------------------------------
    def _selected(self) -> AuditRecord | None:
        r = self._record(self.query_one("#changes-table", KeyedTable).selected_key())
        if r is None:
            why = ("the audit log is not read yet" if not self.read_once else
                   "no change selected" if self.records else "no recorded changes")
            self.notify(why, severity="warning")
        return r

    def action_undo_selected(self) -> None:
        from nodeconsole.actions.session import Undo

        r = self._selected()
        if r is None:
            return
        rid, why = undo_target(r, {x.id: x for x in self.records})
        if rid is None:
            self.notify(why, severity="warning")
            return
        self.app.post_message(PlanChange(Undo(rid)))

    def action_redo_selected(self) -> None:
        from nodeconsole.actions.session import Redo

        r = self._selected()
        if r is None:
            return
        rid, why = redo_target(r, {x.id: x for x in self.records})
        if rid is None:
            self.notify(why, severity="warning")
            return
        self.app.post_message(PlanChange(Redo(rid)))
