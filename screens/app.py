"""The Textual app (started by `nodeconsole` without a subcommand, through a lazy import in console/cli.py).

Polling: a one-shot timer asks the poll thread (`Poller`) for one snapshot; when it is collected, the
UI swaps the snapshot in, posts it to the visible screen (`SnapshotUpdated`) and re-arms the timer.
Polls never overlap and the UI thread never touches the host. Screens post what is selected
(`GpuSelected`, `VmSelected`); the actions act on that selection.
"""
from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual._compositor import CompositorUpdate
from textual.actions import parse as parse_action
from textual.app import App, SystemCommand
from textual.binding import BindingType
from textual.css.stylesheet import Stylesheet
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.timer import Timer
from textual.widget import AwaitMount
from textual.widgets import Input

from nodeconsole.console.first_look import FirstLook
from nodeconsole.console.hosttext import LINE_MAX, lines, visible
from nodeconsole.console.model import HostSnapshot
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.commands import COMMANDS, bindings
from nodeconsole.screens.messages import GpuSelected, HostView, SnapshotUpdated, VmSelected
from nodeconsole.screens.overview import OverviewScreen
from nodeconsole.screens.terminal import ScreenShadow
from nodeconsole.themes import CSS_PATH, NAMES, all_themes, resolve

if TYPE_CHECKING:  # the actions, the NCCL screen and the collector are imported on first use
    from nodeconsole.actions.plan import Plan
    from nodeconsole.actions.runner import Progress, RunResult
    from nodeconsole.actions.session import ActionSession, Request
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.seams import Seams

HISTORY = 30  # bars of VM CPU % kept for the sparklines
BAR_S = 5.0  # seconds of polls one sparkline bar averages: a sparkline moves once per bar, not per poll
FIRST_LOOK_WAIT_S = 0.25  # how long the first frame waits for the host's first, sysfs-only snapshot
GC_RESUME_S = 0.2  # after the first frame, when the garbage collector paused at launch resumes
GC_YOUNG_THRESHOLD = 10_000  # allocations between collections of the youngest generation, from then on
POLL_JOIN_S = 5.0  # how long a closing console waits for the poll under way (its thread is a daemon)
FIRST_POLL_LATEST_S = 1.0  # the first poll starts with the first frame, or after this long without one

# (action name, parameters) -> the screens (modes) the registry says the action works on
_WHERE: dict[tuple[str, tuple[object, ...]], tuple[str, ...]] = {
    parse_action(c.action)[1:]: c.screens for c in COMMANDS if c.screens}


class WholeCellScrollBar(ScrollBarRender):
    """Scrollbars in whole cells. Textual ends a thumb with eighth blocks (▃, ▆) for smoothness; on a
    terminal, and in what an admin copies from it, those read as characters left over at the screen's
    right edge. Every list also says in words how much of it is out of sight."""

    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8


ScrollBar.renderer = WholeCellScrollBar


class _ThriftyStylesheet(Stylesheet):
    """Textual's stylesheet, keeping its parsed sources while the CSS variables stay the same.

    Textual refreshes the whole stylesheet when a screen is first shown (`App.refresh_css`: new
    variables, then a reparse into a fresh stylesheet with an empty cache), even when the variables
    are the ones it already has: before the first frame that parsed the app's stylesheet and the
    default CSS three times over (~15 ms). Here equal variables keep the cache, and a reparse parses
    only what is not in it. New variables (a theme change) clear the cache as before; with a source
    that failed to parse, the reparse is Textual's own (it tries every source again)."""

    def set_variables(self, variables: dict[str, str]) -> None:
        if variables != self._variables:
            super().set_variables(variables)

    def reparse(self) -> None:
        if self._invalid_css:
            super().reparse()
        else:
            self.parse()  # on an error the rules stay as they were, as with Textual's reparse


