"""One thing the NCCL checks found: what, why it matters and what to do about it."""
from __future__ import annotations

from dataclasses import dataclass

from nodeconsole.console.model import Problem

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    severity: str  # "error", "warning" or "info"
    code: str  # stable identifier, e.g. "nccl.corruption" (lets callers filter or test by kind)
    message: str  # what was seen
    reason: str  # why it matters
    fix: str  # what to do
    subject: str = "nccl"  # what it is about: "nccl", an interface, a GPU address, a host

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    def to_problem(self) -> Problem:
        """The snapshot model's Problem (which has no reason field: it joins the message)."""
        return Problem(self.severity, self.subject, f"{self.message} ({self.reason})", self.fix)


def by_severity(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then notes; stable within a severity."""
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
