"""The console's poll thread: one poll at a time, a request during a poll makes exactly one more, and
the thread ends when asked; and a poll whose view fails to draw does not stop the polls."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.poller import Poller

from .conftest import FIXED_IDS
from .helpers import until as _until
from .helpers import wait_until


def test_one_poll_at_a_time_and_requests_during_a_poll_make_one_more():
    release = threading.Event()
    running = 0
    most = 0
    done = 0
    threads: set[str] = set()

    def poll() -> None:
        nonlocal running, most, done
        running += 1
        most = max(most, running)
        threads.add(threading.current_thread().name)
        release.wait(5)
        running -= 1
        done += 1

    p = Poller(poll)
    assert not p.busy
    p.request()
    assert p.busy
    assert _until(lambda: running == 1)
    for _ in range(5):  # asked five times while the first runs: one poll more, not five, not at once
        p.request()
    assert p.busy
    release.set()
    assert _until(lambda: not p.busy)
    assert done == 2 and most == 1
    assert threads == {"nodeconsole-poll"}
    p.request()  # the same thread serves later requests
    assert _until(lambda: done == 3 and not p.busy)
    p.stop()
    p.join(5)
    assert p._thread is not None and not p._thread.is_alive()
    p.request()  # stopped: nothing more runs
    time.sleep(0.05)
    assert done == 3 and not p._thread.is_alive()


def test_busy_never_misses_a_request_about_to_run():
    """`busy` reads the request before the running flag (the thread sets the flag before it takes the
    request): read over and over with the threads switching every microsecond, it never says idle
    while a requested poll has not yet run."""
    import sys

    done = 0

    def poll() -> None:
        nonlocal done
        time.sleep(0.001)
        done += 1

    p = Poller(poll)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    missed = 0
    try:
        for _ in range(300):
            assert _until(lambda: not p.busy)
            before = done
            p.request()
            while done == before:
                if not p.busy and done == before:
                    missed += 1
                    break
    finally:
        sys.setswitchinterval(old)
        p.stop()
        p.join(5)
    assert missed == 0


class _Stop(BaseException):
    pass


@pytest.mark.parametrize("kind", [ValueError, _Stop])
def test_a_poll_that_raises_leaves_the_polls_going(kind):
    """An exception a poll lets through, even one that is not an Exception, is kept for a debugger
    and the next request is served."""
    calls = []

    def poll() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise kind()

    p = Poller(poll)
    p.request()
    assert _until(lambda: len(calls) == 1 and not p.busy)
    assert isinstance(p.error, kind)
    p.request()
    assert _until(lambda: len(calls) == 2 and not p.busy)
    p.stop()
    p.join(5)


async def test_a_view_that_fails_to_draw_is_said_and_the_polls_go_on(demo_seams, monkeypatch):
    app = NodeConsoleApp(replace(demo_seams, pci_ids=FIXED_IDS), interval=0.1)
    original = NodeConsoleApp._apply
    original_failed = NodeConsoleApp._poll_failed
    failed = []
    notes = []

    def poll_failed(self, exc, what="collection failed"):
        original_failed(self, exc, what)
        notes.append(self.note)

    def apply(self, snap):
        if not failed:
            failed.append(1)
            raise RuntimeError("cannot draw")
        original(self, snap)

    monkeypatch.setattr(NodeConsoleApp, "_apply", apply)
    monkeypatch.setattr(NodeConsoleApp, "_poll_failed", poll_failed)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_until(pilot, lambda: bool(failed), tries=200)
        assert await wait_until(pilot, lambda: app.polls >= 2, tries=200)
        assert failed == [1]
        assert notes == ["showing the host failed: cannot draw"]
        assert app.poller.error is None
    assert app.poller._stopped
