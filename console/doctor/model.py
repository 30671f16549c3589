"""Doctor's result types. Field names are an interface (`nodeconsole doctor --json`): add, never rename."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1
STATUSES = ("pass", "warn", "fail", "skip")
ROLES = ("passthrough", "mig", "vgpu", "mixed")

# Groups in display (and setup dependency) order, with their checks in order. The ids are an interface.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("firmware & kernel", ("kvm", "iommu", "iommu-pt", "interrupt-remapping", "acs-override")),
    ("modules & driver", ("vfio-modules", "nouveau", "nvidia-driver")),
    ("hypervisor", ("libvirtd", "vhost-net", "tun", "cgroups", "secure-guest")),
    ("memory & CPUs", ("hugepages", "host-cores", "vcpu-commit", "numa-balancing")),
    ("PCIe", ("acs", "pcie-link")),
    ("GPUs", ("mig-pending", "vgpu-host")),
    ("VMs", ("vm-memory",)),
    ("Proxmox VE", ("pve-vfio", "pve-mappings", "pve-hookscripts")),  # skipped on other hosts
)
CHECK_IDS: tuple[str, ...] = tuple(i for _, ids in GROUPS for i in ids)
# The checks that concern NVIDIA GPUs: on a host without one they are skipped as not applicable
GPU_CHECKS: tuple[str, ...] = ("vfio-modules", "nouveau", "nvidia-driver", "acs", "pcie-link", "mig-pending",
                               "vgpu-host")
NO_GPU = "no NVIDIA GPU on this host"
GROUP_OF: dict[str, str] = {i: g for g, ids in GROUPS for i in ids}


@dataclass(frozen=True)
class Evidence:
    """One thing read: the host path (as on the host, e.g. "/proc/cmdline") and the value found
    ("absent" when the file is not there). Values are host text: render them as plain text."""
    path: str
    value: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "value": self.value}


@dataclass(frozen=True)
class Fix:
    """How to fix a check: a one-line summary, the equivalent commands (display only, never run through
    a shell), whether it takes effect only at the next boot, and whether `doctor --fix ID` can plan it."""
    summary: str
    commands: tuple[str, ...] = ()
    needs_reboot: bool = False
    plannable: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "commands": list(self.commands), "needs_reboot": self.needs_reboot,
                "plannable": self.plannable}


@dataclass(frozen=True)
class CheckResult:
    id: str
    status: str  # one of STATUSES
    finding: str  # one line: what was found (for skip: why it was skipped)
    evidence: tuple[Evidence, ...] = ()
    fix: Fix | None = None
    title: str = ""  # what is checked, e.g. "KVM is available"
    why: str = ""  # why it matters (the Setup screen shows it)
    pending: str = ""  # "pending reboot (change ID)" / "took effect after reboot (change ID)" / ""
    # False when the check does not concern this host or role (a skip saying why, in `applies_why`);
    # a skip with `applies` True could not read what it needs
    applies: bool = True
    applies_why: str = ""

    @property
    def group(self) -> str:
        return GROUP_OF.get(self.id, "other")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "group": self.group, "title": self.title, "status": self.status,
                "finding": self.finding, "why": self.why,
                "evidence": [e.to_dict() for e in self.evidence],
                "fix": self.fix.to_dict() if self.fix else None, "pending": self.pending,
                "applies": self.applies, "applies_why": self.applies_why}


@dataclass(frozen=True)
class DoctorReport:
    role: str
    checks: tuple[CheckResult, ...] = ()
    boot_id: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def check(self, check_id: str) -> CheckResult | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for c in self.checks:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when no check fails, 1 when one does (2 stays for usage errors)."""
        return 1 if self.failed else 0

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "role": self.role, "boot_id": self.boot_id, "summary": self.counts(),
                "checks": [c.to_dict() for c in self.checks], "notes": list(self.notes)}
