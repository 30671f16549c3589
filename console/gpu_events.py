"""A GPU event from the kernel log, and a GPU's health verdict: the parts of the snapshot's `Gpu` that
come from its events (console/events.py reads and ties them, console/health.py judges them).

Times: `time` is the stamp as the log writes it; `wall` the moment in seconds since the epoch (UTC) when
it is known — a dated stamp, or seconds since boot with the host's boot time — and `uptime_s` the
seconds since boot when the log says them. `events --json` writes `time` as RFC 3339 UTC (null when only
the uptime is known) and keeps the log's own text as `logged`.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from nodeconsole.console.source_state import SourceState

XID, AER, HOST = "xid", "aer", "host"  # HOST: the host's own failures around a GPU (console/host_failures.py)
# How an event's time compares: seconds since boot (dmesg `[ 12.3]`, kmsg), a date with a year
# (dmesg -T, ISO stamps), a syslog date without a year (journalctl -k, kern.log).
BOOT, DATE, SYSLOG = "boot", "date", "syslog"

# The keys of `events --json`, an interface: add keys, never rename them.
JSON_KEYS = ("time", "gpu", "xid", "pid", "process", "text", "severity", "action", "vm", "kind", "port", "vms",
             "uptime_s", "logged", "failure", "source")
HOST_LOG, GUEST_LOG = "host", "guest"  # whose kernel logged an event: the host's, or a VM's guest (its agent)

HEALTHY, DEGRADED, UNHEALTHY = "healthy", "degraded", "unhealthy"
HEALTH_STATES = (HEALTHY, DEGRADED, UNHEALTHY)


def rfc3339(wall: float) -> str:
    """Seconds since the epoch as RFC 3339 UTC with milliseconds: 2026-12-02T09:15:03.120Z."""
    t = dt.datetime.fromtimestamp(wall, dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def local_text(wall: float) -> str:
    """Seconds since the epoch in the local time zone, as a screen shows it: 2026-12-02 10:15:03."""
    return dt.datetime.fromtimestamp(wall).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class KernelEvent:
    kind: str  # XID, AER or HOST
    time: str | None  # as the log writes it (kmsg's microseconds as seconds, like dmesg); None: none
    gpu: str  # PCI address, DDDD:BB:DD.F, lower case (function 0 when the log omits it)
    xid: int | None  # None for AER and HOST
    pid: int | None  # None when the log does not say (or says <unknown>)
    process: str | None
    text: str  # the message: the Xid's own text, the whole AER line(s), the host failure's line(s)
    severity: str  # console/xid.py's severities (HOST too); AER: corrected / nonfatal / fatal
    action: str
    port: str | None = None  # AER: the port that reported the error
    vms: tuple[str, ...] = ()  # the VMs holding the GPU (several share a MIG or vGPU GPU)
    clock: str | None = None  # BOOT, DATE or SYSLOG; None without a time
    stamp: float | None = None  # the time in seconds, comparable with stamps of the same clock
    wall: float | None = None  # seconds since the epoch (UTC), when the log and the host's boot time tell
    uptime_s: float | None = None  # seconds since boot, when the log writes them
    failure: str | None = None  # HOST: the failure's short name (console/host_failures.py), e.g. "D3cold"
    # HOST_LOG, or GUEST_LOG: read from the guest of the VM in `vms` through its agent, on the host GPU
    # the guest's device maps to (console/guest_watch.py); `text` keeps the guest's own wording
    source: str = HOST_LOG

    @property
    def vm(self) -> str | None:
        return ", ".join(self.vms) if self.vms else None

    @property
    def what(self) -> str:
        """'Xid 79', 'AER', 'host D3cold': what the event lists show."""
        if self.xid is not None:
            return f"Xid {self.xid}"
        return f"host {self.failure}" if self.kind == HOST else "AER" if self.kind == AER else self.kind

    @property
    def when(self) -> str:
        """The time as a person reads it: local time when known, else the uptime, else the log's text."""
        if self.wall is not None:
            return local_text(self.wall)
        if self.uptime_s is not None:
            return f"[{self.uptime_s:.6f}]"
        return self.time or "-"

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in JSON_KEYS if k not in ("time", "logged")}
        d["time"] = rfc3339(self.wall) if self.wall is not None else None
        d["vms"] = list(self.vms)
        d["logged"] = self.time
        return {k: d[k] for k in JSON_KEYS}


@dataclass(frozen=True)
class Health:
    """One GPU's verdict: `unhealthy` (actions refuse it), `degraded` (allowed with a warning; the NCCL
    pick passes it over) or `healthy`, with the reasons, the unhealthy ones first (console/health.py)."""
    state: str = HEALTHY
    reasons: tuple[str, ...] = ()
    since: float | None = None  # the start of the event window (wall clock), None: the whole log

    @property
    def unhealthy(self) -> bool:
        return self.state == UNHEALTHY

    @property
    def summary(self) -> str:
        """'unhealthy: uncorrectable AER error (fatal) at …' / 'healthy'."""
        return f"{self.state}: {'; '.join(self.reasons)}" if self.reasons else self.state


@dataclass(frozen=True)
class Drain:
    """An admin's mark on a GPU (`nodeconsole gpu drain`, console/drains.py reads it): no new work goes
    on it until `gpu undrain`. `reason` is the admin's text as given (show it through hosttext.visible);
    `who` the user who drained it; `when` RFC 3339 UTC."""
    reason: str
    who: str
    when: str

    @property
    def summary(self) -> str:
        """'drained: RMA ticket 42 (alice, 2026-12-02T09:15:03Z)' (host text: show it through visible)."""
        return f"drained: {self.reason} ({self.who}, {self.when})"


@dataclass(frozen=True)
class SourceChange:
    """A source the console lost or got back: `was` → `now` (ok, pending, a reason)."""
    at: float  # time.time()
    source: str
    was: str
    now: str

    @property
    def lost(self) -> bool:
        return SourceState(self.now).lost
