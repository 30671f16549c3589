"""6 NCCL: the quick NCCL check of this host's GPUs. Preflight findings for the current snapshot, a run
of all_reduce_perf (or the PyTorch benchmark) with a progress bar advancing row by row, the rows as a
table and as bandwidth bars, and the verdict against the topology.

The check takes the idle, healthy GPUs the host drives unless the admin chooses others with `P` (as
`--gpus` does); a run that prints no new row for a while is shown as looking stalled, and after a run
the screen says what ran.

Nothing here blocks the UI: the preflight and the run happen in thread workers, rows reach the UI
through `app.call_from_thread`, and cancel (`c`) kills the run's whole process group. Leaving the app
cancels a run still going.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, ProgressBar, Static

from nodeconsole.actions.nccl.commands import LocalCommand, format_command, sweep_args
from nodeconsole.actions.nccl.finding import Finding
from nodeconsole.actions.nccl.parse import Cell, Row
from nodeconsole.actions.nccl.pick import auto_pick, conditions
from nodeconsole.actions.nccl.run import (
    DEFAULT_STALL,
    DEFAULT_TIMEOUT,
    NcclRun,
    Stall,
    SweepProgress,
    SweepResult,
    average_text,
)
from nodeconsole.actions.nccl.snapshot_topology import LocalPlan, Preflight, local_check_command, read_preflight
from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.seams import Seams
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.nccl_pick import GpuChoice, GpuPickModal
from nodeconsole.screens.widgets.hinted_scroll import HintedScroll
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.screens.widgets.text import plain_text, severity_text

ROW_COLS = [("size", "Size"), ("oop_alg", "algbw"), ("oop_bus", "busbw"), ("oop_wrong", "#wrong"),
            ("ip_alg", "in-place algbw"), ("ip_bus", "busbw"), ("ip_wrong", "#wrong")]
CHART_WIDTH = 36
CHART_BARS = 8
BLOCKS = "▁▁▂▃▄▅▆▇█"  # index 0..8; zero still draws a floor so the size axis stays visible
BAR = "█"
PARTS = " ▏▎▍▌▋▊▉"
# What makes a run impossible (rather than merely worth a warning).
BLOCKING = ("nccl.no_gpu", "nccl.gpu_not_host", "nccl.gpu_mig", "nccl.gpu_vgpu")


def size_label(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _bw(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.2f}"


def _wrong(c: Cell | None) -> Text:
    if c is None:
        return Text("-")
    if c.wrong is None:
        return Text("N/A")
    return Text(str(c.wrong), style="bold red" if c.wrong else "")


def row_cells(row: Row) -> tuple:
    ip = row.in_place
    return (size_label(row.size), _bw(row.out_of_place.algbw), _bw(row.out_of_place.busbw), _wrong(row.out_of_place),
            _bw(ip.algbw if ip else None), _bw(ip.busbw if ip else None), _wrong(ip))


def chart(rows: Sequence[Row], width: int = CHART_WIDTH, bars: int = CHART_BARS) -> Text:
    """Bus bandwidth by message size: a sparkline over every size, then bars for the largest sizes
    (where the bandwidth plateau shows; the small sizes measure latency)."""
    vals = [(r.size, r.busbw) for r in rows]
    top = max((b for _, b in vals if b is not None), default=0.0)
    out = Text()
    if not vals:
        return out
    out.append(f"bus bandwidth by size (GB/s, max {top:.2f})\n", style="bold")
    spark = "".join(" " if b is None else BLOCKS[min(8, round(b / top * 8))] if top > 0 else BLOCKS[0]
                    for _, b in vals)
    out.append(f"{size_label(vals[0][0]):>8} ")
    out.append(spark, style="green")
    out.append(f" {size_label(vals[-1][0])}\n")
    for size, b in vals[-bars:]:
        out.append(f"{size_label(size):>8} │")
        if b is None:
            out.append(" N/A\n", style="dim")
            continue
        eighths = round(b / top * width * 8) if top > 0 else 0
        out.append(BAR * (eighths // 8) + (PARTS[eighths % 8] if eighths % 8 else ""), style="green")
        out.append(f" {b:.2f}\n")
    out.rstrip()
    return out


def findings_text(findings: Sequence[Finding]) -> Group:
    parts = []
    for f in findings:
        t = severity_text(f.severity, f.message)
        if f.severity != "info":  # notes stay one line; problems say what to do
            t.append(f"\n    fix: {visible(f.fix)}", style="dim")
        parts.append(t)
    return Group(*parts)


class NcclScreen(SnapshotScreen):
    TITLE = "NCCL"
    BINDINGS = [Binding("r", "run_check", "Run"), Binding("c", "cancel_check", "Cancel"),
                Binding("P", "pick_gpus", "GPUs")]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sweep = sweep_args()
        self.timeout: float | None = DEFAULT_TIMEOUT
        self.stall_after: float | None = DEFAULT_STALL  # seconds without a row before "looks stalled", at least
        self.selection: tuple[int, ...] | None = None  # GPUs chosen with P; None: the automatic pick
        self.stall: Stall | None = None  # the current silence of a running check
        self.ran: tuple[LocalCommand, LocalPlan] | None = None  # the command of the last run, and its plan
        self.kill_grace = 3.0  # seconds between SIGTERM and SIGKILL on cancel
        self.plan: LocalPlan | None = None
        self.preflight_findings: list[Finding] = []
        self.command: LocalCommand | None = None
        self.command_error = ""
        self.rows: list[Row] = []
        self.result: SweepResult | None = None
        self.running = False
        self._run: NcclRun | None = None
        self._stop = threading.Event()
        self._closing = False
        self._preflight_key: tuple | None = None

    def compose_body(self) -> ComposeResult:
        with HintedScroll(id="nccl-scroll"):
            with Horizontal(id="nccl-controls"):
                yield Button("Run (r)", id="nccl-run", variant="primary", compact=True)
                yield Button("Cancel (c)", id="nccl-cancel", compact=True, disabled=True)
                yield ProgressBar(id="nccl-progress", show_eta=False)
            yield Static("not run yet: r runs the check", id="nccl-status")
            yield Static(id="nccl-verdict")
            yield KeyedTable(ROW_COLS, id="nccl-rows")
            yield Static(id="nccl-chart")
            yield Static("reading the host…", id="nccl-plan")
            yield Static(id="nccl-preflight")
        yield Static(id="nccl-scroll-more", classes="more")  # lines out of sight, when some are

    def on_mount(self) -> None:
        super().on_mount()
        # Shown once there is something in them: before a run the preflight has the room.
        for wid in ("#nccl-progress", "#nccl-verdict", "#nccl-rows", "#nccl-chart"):
            self.query_one(wid).display = False

    # -- snapshot → preflight (thread) ------------------------------------------------------------------
    def render_snapshot(self, snap: HostSnapshot) -> None:
        # The preflight reads files (libraries, ACS); redo it only when the GPUs' ownership, the choice
        # of GPUs or a GPU's state (idle, busy, unhealthy) changes, not on every new utilization figure.
        states = tuple((c.gpu.index, c.state, c.unhealthy) for c in conditions(snap))
        key = (tuple((g.address, g.driver, g.owner.kind, g.owner.vms) for g in snap.gpus), states, self.selection)
        seams = self.view.seams
        if key != self._preflight_key and seams is not None:
            self._preflight_key = key
            self._preflight(snap, seams, key, self.selection)

    @work(thread=True, exclusive=True, group="nccl-preflight", exit_on_error=False)
    def _preflight(self, snap: HostSnapshot, seams: Seams, key: tuple, selection: tuple[int, ...] | None) -> None:
        try:
            found = read_preflight(snap, seams, self.sweep, dict(os.environ), selection)
        except Exception as exc:
            self._to_ui(self._preflight_failed, key, exc)
            return
        self._to_ui(self._preflight_done, key, found)

    def _preflight_failed(self, key: tuple, exc: Exception) -> None:
        if key != self._preflight_key:
            return
        self.query_one("#nccl-plan", Static).update(Text(f"preflight failed: {visible(exc)}", style="bold red"))

    def _preflight_done(self, key: tuple, found: Preflight) -> None:
        if key != self._preflight_key:
            return  # a newer snapshot's preflight is on its way
        plan, findings, cmd, err = found.plan, found.findings, found.command, found.command_error
        self.plan, self.preflight_findings, self.command, self.command_error = plan, findings, cmd, err
        self._show_plan()
        body = findings_text(findings) if findings else Text("preflight: nothing found", style="green")
        self.query_one("#nccl-preflight", Static).update(body)

    def _show_plan(self, running: tuple[LocalCommand, LocalPlan] | None = None) -> None:
        """The GPUs, topology and command: what would run, what is running, or what ran last."""
        plan, cmd = self.plan, self.command
        if plan is None:
            return
        t = plan.topology
        exp = plan.expected
        head = Text()
        how = ("picked: idle and healthy, P chooses others" if plan.automatic
               else "chosen with P; a in the choice returns to the automatic pick")
        head.append("GPUs ", style="bold")
        head.append(", ".join(f"{g.index} {g.address}" for g in plan.gpus) or "none the host can use")
        head.append(f" ({how})", style="dim")
        head.append(f"\nP2P {'possible' if t.p2p else 'not possible'} ({visible(plan.p2p_reason)}); "
                    f"NVLink {'yes' if t.nvlink else ('no' if plan.nvlink_known else 'not known (assumed absent)')}")
        head.append(f"\nexpected peak busbw {exp if exp is not None else 'no reference figure'}")
        shown = running or self.ran
        if shown is not None:
            verb = "running" if running is not None else "ran"
            ran_cmd, ran_plan = shown
            head.append(f"\n{verb} ({ran_cmd.kind}) on GPU{'s' if len(ran_plan.gpus) != 1 else ''} "
                        f"{', '.join(str(g.index) for g in ran_plan.gpus)}: ", style="bold")
            head.append(visible(format_command(ran_cmd.argv, ran_cmd.env)))
            if running is None and cmd is not None and (cmd.argv, cmd.env) != (ran_cmd.argv, ran_cmd.env):
                head.append(f"\nnext run ({cmd.kind}): ", style="bold")
                head.append(visible(format_command(cmd.argv, cmd.env)))
        elif cmd is not None:
            head.append(f"\nwould run ({cmd.kind}): ", style="bold")
            head.append(visible(format_command(cmd.argv, cmd.env)))
        if cmd is None:
            head.append(f"\nno command: {visible(self.command_error)}", style="yellow")
        self.query_one("#nccl-plan", Static).update(head)

    # -- choosing GPUs -----------------------------------------------------------------------------------
    def action_pick_gpus(self) -> None:
        snap = self.snapshot
        if self.running:
            self.notify("a check is running: choose GPUs when it has ended", timeout=3)
            return
        if snap is None:
            self.notify("no snapshot yet", timeout=3)
            return
        automatic = self.selection is None
        chosen = auto_pick(snap).indices if automatic else self.selection or ()
        self.app.push_screen(GpuPickModal(conditions(snap), chosen, automatic), self._gpus_chosen)

    def _gpus_chosen(self, choice: GpuChoice | None) -> None:
        if choice is None or choice.indices == self.selection:
            self.notify("GPU choice unchanged", timeout=3)
            return
        self.selection = choice.indices
        which = "the automatic pick" if choice.indices is None else "GPUs " + ", ".join(map(str, choice.indices))
        self.notify(f"the next run uses {which}", timeout=3)
        self.plan = None  # a run waits for the preflight of the new choice
        self.query_one("#nccl-plan", Static).update("reading the host…")
        snap = self.snapshot
        if snap is not None:
            self.render_snapshot(snap)

    # -- run (thread) ----------------------------------------------------------------------------------
    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "nccl-run":
            self.action_run_check()
        elif event.button.id == "nccl-cancel":
            self.action_cancel_check()

    def action_run_check(self) -> None:
        if self.running:
            self.notify("a check is already running (c cancels it)", timeout=3)
            return
        plan, seams = self.plan, self.view.seams
        if plan is None or seams is None:
            self.notify("the preflight has not finished yet", timeout=3)
            return
        blocking = [f for f in self.preflight_findings if f.code in BLOCKING]
        if blocking:
            self.notify(f"cannot run: {blocking[0].message}", severity="error", timeout=5)
            return
        self.rows, self.result, self.running = [], None, True
        self._stop = threading.Event()
        self.query_one("#nccl-rows", KeyedTable).sync([])
        self.query_one("#nccl-progress", ProgressBar).update(total=None, progress=0)
        self.query_one("#nccl-chart", Static).update("")
        self.query_one("#nccl-verdict", Static).update("")
        self.query_one("#nccl-progress").display = True
        self.query_one("#nccl-verdict").display = False
        self._set_status("starting…")
        self._buttons()
        self._run_worker(plan, seams, self._stop)

    @work(thread=True, exclusive=True, group="nccl-run", exit_on_error=False)
    def _run_worker(self, plan: LocalPlan, seams: Seams, stop: threading.Event) -> None:
        try:
            cmd = local_check_command(plan, None, self.sweep, this_machine=seams.local_programs)
            run = NcclRun(cmd.argv, cmd.env, timeout=self.timeout, on_progress=self._progress_from_thread,
                          kill_grace=self.kill_grace, stall_after=self.stall_after,
                          on_stall=self._stall_from_thread)
        except ValueError as e:
            self._to_ui(self._run_failed, str(e))
            return
        self._run = run
        self._to_ui(self._show_plan, (cmd, plan))
        if stop.is_set() or self._closing:  # cancelled (or leaving) while the command was being found
            run.cancel()
        result = run.run()
        self._run = None
        self._to_ui(self._run_done, plan, cmd, result)

    def _stall_from_thread(self, stall: Stall) -> None:
        if not self._closing:
            self.app.call_from_thread(self._on_stall, stall)

    def _on_stall(self, stall: Stall) -> None:
        if not self.running or self._stop.is_set():
            return
        self.stall = stall
        self._set_status(f"{stall.message()} (c cancels it)")

    def _progress_from_thread(self, p: SweepProgress) -> None:
        if not self._closing:
            self.app.call_from_thread(self._on_progress, p)

    def _on_progress(self, p: SweepProgress) -> None:
        self.stall = None
        self.rows.append(p.row)
        table = self.query_one("#nccl-rows", KeyedTable)
        table.sync((str(i), row_cells(r)) for i, r in enumerate(self.rows))
        if not table.filter_text:
            table.move_cursor(row=len(self.rows) - 1)  # follow the newest row
        self.query_one("#nccl-progress", ProgressBar).update(total=p.total, progress=p.done)
        self.query_one("#nccl-chart", Static).update(chart(self.rows))
        self.query_one("#nccl-rows").display = self.query_one("#nccl-chart").display = True
        of = f"/{p.total}" if p.total else ""
        self._set_status(f"running: row {p.done}{of}, {size_label(p.row.size)} at {_bw(p.row.busbw)} GB/s")

    def _run_failed(self, why: str) -> None:
        self.running = False
        self.query_one("#nccl-progress").display = False  # an indeterminate bar would spin forever
        self._set_status(f"cannot run: {why}")
        self._buttons()

    def _run_done(self, plan: LocalPlan, cmd: LocalCommand, result: SweepResult) -> None:
        self.result, self.running, self.stall = result, False, None
        if result.exit_code is not None or result.cancelled or result.timed_out:  # it did start
            self.ran = (cmd, plan)
        self._show_plan()
        p = result.parsed
        stopped = "timed out" if result.timed_out else "cancelled" if result.cancelled else ""
        state = stopped or (f"finished (exit {result.exit_code})" if result.exit_code is not None else "did not start")
        if not p.rows and stopped:
            self._set_status(f"{average_text(p, stopped)} ({result.duration_s:.1f} s)")
        else:
            peak = f", peak {_bw(p.peak_busbw)} GB/s" if p.rows else ""
            self._set_status(f"{state}: {len(p.rows)} rows, {average_text(p, stopped)}{peak}, "
                             f"NCCL {p.version or '-'} in {result.duration_s:.1f} s")
        if result.ok:
            bar = self.query_one("#nccl-progress", ProgressBar)
            bar.update(total=len(p.rows), progress=len(p.rows))
        verdict = Text("verdict", style="bold")
        self.query_one("#nccl-verdict", Static).update(Group(verdict, findings_text(result.findings(plan.topology))))
        self.query_one("#nccl-verdict").display = True
        self._buttons()

    def action_cancel_check(self) -> None:
        if not self.running:
            self.notify("no check is running", timeout=3)
            return
        self._stop.set()
        self._set_status("cancelling…")
        self._cancel_worker()

    @work(thread=True, group="nccl-cancel", exit_on_error=False)
    def _cancel_worker(self) -> None:
        run = self._run
        if run is not None:
            run.cancel()  # blocks through the kill grace: never on the UI thread

    def on_unmount(self) -> None:
        # Leaving the app: nothing of a running check may outlive it.
        self._closing = True
        self._stop.set()
        run = self._run
        if run is not None:
            # Off the UI thread (the kill waits for a grace period); a non-daemon thread, so the
            # process still waits for the check's process group to be gone before it exits.
            import threading

            threading.Thread(target=run.cancel, name="nccl-cancel", daemon=False).start()

    # -- helpers -----------------------------------------------------------------------------------------
    def _to_ui(self, fn, *args) -> None:
        """Hand a result to the UI thread; dropped when the app is already closing."""
        if self._closing:
            return
        try:
            self.app.call_from_thread(fn, *args)
        except Exception:
            pass

    def _set_status(self, text: str) -> None:
        self.query_one("#nccl-status", Static).update(plain_text(text))  # may quote paths, errors

    def _buttons(self) -> None:
        self.query_one("#nccl-run", Button).disabled = self.running
        self.query_one("#nccl-cancel", Button).disabled = not self.running
