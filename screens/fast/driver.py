"""Textual's Linux driver with an input thread that sleeps until there is input.

Textual's input thread wakes ten times a second even when no key is pressed (a select with a 0.1 s
timeout, to notice the app exiting and to time out a lone Escape). Over an idle console that is most of
the thread's CPU. Here the thread waits on the terminal and on a wake-up pipe with no timeout, except
while the key parser waits for the rest of an escape sequence (then until the parser's own deadline);
asking the thread to stop writes to the pipe.

Relies on Textual's LinuxDriver (`exit_event`, `fileno`, `process_message`) and its parser's
`_timeout_time` (tests/screens/test_driver.py runs the real thread on a pseudo-terminal).
"""
from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder
from threading import Event
from typing import Any

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class _WakingEvent(Event):
    """The driver's exit event: setting it also wakes the input thread's select."""

    def __init__(self) -> None:
        super().__init__()
        self.wake_fd: int | None = None

    def set(self) -> None:
        super().set()
        fd = self.wake_fd
        if fd is not None:
            try:
                os.write(fd, b"x")
            except OSError:  # the pipe is full (already woken) or closed (the thread has ended)
                pass


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exit_event = _WakingEvent()

    def run_input_thread(self) -> None:
        """LinuxDriver.run_input_thread, waiting without a timeout while no escape sequence is pending."""
        exit_event = self.exit_event
        assert isinstance(exit_event, _WakingEvent)
        fileno = self.fileno
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            for key, _mask in events:
                if key.fd == wake_r:
                    try:
                        os.read(wake_r, 64)
                    except OSError:
                        pass
                    continue
                data = decode(os.read(fileno, 1024 * 4), final=final)
                if not data:  # stdin piped and at its end
                    break
                for event in parser.feed(data):
                    self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        def timeout() -> float | None:
            deadline = parser._timeout_time  # set while the parser waits for more of a sequence
            return None if deadline is None else max(0.0, deadline - get_time())

        wake_r, wake_w = os.pipe()
        # select(2), as Textual's driver: epoll refuses a stdin that is /dev/null or a file
        selector = selectors.SelectSelector()
        try:
            os.set_blocking(wake_r, False)
            os.set_blocking(wake_w, False)
            selector.register(fileno, selectors.EVENT_READ)
            selector.register(wake_r, selectors.EVENT_READ)
            exit_event.wake_fd = wake_w
            while not exit_event.is_set():
                events = selector.select(timeout())
                process(events)
            selector.unregister(fileno)
            process(selector.select(0.1), final=True)
        finally:
            exit_event.wake_fd = None
            selector.close()
            os.close(wake_r)
            os.close(wake_w)
