"""Interruptions and injected faults during a run.

`interruptible()` turns SIGINT and SIGTERM into an `Interrupted` exception while a plan is applied (in
the main thread only: the console's worker thread keeps the process's handlers), so the runner rolls
back exactly as after a failed step; while it rolls back, `shielded()` defers further signals so a
second ^C cannot cut the rollback short.

`FaultSwitch` injects failures for tests and drills, from the environment:

    NODECONSOLE_FAIL_STEP=3             the 3rd step's apply fails
    NODECONSOLE_FAIL_STEP=pci_driver    every pci_driver step's apply fails (the first one stops the run)
    NODECONSOLE_FAIL_STEP=2:verify      the 2nd step applies, then its verification fails
    NODECONSOLE_FAIL_STEP=2:block       the 2nd step applies, then the run blocks (for signal tests)
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from nodeconsole.actions.plan import StepError

FAIL_ENV = "NODECONSOLE_FAIL_STEP"
PHASES = ("apply", "verify", "block")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The run was interrupted by a signal (SIGINT: ^C, SIGTERM: kill)."""

    def __init__(self, signame: str) -> None:
        self.signame = signame
        super().__init__(f"interrupted by {signame}")


def signal_name(e: BaseException) -> str:
    if isinstance(e, Interrupted):
        return e.signame
    return "SIGINT" if isinstance(e, KeyboardInterrupt) else type(e).__name__


class _State:
    deferred: list[str] = []
    shield = False


def _handler(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _State.shield:
        _State.deferred.append(name)
        return
    _State.shield = True  # the first signal interrupts; any more until the run ends are deferred
    raise Interrupted(name)


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT/SIGTERM raise Interrupted inside the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in _SIGNALS}
    _State.deferred, _State.shield = [], False
    for s in _SIGNALS:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _State.shield = False


@contextmanager
def shielded() -> Iterator[list[str]]:
    """Signals arriving inside the block are recorded (the yielded list), not raised."""
    before = _State.shield
    _State.shield = True
    try:
        yield _State.deferred
    finally:
        _State.shield = before


def hold() -> None:
    """From now until the end of `interruptible()`, signals are deferred (the run is deciding its
    outcome: a signal must not land between a step's failure and its rollback)."""
    _State.shield = True


def take_pending() -> str | None:
    """A signal deferred while shielded and not acted on yet (the run then stops as if it arrived now)."""
    if _State.deferred:
        name = _State.deferred[0]
        _State.deferred = []
        return name
    return None


@dataclass(frozen=True)
class FaultSwitch:
    """Which step (1-based index or step kind) fails, and in which phase."""
    target: str = ""
    phase: str = "apply"

    @classmethod
    def from_env(cls, env: Any = None) -> FaultSwitch:
        text = (env if env is not None else os.environ).get(FAIL_ENV, "").strip()
        if not text:
            return cls()
        target, _, phase = text.partition(":")
        phase = phase or "apply"
        if phase not in PHASES:
            raise StepError(f"{FAIL_ENV}={text!r}: the phase must be one of {', '.join(PHASES)}")
        return cls(target.strip(), phase)

    def hits(self, index: int, kind: object) -> bool:
        return bool(self.target) and (self.target == str(index) or self.target == kind)

    def before_apply(self, index: int, kind: object) -> None:
        if self.phase == "apply" and self.hits(index, kind):
            raise StepError(f"injected failure ({FAIL_ENV}) before step {index} applied")

    def after_apply(self, index: int, kind: object) -> str | None:
        """An injected verification error, or None. `block` waits here for a signal (at most 60 s)."""
        if not self.hits(index, kind):
            return None
        if self.phase == "verify":
            return f"injected verification failure ({FAIL_ENV})"
        if self.phase == "block":
            print(f"nodeconsole: step {index} applied; blocking ({FAIL_ENV})", file=sys.stderr, flush=True)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.05)
        return None
