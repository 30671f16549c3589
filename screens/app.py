"""The Textual app (started by `nodeconsole` without a subcommand, through a lazy import in console/cli.py).

The app is built in layers, one module each: its polls (screens/app_polling.py: a one-shot timer asks
the poll thread for one snapshot, posted to the visible screen as `SnapshotUpdated`), its guided
changes (screens/app_changes.py: screens post what is selected, `GpuSelected`/`VmSelected`, and the
changes they ask for, `PlanChange`), its commands (screens/app_commands.py) and, here, its start-up,
theme and terminal output.
"""
from __future__ import annotations

import asyncio
import contextvars
import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from textual.app import App
from textual.binding import BindingType
from textual.css.stylesheet import Stylesheet
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.timer import Timer
from textual.widget import AwaitMount

from nodeconsole.console.first_look import FirstLook
from nodeconsole.console.hosttext import LINE_MAX, lines, visible
from nodeconsole.console.model import HostSnapshot
from nodeconsole.screens.app_commands import CommandsApp
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.commands import bindings
from nodeconsole.screens.messages import SnapshotUpdated
from nodeconsole.screens.overview import OverviewScreen
from nodeconsole.screens.poller import BAR_S, Bars, Poller
from nodeconsole.themes import CSS_PATH, all_themes, resolve

if TYPE_CHECKING:  # the collector is imported by the first poll
    from nodeconsole.actions.progress import RunResult
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.seams import Seams

FIRST_LOOK_WAIT_S = 0.25  # how long the first frame waits for the host's first, sysfs-only snapshot
GC_RESUME_S = 0.2  # after the first frame, when the garbage collector paused at launch resumes
GC_YOUNG_THRESHOLD = 10_000  # allocations between collections of the youngest generation, from then on
POLL_JOIN_S = 5.0  # how long a closing console waits for the poll under way (its thread is a daemon)
FIRST_POLL_LATEST_S = 1.0  # the first poll starts with the first frame, or after this long without one


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


class NodeConsoleApp(CommandsApp):
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
        self.vm_history: dict[str, Bars] = {}
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
        self.app_resume_signal.subscribe(self, lambda _app: self.forget_terminal())
        if not self._first_view_sent:
            self.render_current()
        # The first poll starts once the first frame is out (frame_written): its thread would otherwise take
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

    def frame_written(self) -> None:
        """A frame is out (the app's base calls this): the first one starts the polls, and resumes
        the garbage collector paused at launch."""
        if self._first_poll is not None:
            self.call_next(self._start_polling)
        if self.gc_paused:
            self.gc_paused = False
            self.set_timer(GC_RESUME_S, resume_gc)  # once the first frame has gone out

    def action_redraw(self) -> None:
        self.forget_terminal()
        self.refresh(layout=True)


def _screen(module: str, name: str) -> Screen:
    """A screen of screens/<module>.py, imported on first use."""
    import importlib

    return getattr(importlib.import_module(f"nodeconsole.screens.{module}"), name)()


def run_app(seams: Seams | Callable[[], Seams] | FirstLook, interval: float = 1.0, theme: str | None = None) -> int:
    from nodeconsole.console.usage import UsageError

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
