"""The exporter's GPU event counters and health series (console/exporter.py serves them).

Counters, one series per GPU (and severity) at 0 from the exporter's first sample, so that the alerting
rules' `increase(...)` sees an event's first occurrence (a series that appears together with its first
event, at 1, has no increase to see):

- `nodeconsole_gpu_xid_events_by_severity_total{severity}`: Xid events by the Xid's severity (fatal,
  error, warning, info, unknown; console/xid.py);
- `nodeconsole_gpu_fallen_off_bus_events_total`: Xid 79, the GPU fell off the bus;
- `nodeconsole_gpu_aer_events_total{severity}`: PCIe AER errors (corrected, nonfatal, fatal), also those
  a port above the GPU reported;
- `nodeconsole_gpu_xid_events_total{xid, severity}`: by Xid code, a series once a code was seen (for
  dashboards; no alert keys on it).

They count the events read after the exporter's first sample: what the kernel log already held then is
the baseline (it shows in the health verdict), so restarting the exporter re-fires no alert for an old
event. A counter never goes down while the exporter runs: the collector keeps only its newest events, so
each sample counts the events read since the last one (the event watch's running total), not the
window. A GPU's series stay (with the labels it had) after the GPU leaves the snapshot.

Health (console/health.py's verdict, the only one): `nodeconsole_gpu_health{state}` 1 for the GPU's
state and 0 for the other two; `nodeconsole_gpu_health_reason{reason}` 1 for each reason.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from nodeconsole.console.gpu_events import AER, HEALTH_STATES, XID, KernelEvent
from nodeconsole.console.hosttext import clip, visible
from nodeconsole.console.model import Gpu, HostSnapshot
from nodeconsole.console.xid import FALLEN_OFF_BUS
from nodeconsole.console.xid import SEVERITIES as XID_SEVERITIES

GPU_LABELS = ("address", "index", "smi", "uuid", "model")
AER_SEVERITIES = ("corrected", "nonfatal", "fatal")
REASON_MAX = 200  # characters of a reason label


def gpu_labels(g: Gpu) -> tuple[str, ...]:
    """The values of GPU_LABELS for `g`."""
    return (g.address, str(g.index), "" if g.nvml_index is None else str(g.nvml_index), g.uuid or "", g.name)


@dataclass(frozen=True)
class EventCounts:
    """The counters at one sample (copies: the sample does not change after it is taken)."""
    gpus: dict[str, tuple[str, ...]] = field(default_factory=dict)  # address → its labels, every GPU seen
    xid: dict[tuple[str, str], int] = field(default_factory=dict)  # (address, severity) → count
    code: dict[tuple[str, int, str], int] = field(default_factory=dict)  # (address, Xid, severity) → count
    fell: dict[str, int] = field(default_factory=dict)  # address → Xid 79 count
    aer: dict[tuple[str, str], int] = field(default_factory=dict)  # (address, severity) → count


class EventCounter:
    """Counts each GPU's events as the exporter reads them (one sampler calls `update`)."""

    def __init__(self) -> None:
        self._read: int | None = None  # the event watch's running total at the last sample
        self._counts = EventCounts()

    def update(self, read: int, events: tuple[KernelEvent, ...], snap: HostSnapshot) -> EventCounts:
        """`read`: events the watch has read so far; `events`: the newest of them, oldest first, tied to
        `snap`. Counts the ones read since the last update (none at the first: the baseline)."""
        from nodeconsole.console.event_watch import events_by_gpu

        c = self._counts
        c.gpus.update({g.address: gpu_labels(g) for g in snap.gpus})
        new = 0 if self._read is None else max(0, read - self._read)
        self._read = read
        fresh = events[max(0, len(events) - new):] if new else ()
        for addr, evs in events_by_gpu(fresh, snap).items():
            for ev in evs:
                self._count(addr, ev)
        return EventCounts(dict(c.gpus), dict(c.xid), dict(c.code), dict(c.fell), dict(c.aer))

    def _count(self, addr: str, ev: KernelEvent) -> None:
        c = self._counts
        c.gpus.setdefault(addr, (addr, "", "", "", ""))
        if ev.kind == XID and ev.xid is not None:
            c.xid[(addr, ev.severity)] = c.xid.get((addr, ev.severity), 0) + 1
            key = (addr, ev.xid, ev.severity)
            c.code[key] = c.code.get(key, 0) + 1
            if ev.xid == FALLEN_OFF_BUS:
                c.fell[addr] = c.fell.get(addr, 0) + 1
        elif ev.kind == AER:
            c.aer[(addr, ev.severity)] = c.aer.get((addr, ev.severity), 0) + 1


def event_families(counts: EventCounts) -> Iterator[Metric]:
    """The event counters: every GPU seen, every severity, 0 where nothing was counted."""
    def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=[*GPU_LABELS, *extra])

    xid = counter("nodeconsole_gpu_xid_events_by_severity",
                  "Xid events read since the exporter started, by the Xid's severity", ("severity",))
    fell = counter("nodeconsole_gpu_fallen_off_bus_events", "Xid 79 (fallen off the bus) read since the exporter started")
    aer = counter("nodeconsole_gpu_aer_events", "PCIe AER errors read since the exporter started, by severity",
                  ("severity",))
    code = counter("nodeconsole_gpu_xid_events", "Xid events read since the exporter started, by code and severity "
                   "(a series once a code was seen)", ("xid", "severity"))
    xid_sevs = dict.fromkeys([*XID_SEVERITIES, *sorted(s for _, s in counts.xid)])  # a severity of no table too
    aer_sevs = dict.fromkeys([*AER_SEVERITIES, *sorted(s for _, s in counts.aer)])
    for addr, lb in sorted(counts.gpus.items()):
        for sev in xid_sevs:
            xid.add_metric([*lb, sev], counts.xid.get((addr, sev), 0))
        fell.add_metric(list(lb), counts.fell.get(addr, 0))
        for sev in aer_sevs:
            aer.add_metric([*lb, sev], counts.aer.get((addr, sev), 0))
    for (addr, n, sev), count in sorted(counts.code.items()):
        code.add_metric([*counts.gpus[addr], str(n), sev], count)
    yield from (xid, fell, aer, code)


def health_families(snap: HostSnapshot) -> Iterator[Metric]:
    """Each GPU's health verdict and its reasons."""
    health = GaugeMetricFamily("nodeconsole_gpu_health", "1 for the GPU's health state, 0 for the other states",
                               labels=[*GPU_LABELS, "state"])
    reason = GaugeMetricFamily("nodeconsole_gpu_health_reason", "1 for each reason of the GPU's health state",
                               labels=[*GPU_LABELS, "reason"])
    for g in snap.gpus:
        lb = list(gpu_labels(g))
        for st in HEALTH_STATES:
            health.add_metric([*lb, st], 1 if g.health.state == st else 0)
        for r in dict.fromkeys(clip(visible(r), REASON_MAX) for r in g.health.reasons):
            reason.add_metric([*lb, r], 1)
    yield from (health, reason)
