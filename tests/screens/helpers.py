"""Helpers shared by the console's Pilot tests."""
from __future__ import annotations


async def wait_until(pilot, cond, tries: int = 100) -> bool:
    """Let the app run in 50 ms steps until `cond()` holds; False if it never does."""
    for _ in range(tries):
        await pilot.pause(0.05)
        if cond():
            return True
    return False
