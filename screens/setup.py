"""7 Setup: the host's readiness (the doctor's checks) and the guided way from bare to ready.

The checks are listed in dependency order (firmware → kernel command line → modules → driver → GPU
modes → hugepages and host cores → VM placement); the cursor starts on the next step that is not done.
For the selected check the panel says what is wrong, why it matters, what was read, and the fix; `f`
plans that fix, `F` plans every fix that can be planned at once — one boot-loader edit, one initramfs
rebuild — so the admin applies them and reboots once. Plans go through the same plan → confirm →
apply → verify → audit flow as every other change. A fix that waits for a reboot stays marked
"pending reboot" until the host has rebooted; the doctor then says whether it took effect.

The doctor reads files (the root seam) and the audit log: it runs in a thread worker, never on the UI
thread, at most every few seconds and right after a change.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.doctor.model import CHECK_IDS, ROLES, CheckResult, DoctorReport
from nodeconsole.console.hosttext import visible
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.cadence import REFRESH_S
from nodeconsole.screens.messages import PlanChange
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.screens.widgets.text import host_text, plain_text

if TYPE_CHECKING:
    from nodeconsole.console.model import HostSnapshot
    from nodeconsole.console.seams import Seams

COLS = [("step", "#"), ("status", "Status"), ("check", "Check"), ("finding", "Finding")]
MARK = {"pass": ("✔ pass", "green"), "warn": ("▲ warn", "yellow"), "fail": ("✖ fail", "bold red"),
        "skip": ("– skip", "dim")}
_ORDER = {cid: i for i, cid in enumerate(CHECK_IDS)}


def todo(report: DoctorReport) -> list[CheckResult]:
    """The checks still to act on, in setup order: failures and warnings (pending ones included)."""
    return [c for c in ordered(report) if c.status in ("fail", "warn")]


def ordered(report: DoctorReport) -> list[CheckResult]:
    return sorted(report.checks, key=lambda c: _ORDER.get(c.id, len(_ORDER)))


def fixable(report: DoctorReport) -> list[CheckResult]:
    """Checks not passing whose fix can be planned and is not already waiting for a reboot."""
    return [c for c in todo(report) if c.fix is not None and c.fix.plannable
            and not c.pending.startswith("pending reboot")]


def summary_text(report: DoctorReport) -> Text:
    n = report.counts()
    t = Text()
    t.append(f"Role {report.role}: ")
    for status in ("pass", "warn", "fail", "skip"):
        label, style = MARK[status]
        t.append(f"{n.get(status, 0)} {status}", style=style if n.get(status) else "")
        t.append("  ")
    rest = todo(report)
    pending = [c for c in report.checks if c.pending.startswith("pending reboot")]
    fixes = fixable(report)
    t.append("\n")
    if not rest:
        t.append("Ready: every check passes or is skipped with a reason.", style="green")
    elif fixes:
        reboot = any(c.fix is not None and c.fix.needs_reboot for c in fixes)
        names = ", ".join(c.id for c in fixes)
        t.append(f"Next: F plans the fixes of {names} at once"
                 + (" — apply them, then reboot once." if reboot else "."))
    elif pending:
        t.append(f"Reboot the host to finish: {', '.join(c.id for c in pending)} wait for it "
                 "(the demo host: `nodeconsole demo reboot`).", style="yellow")
    else:
        t.append("What is left needs the admin's hands (firmware, hardware or VM sizing): see each "
                 "check's fix.")
    if pending and fixes:
        t.append(f"\nPending reboot: {', '.join(c.id for c in pending)}.", style="yellow")
    return t


def check_text(c: CheckResult) -> Text:
    """The selected check: what is wrong, why it matters, what was read, and the fix. Findings and
    evidence quote the host: plain text with visible escapes."""
    label, style = MARK.get(c.status, (c.status, ""))
    t = Text()
    t.append(f"{label}  ", style=style)
    t.append(f"{c.id}", style="bold")
    t.append(f"  ({c.group})")
    if c.title:
        t.append(f"  {visible(c.title)}")
    t.append("\n")
    t.append_text(plain_text(c.finding))
    if c.pending:
        t.append(f"\n{visible(c.pending)}", style="yellow")
    if c.why:
        t.append("\nWhy it matters: ", style="bold")
        t.append_text(plain_text(c.why))
    if c.evidence:
        t.append("\nRead:", style="bold")
        for e in c.evidence:
            t.append("\n  ")
            t.append_text(host_text(e.path, 120))
            t.append(" = ")
            t.append_text(host_text(e.value, 200))
    if c.fix is not None and c.status != "pass":
        t.append("\nFix: ", style="bold")
        t.append_text(plain_text(c.fix.summary))
        if c.fix.needs_reboot:
            t.append(" (takes effect at the next boot)", style="yellow")
        for cmd in c.fix.commands:
            t.append("\n  $ ")
            t.append_text(host_text(cmd, 300))
        t.append("\n")
        t.append("f plans this fix" if c.fix.plannable else "This fix is done by hand.", style="dim")
    return t


class SetupScreen(SnapshotScreen):
    TITLE = "Setup"
    BINDINGS = [Binding("f", "fix", "Fix"), Binding("F", "fix_all", "Fix all"),
                Binding("o", "role", "Role")]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.role = "mixed"
        self.report: DoctorReport | None = None
        self._ran_at = 0.0  # monotonic time of the last doctor run
        self._ran_for: tuple[float, int, str] | None = None  # (snapshot time, changes applied, role)
        self._placed = False  # the cursor was put on the next step once
        self._wanted: str | None = None  # a check asked for (the Overview's `s`), shown when read

    def compose_body(self) -> ComposeResult:
        yield Static(Text("reading the host…"), id="setup-summary")
        yield KeyedTable(COLS, id="setup-steps")
        yield Static(id="setup-steps-more", classes="more")  # rows out of sight, when some are
        with VerticalScroll(id="setup-panel-scroll"):
            yield Static(id="setup-panel")

    # -- the doctor, off the UI thread -------------------------------------------------------------
    def render_snapshot(self, snap: HostSnapshot) -> None:
        changes = self.view.changes
        key = (snap.taken_at, changes, self.role)
        due = self._ran_for is None or key[1:] != self._ran_for[1:] or (
            key != self._ran_for and time.monotonic() - self._ran_at >= REFRESH_S)
        if due and self.view.seams is not None:
            self._ran_for, self._ran_at = key, time.monotonic()
            self._run_doctor(snap, self.view.seams, self.role)
        if self.report is not None:
            self._show_report(self.report)

    @work(thread=True, exclusive=True, group="doctor", exit_on_error=False)
    def _run_doctor(self, snap: HostSnapshot, seams: Seams, role: str) -> None:
        from nodeconsole.console.doctor.run import run_doctor

        try:
            changes = _audit_records(seams)
            report = run_doctor(snap, seams.root, role=role, changes=changes)
        except Exception as exc:  # a broken read degrades this screen, never the console
            self.app.call_from_thread(self._doctor_failed, exc)
            return
        self.app.call_from_thread(self._got_report, report)

    def _doctor_failed(self, exc: Exception) -> None:
        self.query_one("#setup-summary", Static).update(plain_text(f"the doctor could not read the host: {exc}"))

    def _got_report(self, report: DoctorReport) -> None:
        self.report = report
        self._show_report(report)

    # -- rendering -------------------------------------------------------------------------------
    def _show_report(self, report: DoctorReport) -> None:
        summary = summary_text(report)
        self.set_static("#setup-summary", lambda: summary, summary.plain)
        table = self.query_one("#setup-steps", KeyedTable)
        rows = []
        for n, c in enumerate(ordered(report), 1):
            label, style = MARK.get(c.status, (c.status, ""))
            finding = c.finding if not c.pending else f"{c.finding} [{c.pending}]"
            rows.append((c.id, (str(n), Text(label, style=style), c.id, Text(visible(finding)))))
        table.sync(rows)
        keys = [k for k, _ in rows]
        if self._wanted in keys:
            self._place(table, keys.index(self._wanted))
            self._wanted, self._placed = None, True
        elif not self._placed and rows:
            self._placed = True
            nxt = todo(report)
            if nxt:
                self._place(table, keys.index(nxt[0].id))
        self._show_check(table.selected_key())

    def _place(self, table: KeyedTable, row: int) -> None:
        # the summary above the table changes with the report: the table keeps the row in sight as the
        # screen is laid out again
        table.show_row(row)

    def select_row(self, key: str) -> None:
        """Put the cursor on the check `key` (now, or when the doctor has read the host)."""
        self._wanted = key
        if self.report is not None:
            self._show_report(self.report)

    def _show_check(self, key: str | None) -> None:
        c = self.report.check(key) if self.report is not None and key else None
        text = check_text(c) if c is not None else Text("")
        self.set_static("#setup-panel", lambda: text, (key, text.plain))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None:
            self._show_check(event.row_key.value)

    def details_for(self, table: KeyedTable, key: str) -> tuple[str, str] | None:
        c = self.report.check(key) if self.report is not None else None
        return (f"Check {key}", check_text(c).plain) if c is not None else None

    # -- actions ---------------------------------------------------------------------------------
    def action_fix(self) -> None:
        key = self.query_one("#setup-steps", KeyedTable).selected_key()
        c = self.report.check(key) if self.report is not None and key else None
        if c is None:
            self.notify("the doctor has not read the host yet", severity="warning")
            return
        if c.status == "pass":
            self.notify(f"{c.id} passes: nothing to fix")
            return
        if c.status == "skip":
            self.notify(f"{c.id} was skipped: {c.finding}", severity="warning")
            return
        if c.fix is None or not c.fix.plannable:
            self.notify(f"{c.id}: this fix is done by hand — {c.fix.summary if c.fix else 'see the check'}",
                        severity="warning", timeout=8)
            return
        self._plan_fix((c.id,))

    def action_fix_all(self) -> None:
        if self.report is None:
            self.notify("the doctor has not read the host yet", severity="warning")
            return
        ids = tuple(c.id for c in fixable(self.report))
        if not ids:
            self.notify("nothing left that a plan can fix" if todo(self.report) else "the host is ready")
            return
        self._plan_fix(ids)

    def _plan_fix(self, ids: tuple[str, ...]) -> None:
        from nodeconsole.actions.session import DoctorFix

        self.app.post_message(PlanChange(DoctorFix(ids, role=self.role)))

    def action_role(self) -> None:
        self.role = ROLES[(ROLES.index(self.role) + 1) % len(ROLES)]
        self.notify(f"doctor role: {self.role}")
        if self.snapshot is not None:
            self.render_snapshot(self.snapshot)



def _audit_records(seams: Seams) -> list[AuditRecord]:
    """The audit log's records (the doctor marks fixes waiting for a reboot). Unreadable: none."""
    from nodeconsole.console.audit_log import host_audit

    try:
        return list(host_audit(seams).records())
    except Exception:
        return []