class NodeConsoleApp(App):
    TITLE = "nodeconsole"
    DEFAULT_MODE = "overview"
    CSS_PATH = CSS_PATH
    # The Overview is the first screen; the others are imported when first shown (less to import and
    # hold before the first frame).
    MODES = {"overview": OverviewScreen, "topology": lambda: _screen("topology", "TopologyScreen"),
             "iommu": lambda: _screen("iommu", "IommuScreen"), "gpus": lambda: _screen("gpus", "GpusScreen"),
             "vms": lambda: _screen("vms", "VmsScreen"), "nccl": lambda: _screen("nccl", "NcclScreen"),
             "setup": lambda: _screen("setup", "SetupScreen"), "changes": lambda: _screen("changes", "ChangesScreen"),
             "events": lambda: _screen("events", "EventsScreen")}
    BINDINGS: ClassVar[list[BindingType]] = [*bindings()]

    def get_driver_class(self):
        """Textual's driver, except on Linux with no driver asked for by the environment: there the
        driver whose input thread sleeps until a key comes (screens/driver.py)."""
        from textual import constants

        if constants.DRIVER is None and sys.platform.startswith("linux"):
            from nodeconsole.screens.driver import QuietLinuxDriver

            return QuietLinuxDriver
        return super().get_driver_class()

    def __init__(self, seams: Seams | Callable[[], Seams] | FirstLook, interval: float = 1.0,
                 theme: str | None = None, collector: Collector | None = None) -> None:
        super().__init__()
        self.stylesheet = _ThriftyStylesheet()  # its variables are the theme's (_start_theme, below)
        # Seams may come as a factory: the demo host is then prepared in the first poll's worker,
        # after the first frame. A FirstLook (console/first_look.py) was started before Textual was
        # imported: its sysfs-only snapshot is usually ready for the first frame. The collector's
        # modules are imported by the first poll too (on its thread), unless seams are given ready.
        self._first = seams if isinstance(seams, FirstLook) else None
        # a failed first look is tried again by the next poll, through the same factory
        self._seams_factory: Callable[[], Seams] | None = None
        given: Seams | None = None
        if isinstance(seams, FirstLook):
            self._seams_factory = seams.factory
        elif callable(seams):
            self._seams_factory = seams
        else:
            given = seams
        self.seams = given
        self.interval = interval
        if collector is None and given is not None:
            from nodeconsole.console.collector import Collector

            collector = Collector(given)
        self.collector = collector
        self.snapshot: HostSnapshot | None = None
        # per VM, its sparkline's bars: the finished ones' means and the samples of the bar filling now
        self.vm_history: dict[str, _Bars] = {}
        self._bar_polls = max(1, round(BAR_S / interval)) if interval > 0 else 1
        self.paused = False
        self.note = ""
        self.polls = 0
        self._theme_name = resolve(theme)
        self.action_results: list[RunResult] = []  # outcomes of guided changes made from this console
        self.selected_gpu: str | None = None  # as the GPUs screen last said (GpuSelected)
        self.selected_vm: str | None = None  # as the VMs screen last said (VmSelected)
        self._timer: asyncio.TimerHandle | None = None  # the next poll, while one is due
        self.poller = Poller(self._poll)  # the polls' thread (started by the first poll)
        self._ui_context: contextvars.Context | None = None  # the app's context, for callbacks from threads
        self._first_poll: Timer | None = None  # armed until the first frame starts the polls
        self._first_view_sent = False  # the first screen was given the first look's view (_init_mode)
        self._frames_written = 0
        self.shadow = ScreenShadow()  # what the terminal shows: only changed cells are written
        self.gc_paused = False  # resume the garbage collector after the first frame (run_app)
        for t in all_themes():
            self.register_theme(t)
        self._start_theme(self._theme_name)

    def _start_theme(self, name: str) -> None:
        """Make `name` the theme before the stylesheet is first parsed. Setting `theme` the usual way
        has Textual parse the whole stylesheet again once the app runs (~10 ms of the first frame);
        this does what its watcher does (classes, ANSI colour filter, CSS variables) without it.
        Later changes (`t`) go through `theme` as usual."""
        self.set_reactive(App.theme, name)
        theme = self.current_theme
        self.set_class(True, f"-theme-{name}", update=False)
        self.set_class(theme.dark, "-dark-mode", update=False)
        self.set_class(not theme.dark, "-light-mode", update=False)
        self._refresh_truecolor_filter(self.ansi_theme)
        self.stylesheet.set_variables(self.get_css_variables())

    def _init_mode(self, mode: str) -> AwaitMount:
        first = self._first
        if mode == self.DEFAULT_MODE and first is not None and self.snapshot is None:
            if first.wait(FIRST_LOOK_WAIT_S) and first.snapshot is not None:
                self.snapshot = first.snapshot  # the first frame already lists the GPUs
        shown = super()._init_mode(mode)
        if mode == self.DEFAULT_MODE and self.snapshot is not None and not self._first_view_sent:
            # The first screen gets the view now, queued behind its mount and resume: the first frame
            # it draws shows the GPUs. Posted from on_mount instead, it arrived after that frame (an
            # empty screen first, the GPUs ~100 ms later).
            stack = self._screen_stacks.get(mode)
            if stack and isinstance(stack[0], SnapshotScreen):
                stack[0].post_message(SnapshotUpdated(self.host_view()))
                self._first_view_sent = True
        return shown

    def on_mount(self) -> None:
        self._ui_context = contextvars.copy_context()
        self.app_resume_signal.subscribe(self, lambda _app: self.shadow.reset())
        if not self._first_view_sent:
            self.render_current()
        # The first poll starts once the first frame is out (_display): its thread would otherwise take
        # turns with the first frame on the interpreter lock (opening libvirt, the NVML library, a full
        # collection). The timer is there in case no frame is ever drawn.
        self._first_poll = self.set_timer(FIRST_POLL_LATEST_S, self._start_polling)

    def _start_polling(self) -> None:
        if self._first_poll is not None:  # not started yet
            self.poll_now()

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Notifications quote host text (VM names in plan titles, libvirt errors): plain text with
        visible escapes, never markup, whatever the caller asks (a widget's notify lands here too)."""
        super().notify(lines(message, LINE_MAX), title=visible(title), severity=severity, timeout=timeout,
                       markup=False)

    def _display(self, screen: Screen, renderable) -> None:
        """Textual's display step, writing only the cells that differ from what the terminal shows
        (screens/terminal.py). Updates of another kind are written as they are, and the shadow
        forgotten. The first frame is written as Textual renders it (the whole screen either way;
        the shadow would take ~7 ms to find that every cell changed): the shadow, blank, then learns
        the screen from the updates that follow."""
        # Textual drops what is displayed during a batch (start-up composes and lays out the first
        # screen in one): only a frame written counts as the first
        written = renderable is not None and not self._batch_count
        if isinstance(renderable, CompositorUpdate) and not self.is_inline and self._frames_written:
            renderable = _ShadowedUpdate(renderable, self.shadow, self.size)
        elif renderable is not None:
            self.shadow.reset()
        super()._display(screen, renderable)
        if not written:
            return
        self._frames_written += 1
        if self._first_poll is not None:
            self.call_next(self._start_polling)
        if self.gc_paused:
            self.gc_paused = False
            self.set_timer(GC_RESUME_S, resume_gc)  # once the first frame has gone out

    def action_redraw(self) -> None:
        self.shadow.reset()
        self.refresh(layout=True)

    # -- polling -----------------------------------------------------------------------------------
    def on_unmount(self) -> None:
        """The app is closing: no poll is started any more (the next one's timer is the event loop's,
        which would outlive the app)."""
        self.paused = True
        self.poller.stop()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def poll_now(self) -> None:
        self._timer = None
        self._first_poll = None  # the polls have started (that timer, when it fires, does nothing)
        if not self.paused:
            self.poller.request()

    def _poll(self) -> None:
        """One poll, on the poller's thread: collect, then hand the snapshot to the UI thread."""
        try:
            collector = self.collector
            first, self._first = self._first, None
            if collector is None and first is not None:
                first.wait()
                if first.error is not None:
                    raise first.error
                if first.collector is not None:  # taken on a thread: its seams and collector are ours
                    self.seams, self.collector = first.seams, first.collector
                    collector = first.collector
                if self.snapshot is None and first.snapshot is not None:
                    self._from_thread(self._show_partial, first.snapshot)
            if collector is None:
                from nodeconsole.console.collector import Collector

                assert self._seams_factory is not None  # __init__ keeps the factory when it makes no collector
                self.seams = self._seams_factory()
                self.collector = collector = Collector(self.seams)
            if self.snapshot is None:
                # First frame fast: the GPUs and topology from sysfs, then the full picture.
                partial = collector.collect(partial=True)
                self._from_thread(self._show_partial, partial)
            snap = collector.collect()
        except Exception as exc:
            self._from_thread(self._poll_failed, exc)
            return
        try:
            self._from_thread(self._apply, snap)
        except Exception as exc:  # a view that cannot be drawn: said, and the next poll comes anyway
            self._from_thread(self._poll_failed, exc, "showing the host failed")

    def _poll_failed(self, exc: Exception, what: str = "collection failed") -> None:
        self.note = f"{what}: {exc}"
        self._rearm()

    def _show_partial(self, snap: HostSnapshot) -> None:
        if self.snapshot is None:
            self.snapshot = snap
            self.render_current()

    def _apply(self, snap: HostSnapshot) -> None:
        self.polls += 1
        self.note = ""
        self.snapshot = snap
        # bars start on whole multiples of the bar's polls, the same for every VM: between two bars only
        # the last one moves, so a sparkline costs the terminal one cell a second, not its width
        new_bar = (self.polls - 1) % self._bar_polls == 0
        for v in snap.vms:
            bars = self.vm_history.get(v.name)
            if bars is None:
                bars = self.vm_history[v.name] = _Bars()
            bars.add(v.cpu_percent, new_bar)
        if len(self.vm_history) != len(snap.vms):  # every VM of the snapshot is in it: some have gone
            for gone in set(self.vm_history) - {v.name for v in snap.vms}:
                del self.vm_history[gone]
        self.render_current()
        if self.polls == 1:
            self._resume_setup()
        self._rearm()

    @work(thread=True, exclusive=True, group="resume", exit_on_error=False)
    def _resume_setup(self) -> None:
        """A host set up from this console and rebooted since: open at the Setup screen, where the
        doctor says whether the fixes took effect and what the next step is (the audit log keeps
        that progress across the reboot)."""
        from nodeconsole.console.audit_log import Status, host_audit

        try:
            if self.seams is None:
                return
            records = host_audit(self.seams).records()
        except Exception:
            return  # no log, or unreadable: start where the console always starts
        applied = [r for r in records if r.result == Status.APPLIED and not r.undone_by]
        last = applied[-1] if applied else None
        if last is not None and last.fixes and last.needs_reboot:
            self.call_from_thread(self._open_setup)

    def _open_setup(self) -> None:
        if self.current_mode == "overview":  # the admin has not gone elsewhere meanwhile
            self.switch_mode("setup")

    def _rearm(self) -> None:
        # the event loop's own timer: a Textual timer is a task, a message and a callback look-up each
        # poll, for a callback that needs none of them
        if not self.paused and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self.poll_now,
                                                                context=self._ui_context)

    def _from_thread(self, callback: Callable[..., object], *args: object) -> None:
        """App.call_from_thread for a plain callback of ours: run on the event loop, in the app's context,
        and waited for, without the coroutine, task and signature inspection Textual's takes each time.
        Gives up, without running it, when the app has stopped."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        done = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                callback(*args)
            except BaseException as exc:  # raised in the calling thread, as call_from_thread does
                failed.append(exc)
            finally:
                done.set()

        try:
            loop.call_soon_threadsafe(run, context=self._ui_context)
        except RuntimeError:  # the loop has closed
            return
        while not done.wait(0.5):
            if loop.is_closed() or not loop.is_running():
                return
        if failed:
            raise failed[0]

    def host_view(self) -> HostView:
        history = {name: bars.values() for name, bars in self.vm_history.items()}
        return HostView(self.snapshot, history, self.paused, self.note, self.seams)

    def render_current(self) -> None:
        """Post the latest view to the screen the user sees (the one below a modal, if one is on top)."""
        for s in reversed(self.screen_stack):
            if isinstance(s, SnapshotScreen):
                s.post_message(SnapshotUpdated(self.host_view()))
                break

    def switch_mode(self, mode: str) -> AwaitMount:
        shown = super().switch_mode(mode)
        self.render_current()  # a screen shown again has only the view it was last given
        return shown

    def on_gpu_selected(self, message: GpuSelected) -> None:
        self.selected_gpu = message.address

    def on_vm_selected(self, message: VmSelected) -> None:
        self.selected_vm = message.name

    # -- actions -----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A command that works on some screens only is inactive elsewhere, so the footer leaves it
        out (Textual asks again for each screen it shows)."""
        if action == "filter" and (isinstance(self.focused, Input) or not isinstance(self.screen, SnapshotScreen)):
            return False  # `/` is text in a text field, and a dialog has no table of its own
        screens = _WHERE.get((action, tuple(parameters)))
        return not screens or self.current_mode in screens

    def _run_anywhere(self, action: str):
        """The palette's way in: runs an action whatever the screen, so one that works elsewhere says
        where (the footer and its key stay off on screens it does not work on)."""
        _, name, params = parse_action(action)
        if (name, params) in _WHERE:  # the registry's screen-bound actions are plain methods of the app
            return getattr(self, f"action_{name}")(*params)
        return self.run_action(action)

    def action_show(self, mode: str) -> None:
        if self.current_mode != mode:
            self.switch_mode(mode)

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.paused and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.render_current()
        if not self.paused:
            self.poll_now()
        self.notify("refresh paused" if self.paused else "refresh resumed", timeout=2)

    def action_filter(self) -> None:
        screen = self.screen
        if not isinstance(screen, SnapshotScreen):
            return
        if screen.main_table() is None:
            self.notify(f"/ filters a table's rows: the {screen.TITLE} screen has no table to filter",
                        severity="warning", timeout=4)
            return
        screen.open_filter()

    def action_details(self) -> None:
        screen = self.screen
        if not isinstance(screen, SnapshotScreen):  # a modal: no table of its own
            return
        table = screen.main_table()
        key = table.selected_key() if table is not None else None
        if table is not None and key is not None:
            screen.open_details(table, key)

    # -- guided changes --------------------------------------------------------------------------
    def _selected_gpu(self) -> str | None:
        if not self.selected_gpu:
            self.notify("select a GPU on the GPUs screen (4) first", severity="warning")
        return self.selected_gpu or None

    def action_passthrough(self) -> None:
        from nodeconsole.actions.session import Passthrough

        addr = self._selected_gpu()
        if addr:
            self._plan_worker(Passthrough(addr))

    def action_release(self) -> None:
        from nodeconsole.actions.session import Release

        addr = self._selected_gpu()
        if addr:
            self._plan_worker(Release(addr))

    def action_drain(self) -> None:
        from nodeconsole.screens.drain_prompt import drain_or_undrain

        drain_or_undrain(self)

    def action_mig_edit(self) -> None:
        """The MIG layout editor for the selected GPU; the request it hands back is planned, shown in
        the plan modal and applied like every other change."""
        addr = self._selected_gpu()
        if not addr:
            return
        from nodeconsole.screens.mig_editor import MigEditor

        def chosen(request: Request | None) -> None:
            if request is not None:
                self._plan_worker(request)

        self.push_screen(MigEditor(self.new_session, addr), chosen)

    def _selected_vm(self) -> str | None:
        if not self.selected_vm:
            self.notify("select a VM on the VMs screen (5) first", severity="warning")
        return self.selected_vm or None

    def action_pin(self) -> None:
        from nodeconsole.actions.session import Pin

        name = self._selected_vm()
        if name:
            self._plan_worker(Pin(name))

    def action_pin_all(self) -> None:
        from nodeconsole.actions.session import PinAll

        self._plan_worker(PinAll())

    def action_undo(self) -> None:
        """Plan rolling back the latest change still in effect (the Changes screen's `u` undoes the
        selected one)."""
        from nodeconsole.actions.session import Undo

        self._plan_worker(Undo())

    def action_redo(self) -> None:
        """Plan putting back the change the latest undo reverted (the Changes screen's `r` redoes the
        selected one). The log is read in a worker."""
        self._redo_worker()

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _redo_worker(self) -> None:
        from nodeconsole.actions.session import Redo
        from nodeconsole.screens.changes import latest_redo

        try:
            rid = latest_redo(self.new_session().host.audit.records())
        except Exception as exc:
            self.call_from_thread(self.notify, f"redo: {exc}", severity="error", timeout=8)
            return
        if rid is None:
            self.call_from_thread(self.notify, "redo: nothing to redo (no recorded change is undone)",
                                  severity="warning")
            return
        self.call_from_thread(self._plan_worker, Redo(rid))

    def new_session(self) -> ActionSession:
        """A session on the console's host (called in workers: building it may open libvirt); applied
        changes invalidate the collector's caches. RuntimeError until the first poll has read the host."""
        from nodeconsole.actions.session import ActionSession

        if self.seams is None or self.collector is None:
            raise RuntimeError("the host is not read yet")
        return ActionSession.from_seams(self.seams, on_changed=self.collector.invalidate)

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _plan_worker(self, request: Request) -> None:
        """Plan off the UI thread (it re-reads the host), then ask on the UI thread."""
        try:
            session = self.new_session()
            plan = session.plan(request)
        except Exception as exc:
            self.call_from_thread(self.notify, f"{request.label}: {exc}", severity="error", timeout=8)
            return
        self.call_from_thread(self._ask, session, plan)

    def _ask(self, session: ActionSession, plan: Plan) -> None:
        from nodeconsole.screens.modals.plan import PlanModal

        can_apply = session.can_apply(plan)
        read_only = session.host.read_only_reason if can_apply else ""
        title = plan.title + ("  (read-only)" if read_only else "" if can_apply else
                              ("  (refused)" if not plan.ok else "  (nothing to do)"))

        def answered(yes: bool | None) -> None:
            if yes:
                self._apply_worker(session, plan)
            elif yes is False:  # Esc or "No": say so, or a dialog that closed looks like it applied
                self.notify(f"{plan.title}: cancelled, nothing was changed", severity="warning", timeout=6)

        self.push_screen(PlanModal(title, plan.lines(), can_apply, session.typed_confirmation(plan), read_only),
                         answered)

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _apply_worker(self, session: ActionSession, plan: Plan) -> None:
        from nodeconsole.screens.change_toasts import ChangeToasts

        toasts = ChangeToasts(self)  # one progress toast, the current step's; gone when the change ends

        def progress(p: Progress) -> None:
            self.call_from_thread(toasts.show, f"[{p.index}/{p.total}] {p.phase}: {p.title}")

        try:
            result = session.apply(plan, progress=progress)  # the modal was the confirmation
        finally:
            self.call_from_thread(toasts.end)
        self.action_results.append(result)
        for warning in result.warnings:  # e.g. a lock a dead run left, and the change it was making
            self.call_from_thread(self.notify, warning, severity="warning", timeout=20)
        message = f"{plan.action}: {result.status} — {result.message}"
        if result.ok and result.record_id:  # the CLI's undo command is in the message; here it is a key
            message += "\nin the console: 8 Changes → " + ("r redoes it" if plan.undoes else "u undoes it")
        self.call_from_thread(self.notify, message, severity="information" if result.ok else "error", timeout=10)
        self.call_from_thread(self.poll_now_if_idle)

    def poll_now_if_idle(self) -> None:
        """Poll at once after a change, unless a poll is running (its end re-arms the timer)."""
        if self.poller.busy:
            return
        if self._timer is not None:
            self._timer.cancel()
        self.poll_now()

    def action_nccl(self, what: str) -> None:
        """The NCCL screen's run/cancel/GPU pick, reachable from the palette; the screen binds r/c/P itself."""
        from nodeconsole.screens.nccl import NcclScreen

        screen = self.screen
        if not isinstance(screen, NcclScreen):
            self.notify("open the NCCL screen (6) first", severity="warning")
            return
        if what == "run_check":
            screen.action_run_check()
        elif what == "pick_gpus":
            screen.action_pick_gpus()
        elif what == "cancel_check":
            screen.action_cancel_check()

    def action_help(self) -> None:
        from nodeconsole.screens.modals.help import HelpModal

        self.push_screen(HelpModal())

    def action_cycle_theme(self) -> None:
        i = NAMES.index(self.theme) if self.theme in NAMES else -1
        self.theme = NAMES[(i + 1) % len(NAMES)]
        self.notify(f"theme: {self.theme} (t switches to the next)", timeout=3)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # The palette lists the same registry as the bindings and the help screen.
        for c in COMMANDS:
            if c.key == "enter":
                continue
            yield SystemCommand(c.title, c.help, lambda a=c.action: self._run_anywhere(a))
        for name in NAMES:
            yield SystemCommand(f"Theme: {name}", "switch theme", lambda n=name: setattr(self, "theme", n))
        yield SystemCommand("Diff against a capture…", "what changed on this host since a capture taken earlier",
                            self.action_diff_against)

    def action_diff_against(self) -> None:
        from nodeconsole.screens.modals.diff import DiffModal

        self.push_screen(DiffModal())


