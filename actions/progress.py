"""What a plan's run tells while it runs and when it ends: one `Progress` event per step phase, one
`RunResult` per run, and the run's result names. Its own module, so the runner, the session, the CLI
and the TUI name the same types without importing the runner.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# results of a run
DONE = "applied"
NOTHING = "nothing to do"
REFUSED = "refused"
CANCELLED = "cancelled"
FAILED_RESULT = "failed"


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
    status: str  # DONE, NOTHING, REFUSED, CANCELLED, FAILED_RESULT
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
        return self.status in (DONE, NOTHING)


ProgressFn = Callable[[Progress], None]
