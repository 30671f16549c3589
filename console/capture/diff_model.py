"""The diff's records (console/capture/diff.py reads the sides, diff_compare.py compares them,
diff_render.py words them): the topics in the order they are listed, one `Change`, one `Side` (what a
capture says, as far as the diff compares it) and the `Diff` of two sides.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodeconsole.console.audit_log import AuditRecord

# topic → heading, in the order the text lists them
TOPICS: dict[str, str] = {
    "capture": "What each capture could read",
    "versions": "Versions",
    "kernel": "Kernel (command line, modules, huge pages)",
    "files": "Configuration files (/etc, /boot)",
    "gpus": "GPUs: drivers and owners",
    "devices": "Other PCI devices",
    "iommu": "IOMMU groups",
    "mig": "MIG layouts",
    "vgpu": "vGPU instances",
    "vms": "VM definitions",
    "health": "Health counters that grew",
    "events": "New kernel-log GPU events",
    "audit": "Audit records (changes made in between)",
    "doctor": "Doctor checks",
}


class DiffError(Exception):
    """A side cannot be read (the reason in one line)."""


@dataclass(frozen=True)
class Change:
    topic: str  # a key of TOPICS
    subject: str  # what changed: a PCI address, a VM name, a group, a module, a check id, a file
    what: str  # which property ("driver", "hostdevs", "added", "removed", …)
    before: Any = None
    after: Any = None
    note: str = ""  # a line of context (a doctor check's finding, why a source failed)

    def to_dict(self) -> dict[str, Any]:
        out = {"topic": self.topic, "subject": self.subject, "what": self.what, "before": self.before,
               "after": self.after}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Side:
    """What one capture says, as far as the diff compares it."""
    label: str  # the file as given, or "live"
    manifest: dict[str, Any]
    snapshot: dict[str, Any]  # HostSnapshot.to_dict()
    vm_config: dict[str, dict[str, Any]] = field(default_factory=dict)  # VM name → its inactive definition
    cmdline: str | None = None
    modules: set[str] | None = None
    files: dict[str, str] = field(default_factory=dict)  # /etc, /boot path → text
    events: list[dict[str, Any]] = field(default_factory=list)
    audit: list[AuditRecord] = field(default_factory=list)
    doctor: dict[str, Any] | None = None

    @property
    def title(self) -> str:
        host = self.manifest.get("hostname") or "?"
        return f"{self.label} ({host}, captured {self.manifest.get('captured_at') or '?'})"


@dataclass
class Diff:
    a: Side
    b: Side
    changes: list[Change]
    notes: list[str] = field(default_factory=list)  # what the reader should know (redaction, other host)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.changes]

    @property
    def gpu_index(self) -> dict[str, int]:
        out = {g["address"]: g.get("index") for g in self.a.snapshot.get("gpus") or ()}
        out.update({g["address"]: g.get("index") for g in self.b.snapshot.get("gpus") or ()})
        return {k: v for k, v in out.items() if isinstance(v, int)}