def _screen(module: str, name: str) -> Screen:
    """A screen of screens/<module>.py, imported on first use."""
    import importlib

    return getattr(importlib.import_module(f"nodeconsole.screens.{module}"), name)()


class Poller:
    """The console's polls: one at a time, on one thread kept while the app runs. The UI thread asks
    (`request`) and goes on; the thread collects and hands the snapshot back through the event loop.
    A request while a poll runs makes one more poll after it, never two at once. (A Textual thread
    worker each poll cost the UI thread ~0.8 ms a poll: the worker, its task, the executor's future
    and three state-change messages, 5-9 % of the console's CPU at 1 Hz on the demo host.)"""

    def __init__(self, poll: Callable[[], None]) -> None:
        self._poll = poll
        self._wanted = threading.Event()
        self._running = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # the last exception a poll let through (kept for a debugger)

    @property
    def busy(self) -> bool:
        """A poll is running or asked for."""
        # this order: _run sets _running before it clears _wanted, so a request is never missed
        return self._wanted.is_set() or self._running

    def request(self) -> None:
        if self._stopped:
            return
        self._wanted.set()
        if self._thread is None or not self._thread.is_alive():
            # a daemon: a poll stuck in a library call never holds the process open (run_app waits
            # for a poll under way, a while)
            self._thread = threading.Thread(target=self._run, name="nodeconsole-poll", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._stopped:
                return
            self._running = True  # before the request is taken: busy throughout
            self._wanted.clear()
            try:
                self._poll()
            except BaseException as exc:  # the app's poll says its own failures; whatever
                self.error = exc  # slips past it (a CancelledError from the loop) must not end the polls
            finally:
                self._running = False

    def stop(self) -> None:
        """No poll starts any more; the thread ends once the one under way has."""
        self._stopped = True
        self._wanted.set()

    def join(self, timeout: float) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


class _Bars:
    """One VM's sparkline: the means of the finished bars (kept as a tuple, made once per bar) and a
    running sum of the bar filling now, so a tick costs an addition, not a mean over its samples."""

    __slots__ = ("done", "_sum", "_known", "_samples", "_values")

    def __init__(self) -> None:
        self.done: tuple[float | None, ...] = ()
        self._sum = 0.0  # of the known samples of the bar filling now (added in order, as sum() does)
        self._known = 0
        self._samples = 0
        self._values: tuple[float | None, ...] = ()  # values(): the same tuple while nothing moved

    def add(self, value: float | None, new_bar: bool) -> None:
        started = new_bar and self._samples > 0
        if started:  # the finished bars moved (and, once the history is full, shifted): made anew below
            self.done = (*self.done, self._mean())[-(HISTORY - 1):]
            self._sum, self._known, self._samples = 0.0, 0, 0
        self._samples += 1
        if value is not None:
            self._sum += value
            self._known += 1
        mean = self._mean()
        kept = self._values
        if started or len(kept) != len(self.done) + 1 or kept[-1] != mean:
            self._values = (*self.done, mean)

    def _mean(self) -> float | None:
        """The bar's mean, to a tenth of a percent: finer than any of a sparkline's nine heights, and a
        VM busy at a steady 100 % (its figure wavering in the sixth decimal) then draws the same bar
        each poll instead of a new scale every time its figure crosses 100."""
        return round(self._sum / self._known, 1) if self._known else None

    def values(self) -> tuple[float | None, ...]:
        """The bars' means, oldest first: the very same tuple while they are unchanged (a VM whose
        figure holds is then recognised at once, down to its sparkline)."""
        return self._values


class _ShadowedUpdate(CompositorUpdate):
    def __init__(self, update: CompositorUpdate, shadow: ScreenShadow, size) -> None:
        self.update, self.shadow, self.size = update, shadow, (size.width, size.height)

    def render_segments(self, console) -> str:
        try:
            return self.shadow.render(self.update, console, self.size)
        except Exception:  # never let the output optimisation take the console down: write it whole
            self.shadow.reset()
            return self.update.render_segments(console)


def run_app(seams: Seams | Callable[[], Seams], interval: float = 1.0, theme: str | None = None) -> int:
    from nodeconsole.console.cli import UsageError

    try:
        resolve(theme)
    except ValueError as e:
        raise UsageError(str(e)) from None
    app = NodeConsoleApp(seams, interval=interval, theme=theme)
    app.gc_paused = not gc.isenabled()  # the launcher paused it: resumed after the first frame
    try:
        app.run()
    finally:
        resume_gc()
        app.poller.join(POLL_JOIN_S)  # a poll under way when the console closed ends first
    return 0


def resume_gc() -> None:
    """The launcher (screens/launch.py) pauses Python's cyclic garbage collector until the first frame
    is on the screen: start-up allocates hundreds of thousands of objects that live as long as the
    console (modules, classes, widgets), and the collections they trigger cost ~30 ms of the first
    frame. Then start-up's garbage is collected once and everything still alive is moved out of the
    collector's way for good (`gc.freeze`): later collections look only at what was allocated since,
    which also makes them cheaper each second. The youngest generation is collected every
    GC_YOUNG_THRESHOLD allocations instead of 700: a poll allocates thousands of short-lived objects,
    and at 700 a second of the console ran ~25 collections (20 ms in 30 s), at 10,000 two (9 ms)."""
    if not gc.isenabled():
        gc.collect()
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
        gc.enable()
