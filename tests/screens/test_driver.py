"""The console's driver: its input thread sleeps until input comes, still delivers keys (a lone Escape
too, after the parser's timeout) and ends as soon as it is asked to."""
from __future__ import annotations

import asyncio
import os
import pty
import threading
import time
import tty

import pytest
from textual import events

from nodeconsole.screens.fast.driver import QuietLinuxDriver

from .helpers import until as _until

# a test of screens/fast/: the stock mode (--stock-textual) has none of it
pytestmark = pytest.mark.fast_textual


class _Recording(QuietLinuxDriver):
    def process_message(self, message) -> None:  # the app is not running: keep what would be sent
        self.got.append(message)


def _switches(thread: threading.Thread) -> int:
    """How many times the thread has gone to sleep (the kernel's count: whatever code it runs)."""
    with open(f"/proc/self/task/{thread.native_id}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no context switch count")


def _keys(driver) -> list[str]:
    return [m.key for m in driver.got if isinstance(m, events.Key)]


def test_input_thread_sleeps_until_input_and_stops_at_once():
    async def main() -> None:
        master, slave = pty.openpty()
        tty.setraw(slave)  # as the driver sets the terminal: bytes come as typed, not by line
        try:
            driver = _Recording(object(), size=(80, 24))  # type: ignore[arg-type]
            driver.got = []
            driver.fileno = slave
            thread = threading.Thread(target=driver.run_input_thread, daemon=True)
            thread.start()
            os.write(master, b"a")
            assert _until(lambda: _keys(driver) == ["a"])
            before = _switches(thread)
            time.sleep(0.6)  # Textual's own input thread wakes 6 times in this while
            assert _switches(thread) - before <= 1, "the input thread woke with no input"
            os.write(master, b"\x1b")  # a lone Escape: delivered when the parser gives up waiting
            assert _until(lambda: _keys(driver) == ["a", "escape"])
            os.write(master, b"\x1b[A")  # a whole sequence is one key
            assert _until(lambda: _keys(driver) == ["a", "escape", "up"])
            asked = time.monotonic()
            driver.exit_event.set()
            thread.join(3)
            assert not thread.is_alive()
            assert time.monotonic() - asked < 1.0
            assert driver.exit_event.wake_fd is None  # the wake-up pipe is closed with the thread
        finally:
            os.close(master)
            os.close(slave)

    asyncio.run(main())


def test_the_console_uses_it_unless_the_environment_names_a_driver(monkeypatch):
    from textual import constants

    from nodeconsole.screens.app import NodeConsoleApp

    monkeypatch.setattr(constants, "DRIVER", None)
    assert NodeConsoleApp.get_driver_class(NodeConsoleApp.__new__(NodeConsoleApp)) is QuietLinuxDriver
    monkeypatch.setattr(constants, "DRIVER", "textual.drivers.linux_driver:LinuxDriver")
    from textual.drivers.linux_driver import LinuxDriver

    assert NodeConsoleApp.get_driver_class(NodeConsoleApp.__new__(NodeConsoleApp)) is LinuxDriver


def test_a_stdin_that_is_not_a_terminal_does_not_stop_the_input_thread():
    """`nodeconsole < /dev/null`: epoll refuses such a file; the thread selects as Textual's does and
    ends when asked."""
    async def main() -> None:
        fd = os.open(os.devnull, os.O_RDONLY)
        try:
            driver = _Recording(object(), size=(80, 24))  # type: ignore[arg-type]
            driver.got = []
            driver.fileno = fd
            failed: list[BaseException] = []

            def run() -> None:
                try:
                    driver.run_input_thread()
                except BaseException as exc:  # the test reports it
                    failed.append(exc)

            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            time.sleep(0.2)
            driver.exit_event.set()
            thread.join(3)
            assert not thread.is_alive() and failed == []
        finally:
            os.close(fd)

    asyncio.run(main())
