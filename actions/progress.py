"""What a plan's run tells while it runs and when it ends: one `Progress` event per step phase, one
`RunResult` per run, and the run's result names. Its own module, so the runner, the session, the CLI
and the TUI name the same types without importing the runner.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nodeconsole.console.audit_log import Status

# results of a run, by their names of old (the one vocabulary: console/audit_log.py Status)
DONE = Status.APPLIED
NOTHING = Status.NOTHING
REFUSED = Status.REFUSED
CANCELLED = Status.CANCELLED
FAILED_RESULT = Status.FAILED


@dataclass(frozen=True)
class Progress:
    """One progress event: step `index` (1-based) of `total`; phase is "apply", "verify", "ok",
    "failed", "undo", "undone", "undo-failed"."""
    index: int
    total: int
    title: str
    phase: str
    message: str = ""


@dataclass
class RunResult:
    status: Status  # APPLIED, NOTHING, REFUSED, CANCELLED, FAILED
    message: str
    record_id: str | None = None
    failed_step: str | None = None
    error: str | None = None
    undone: list[str] = field(default_factory=list)
    undo_failed: list[str] = field(default_factory=list)
    interrupted: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM)
    warnings: list[str] = field(default_factory=list)  # e.g. a lock left by a dead process

    @property
    def ok(self) -> bool:
        return self.status in (Status.APPLIED, Status.NOTHING)


ProgressFn = Callable[[Progress], None]
