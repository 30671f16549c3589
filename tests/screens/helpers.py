"""Helpers shared by the console's Pilot tests."""
from __future__ import annotations


async def wait_until(pilot, cond, tries: int = 100) -> bool:
    """Let the app run in 50 ms steps until `cond()` holds and the screen on top has mounted its
    widgets; False if it never does. (A screen pushed a moment ago is already `app.screen`, but it has
    no children to query until its compose and mount have run: on a busy machine, a step later.)"""
    for _ in range(tries):
        await pilot.pause(0.05)
        if cond() and pilot.app.screen.is_mounted:
            return True
    return False


def until(cond, timeout: float = 5.0, step: float = 0.005) -> bool:
    """Outside the event loop: wait (sleeping `step` seconds at a time) until `cond()` holds; False
    if it has not after `timeout` seconds."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
