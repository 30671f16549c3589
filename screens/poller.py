"""The console's poll thread (`Poller`) and the VMs' CPU % history behind their sparklines (`Bars`)."""
from __future__ import annotations

import threading
from collections.abc import Callable

HISTORY = 30  # bars of VM CPU % kept for the sparklines
BAR_S = 5.0  # seconds of polls one sparkline bar averages: a sparkline moves once per bar, not per poll


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


class Bars:
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

