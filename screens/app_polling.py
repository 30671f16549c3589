"""The app's polls: a one-shot timer asks the poll thread (`Poller`) for one snapshot; when it is
collected, the UI swaps the snapshot in, posts it to the visible screen (`SnapshotUpdated`) and re-arms
the timer. Polls never overlap and the UI thread never touches the host."""
from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual import work
from textual.timer import Timer
from textual.widget import AwaitMount

from nodeconsole.console.first_look import FirstLook
from nodeconsole.console.model import HostSnapshot
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.messages import HostView, SnapshotUpdated
from nodeconsole.screens.poller import Bars, Poller
from nodeconsole.screens.rendering import StockApp, app_base

if TYPE_CHECKING:
    from nodeconsole.actions.progress import RunResult
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.seams import Seams


if TYPE_CHECKING:
    _AppBase = StockApp
else:  # Textual's App, or screens/fast/'s (unless NODECONSOLE_STOCK_TEXTUAL=1; screens/rendering.py)
    _AppBase = app_base()


class PollingApp(_AppBase):
    """The polls' half of the app (its state is made in NodeConsoleApp.__init__)."""

    seams: Seams | None
    collector: Collector | None
    interval: float
    snapshot: HostSnapshot | None
    vm_history: dict[str, Bars]
    _bar_polls: int
    paused: bool
    note: str
    polls: int
    _first: FirstLook | None
    _seams_factory: Callable[[], Seams] | None
    _timer: asyncio.TimerHandle | None
    poller: Poller
    _ui_context: contextvars.Context | None
    _first_poll: Timer | None
    action_results: list[RunResult]  # the guided changes' outcomes (ChangesApp): the view counts them

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
                bars = self.vm_history[v.name] = Bars()
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
        return HostView(self.snapshot, history, self.paused, self.note, self.seams, len(self.action_results))

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

    def poll_now_if_idle(self) -> None:
        """Poll at once after a change, unless a poll is running (its end re-arms the timer)."""
        if self.poller.busy:
            return
        if self._timer is not None:
            self._timer.cancel()
        self.poll_now()
