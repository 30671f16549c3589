"""The app glue: the only core module that imports Textual.

Polling: a one-shot timer starts a thread worker that collects one snapshot; when it finishes, the
UI swaps the snapshot in, renders the visible screen and re-arms the timer. Polls never overlap and
the UI thread never touches the host.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from textual import work
from textual.app import App, SystemCommand
from textual.screen import Screen

from nodeconsole.console.collector import Collector
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.seams import Seams
from nodeconsole.screens.commands import COMMANDS, bindings
from nodeconsole.screens.gpus import GpusScreen
from nodeconsole.screens.iommu import IommuScreen
from nodeconsole.screens.overview import OverviewScreen
from nodeconsole.screens.topology import TopologyScreen
from nodeconsole.screens.vms import VmsScreen
from nodeconsole.themes import CSS_PATH, NAMES, THEMES, resolve

HISTORY = 30  # samples of VM CPU % kept for the sparklines


class NodeConsoleApp(App):
    TITLE = "nodeconsole"
    CSS_PATH = CSS_PATH
    MODES = {"overview": OverviewScreen, "topology": TopologyScreen, "iommu": IommuScreen,
             "gpus": GpusScreen, "vms": VmsScreen, "nccl": lambda: _nccl_screen()}
    BINDINGS = bindings()

    def __init__(self, seams: Seams | Callable[[], Seams], interval: float = 1.0, theme: str | None = None,
                 collector: Collector | None = None) -> None:
        super().__init__()
        # Seams may come as a factory: the demo host is then prepared in the first poll's worker,
        # while Textual starts up, instead of before the first frame.
        self._seams_factory = None if isinstance(seams, Seams) else seams
        self.seams = seams if isinstance(seams, Seams) else None
        self.interval = interval
        self.collector = collector or (Collector(seams) if isinstance(seams, Seams) else None)
        self.snapshot: HostSnapshot | None = None
        self.vm_history: dict[str, deque] = {}
        self.paused = False
        self.note = ""
        self.polls = 0
        self._theme_name = resolve(theme)
        self.action_results: list = []  # outcomes of guided changes made from this console
        self._timer = None

    def on_mount(self) -> None:
        for t in THEMES:
            self.register_theme(t)
        self.theme = self._theme_name
        self.switch_mode("overview")
        self.poll_now()

    # -- polling -----------------------------------------------------------------------------------
    def poll_now(self) -> None:
        self._timer = None
        if not self.paused:
            self._poll()

    @work(thread=True, exclusive=True, group="poll", exit_on_error=False)
    def _poll(self) -> None:
        try:
            if self.collector is None:
                self.seams = self._seams_factory()
                self.collector = Collector(self.seams)
            if self.snapshot is None:
                # First frame fast: the GPUs and topology from sysfs, then the full picture.
                first = self.collector.collect(partial=True)
                self.call_from_thread(self._show_partial, first)
            snap = self.collector.collect()
        except Exception as exc:
            self.call_from_thread(self._poll_failed, exc)
            return
        self.call_from_thread(self._apply, snap)

    def _poll_failed(self, exc: Exception) -> None:
        self.note = f"collection failed: {exc}"
        self._rearm()

    def _show_partial(self, snap: HostSnapshot) -> None:
        if self.snapshot is None:
            self.snapshot = snap
            self.render_current()

    def _apply(self, snap: HostSnapshot) -> None:
        self.polls += 1
        self.note = ""
        self.snapshot = snap
        for v in snap.vms:
            self.vm_history.setdefault(v.name, deque(maxlen=HISTORY)).append(v.cpu_percent)
        for gone in set(self.vm_history) - {v.name for v in snap.vms}:
            del self.vm_history[gone]
        self.render_current()
        self._rearm()

    def _rearm(self) -> None:
        if not self.paused and self._timer is None:
            self._timer = self.set_timer(self.interval, self.poll_now)

    def render_current(self) -> None:
        screen = self.screen
        refresh = getattr(screen, "refresh_from_app", None)
        if refresh is not None:
            refresh()
        else:  # a modal is on top: refresh the screen below it
            for s in reversed(self.screen_stack):
                if hasattr(s, "refresh_from_app"):
                    s.refresh_from_app()
                    break

    # -- actions -----------------------------------------------------------------------------------
    def action_show(self, mode: str) -> None:
        if self.current_mode != mode:
            self.switch_mode(mode)

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.paused and self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.render_current()
        if not self.paused:
            self.poll_now()
        self.notify("refresh paused" if self.paused else "refresh resumed", timeout=2)

    def action_filter(self) -> None:
        opener = getattr(self.screen, "open_filter", None)
        if opener is not None:
            opener()

    def action_details(self) -> None:
        table_getter = getattr(self.screen, "main_table", None)
        table = table_getter() if table_getter else None
        if table is not None and table.selected_key() is not None:
            self.screen.open_details(table, table.selected_key())

    # -- guided changes --------------------------------------------------------------------------
    def _selected_gpu(self) -> str | None:
        table = self.screen.query("#gpu-table")
        if not table:
            self.notify("select a GPU on the GPUs screen (4) first", severity="warning")
            return None
        return table.first().selected_key()

    def action_passthrough(self) -> None:
        addr = self._selected_gpu()
        if addr:
            self._plan_worker("passthrough", addr)

    def action_release(self) -> None:
        addr = self._selected_gpu()
        if addr:
            self._plan_worker("release", addr)

    def action_mig_edit(self) -> None:
        """The MIG layout editor for the selected GPU; its plan goes through the plan modal and worker."""
        addr = self._selected_gpu()
        if not addr:
            return
        from nodeconsole.actions.plan import needs_typed_confirmation
        from nodeconsole.screens.mig_editor import MigEditor

        def chosen(result) -> None:
            if result is not None:
                host, plan = result
                self._ask(host, plan, needs_typed_confirmation(plan))

        self.push_screen(MigEditor(self.seams, addr, on_changed=self.collector.invalidate), chosen)

    def _selected_vm(self) -> str | None:
        table = self.screen.query("#vm-table")
        key = table.first().selected_key() if table else None
        if not key:
            self.notify("select a VM on the VMs screen (5) first", severity="warning")
        return key or None

    def action_pin(self) -> None:
        name = self._selected_vm()
        if name:
            from nodeconsole.actions.pinning import plan_pin

            self._plan_worker("pin", name, plan_pin)

    def action_pin_all(self) -> None:
        from nodeconsole.actions.pinning import plan_pin_all

        self._plan_worker("pin all", "", lambda host, snap, _subject: plan_pin_all(host, snap))

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _plan_worker(self, kind: str, address: str, build: Callable | None = None) -> None:
        """Build the plan off the UI thread (it re-reads the host), then ask on the UI thread.
        `build(host, snapshot, subject)` makes the plan; without it, passthrough or release."""
        from nodeconsole.actions.passthrough import plan_passthrough, plan_release
        from nodeconsole.actions.plan import RequestError, needs_typed_confirmation
        from nodeconsole.actions.runner import ActionHost

        try:
            host = ActionHost.from_seams(self.seams, on_changed=self.collector.invalidate)
            snap = host.snapshot()
            plan = (build or (plan_passthrough if kind == "passthrough" else plan_release))(host, snap, address)
        except (RequestError, Exception) as exc:
            self.call_from_thread(self.notify, f"{kind}: {exc}", severity="error", timeout=8)
            return
        typed = needs_typed_confirmation(plan)
        self.call_from_thread(self._ask, host, plan, typed)

    def _ask(self, host, plan, typed) -> None:
        from nodeconsole.screens.modals.plan import PlanModal

        can_apply = plan.ok and not plan.empty
        title = plan.title + ("" if can_apply else ("  (refused)" if not plan.ok else "  (nothing to do)"))

        def answered(yes: bool | None) -> None:
            if yes:
                self._apply_worker(host, plan)

        self.push_screen(PlanModal(title, plan.lines(), can_apply, typed), answered)

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _apply_worker(self, host, plan) -> None:
        from nodeconsole.actions.runner import Runner

        def progress(p) -> None:
            # brief: the steps scroll by; the outcome stays (below)
            self.call_from_thread(self.notify, f"[{p.index}/{p.total}] {p.phase}: {p.title}", timeout=1.5)

        result = Runner(host).run(plan, confirm=lambda _p: True, progress=progress)
        self.action_results.append(result)
        self.call_from_thread(self.notify, f"{plan.action}: {result.status} — {result.message}",
                              severity="information" if result.ok else "error", timeout=10)
        self.call_from_thread(self.poll_now_if_idle)

    def poll_now_if_idle(self) -> None:
        """Poll at once after a change, unless a poll is running (its end re-arms the timer)."""
        if any(w.group == "poll" and w.is_running for w in self.workers):
            return
        if self._timer is not None:
            self._timer.stop()
        self.poll_now()

    def action_nccl(self, what: str) -> None:
        """The NCCL screen's run/cancel, reachable from the palette; the screen binds r/c itself."""
        if self.current_mode != "nccl":
            self.notify("open the NCCL screen (6) first", severity="warning")
            return
        getattr(self.screen, f"action_{what}")()

    def action_help(self) -> None:
        from nodeconsole.screens.modals.help import HelpModal

        self.push_screen(HelpModal())

    def action_cycle_theme(self) -> None:
        i = NAMES.index(self.theme) if self.theme in NAMES else -1
        self.theme = NAMES[(i + 1) % len(NAMES)]

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # The palette lists the same registry as the bindings and the help screen.
        for c in COMMANDS:
            if c.key == "enter":
                continue
            yield SystemCommand(c.title, c.help, lambda a=c.action: self.run_action(a))
        for name in NAMES:
            yield SystemCommand(f"Theme: {name}", "switch theme", lambda n=name: setattr(self, "theme", n))


def _nccl_screen():
    # imported on first use: the NCCL checks are not needed for the first frame
    from nodeconsole.screens.nccl import NcclScreen

    return NcclScreen()


def run_app(seams: Seams | Callable[[], Seams], interval: float = 1.0, theme: str | None = None) -> int:
    from nodeconsole.console.cli import UsageError

    try:
        resolve(theme)
    except ValueError as e:
        raise UsageError(str(e)) from None
    NodeConsoleApp(seams, interval=interval, theme=theme).run()
    return 0
