"""Prometheus metrics of the host snapshot (`nodeconsole exporter`).

A background thread (`Sampler`) takes a snapshot and runs the doctor on its own cadence; a scrape
(`SnapshotCollector.collect()`) turns the latest sample into metric families and never waits for a
source. A source that was read and failed in the latest sample is `nodeconsole_source_up{source=...} 0`;
the other series are still served from what the sample did read. Before the first sample there is no
`nodeconsole_source_up` at all (nothing was read, so nothing failed): `nodeconsole exporter` takes its
first sample before its port answers, and waits at most FIRST_SAMPLE_WAIT for it.

GPU event counters and the health verdict's series: console/exporter_events.py.

Conventions (base units, `_total` counters, `_info` gauges of value 1 carrying string facts as labels):
every per-GPU series carries the labels `address`, `index`, `smi`, `uuid` and `model`; every per-VM
series the label `vm`. A metric NVML does not support (N/A) or did not read has no series: not 0.
Doctor checks are `nodeconsole_doctor_check{check, status}`: one series per status (pass, warn, fail,
skip), 1 for the check's current status and 0 for the others.
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from nodeconsole.console import __version__
from nodeconsole.console.drain_metrics import drain_families
from nodeconsole.console.exporter_events import (
    GPU_LABELS,
    EventCounter,
    EventCounts,
    event_families,
    gpu_labels,
    health_families,
)
from nodeconsole.console.model import HostSnapshot

if TYPE_CHECKING:
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.doctor.model import DoctorReport

SOURCES = ("sysfs", "nvml", "libvirt", "psutil")
DOCTOR_STATUSES = ("pass", "warn", "fail", "skip")
SEVERITIES = ("error", "warning", "info")
FIRST_SAMPLE_WAIT = 30.0  # seconds the exporter waits for its first sample before its port answers anyway
MIB = 1024 * 1024
# PCIe transfer rate (GT/s, as sysfs writes it) → generation
_GEN_OF_RATE = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}


@dataclass(frozen=True)
class Sample:
    """One collection: the snapshot, the GPU event counters, the doctor's report and how long it took."""
    snap: HostSnapshot
    events: EventCounts = field(default_factory=EventCounts)
    doctor: DoctorReport | None = None
    seconds: float = 0.0
    libvirt_version: str = ""
    hypervisor: str = "libvirt"  # "libvirt" | "proxmox": the seams' choice (console/seams.py)


class Sampler:
    """Takes a sample every `interval` seconds on a daemon thread; `latest` is the newest one (None
    before the first). `take()` takes one in the caller's thread (the textfile mode, the tests)."""

    def __init__(self, collector: Collector, interval: float = 15.0, doctor: bool = True) -> None:
        self.collector = collector
        self.interval = interval
        self.doctor = doctor
        self.latest: Sample | None = None
        self.ready = threading.Event()  # set when the first sample is taken
        self.started = time.time()
        self._counter = EventCounter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self) -> Sample:
        t0 = time.monotonic()
        snap = self.collector.collect()
        report = None
        if self.doctor:
            from nodeconsole.console.doctor.run import run_doctor

            try:
                report = run_doctor(snap, self.collector.seams.root, hypervisor=self.collector.hypervisor)
            except Exception:  # the checks guard themselves; an unexpected failure costs only them
                report = None
        counts = self._counter.update(self.collector.watch.read, snap.kernel_events, snap)
        sample = Sample(snap, counts, report, time.monotonic() - t0, self.collector.libvirt_version,
                        self.collector.seams.hypervisor)
        self.latest = sample
        self.ready.set()
        return sample

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nodeconsole-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.take()
            except Exception:  # the collector guards each source; keep serving the last sample
                pass
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))


def _num(v: object) -> float | None:
    """A metric's number; None for N/A, not read, or a non-number."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    return None


def _gen(speed: str) -> int | None:
    m = re.match(r"\s*([\d.]+)\s*GT/s", speed or "")
    if not m:
        return None
    rate = m.group(1) if "." in m.group(1) else m.group(1) + ".0"
    return _GEN_OF_RATE.get(rate)


def families(sample: Sample | None, now: float | None = None) -> Iterator[Metric]:
    """The metric families of one sample (pure: tested directly)."""
    build = GaugeMetricFamily("nodeconsole_build_info", "nodeconsole's version", labels=["version"])
    build.add_metric([__version__], 1)
    yield build
    if sample is None:  # nothing read yet: no source is up, none is down
        return
    up = GaugeMetricFamily("nodeconsole_source_up", "1 when the source was read in the latest snapshot, "
                           "0 when reading it failed", labels=["source"])
    snap = sample.snap
    for s in SOURCES:
        state = getattr(snap.sources, s)
        if not state.pending:  # not read yet: no series
            up.add_metric([s], 1 if state.ok else 0)
    yield up
    yield GaugeMetricFamily("nodeconsole_snapshot_collection_seconds",
                            "time the latest snapshot (and doctor run) took", value=sample.seconds)
    yield GaugeMetricFamily("nodeconsole_snapshot_timestamp_seconds",
                            "when the latest snapshot was taken (Unix time)", value=snap.taken_at)
    yield GaugeMetricFamily("nodeconsole_snapshot_age_seconds", "seconds since the latest snapshot was taken",
                            value=max(0.0, (time.time() if now is None else now) - snap.taken_at))
    host = GaugeMetricFamily("nodeconsole_host_info", "host versions and its hypervisor (libvirt or proxmox)",
                             labels=["hostname", "kernel", "driver", "libvirt", "hypervisor"])
    host.add_metric([snap.host.hostname, snap.host.kernel, snap.nvml_driver_version or "", sample.libvirt_version,
                     sample.hypervisor], 1)
    yield host
    yield GaugeMetricFamily("nodeconsole_iommu_enabled", "1 when the IOMMU is on", value=1 if snap.iommu.enabled else 0)
    probs = GaugeMetricFamily("nodeconsole_problems", "problems the console reports, by severity", labels=["severity"])
    for sev in SEVERITIES:
        probs.add_metric([sev], sum(1 for p in snap.problems if p.severity == sev))
    yield probs
    if sample.doctor is not None:
        doc = GaugeMetricFamily("nodeconsole_doctor_check",
                                "1 for the doctor check's current status, 0 for the others", labels=["check", "status"])
        for c in sample.doctor.checks:
            for st in DOCTOR_STATUSES:
                doc.add_metric([c.id, st], 1 if c.status == st else 0)
        yield doc
    yield from _gpu_families(sample)
    yield from event_families(sample.events)
    yield from health_families(snap)
    yield from drain_families(snap)
    yield from _vm_families(snap)


def _gpu_families(sample: Sample) -> Iterator[Metric]:
    snap = sample.snap
    info = GaugeMetricFamily("nodeconsole_gpu_info", "a GPU, its owner kind and the VMs holding it",
                             labels=[*GPU_LABELS, "driver", "numa_node", "owner", "vm"])

    def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*GPU_LABELS, *extra])

    util = gauge("nodeconsole_gpu_utilization_ratio", "GPU utilization (0-1)")
    mem_used = gauge("nodeconsole_gpu_memory_used_bytes", "GPU memory used")
    mem_total = gauge("nodeconsole_gpu_memory_total_bytes", "GPU memory total")
    temp = gauge("nodeconsole_gpu_temperature_celsius", "GPU temperature")
    power = gauge("nodeconsole_gpu_power_watts", "GPU power draw")
    ecc = gauge("nodeconsole_gpu_ecc_uncorrected_errors",
                "uncorrected ECC errors: volatile (since the driver loaded) or aggregate (lifetime)", ("scope",))
    rr_pending = gauge("nodeconsole_gpu_remapped_rows_pending", "1 when a row remapping waits for a GPU reset")
    rr_failure = gauge("nodeconsole_gpu_remapped_rows_failure", "1 when a row remapping failed")
    width = gauge("nodeconsole_gpu_pcie_link_width", "PCIe link width (lanes), current or max", ("state",))
    gen = gauge("nodeconsole_gpu_pcie_link_generation", "PCIe link generation, current or max", ("state",))
    mig = gauge("nodeconsole_gpu_mig_instances", "MIG GPU instances by profile", ("profile",))
    vgpu = gauge("nodeconsole_gpu_vgpu_instances", "vGPU instances on the GPU")
    for g in snap.gpus:
        lb = list(gpu_labels(g))
        info.add_metric([*lb, g.driver or "", "" if g.numa_node is None else str(g.numa_node), g.owner.kind,
                         ",".join(g.owner.vms)], 1)
        for fam, v, scale in ((util, g.utilization_gpu, 0.01), (mem_used, g.memory_used_mib, MIB),
                              (mem_total, g.memory_total_mib, MIB), (temp, g.temperature_c, 1),
                              (power, g.power_w, 1), (rr_pending, g.remapped_rows_pending, 1),
                              (rr_failure, g.remapped_rows_failure, 1)):
            n = _num(v)
            if n is not None:
                fam.add_metric(lb, n * scale)
        for scope, v in (("volatile", g.ecc_volatile_uncorrected), ("aggregate", g.ecc_aggregate_uncorrected)):
            n = _num(v)
            if n is not None:
                ecc.add_metric([*lb, scope], n)
        # sysfs sees the link of every GPU (vfio ones too); NVML's figures where sysfs has none
        cur_w = g.link.current_width or _num(g.pcie_width)
        max_w = g.link.max_width or _num(g.pcie_max_width)
        cur_g = _gen(g.link.current_speed) or _num(g.pcie_gen)
        max_g = _gen(g.link.max_speed) or _num(g.pcie_max_gen)
        for fam, state, v in ((width, "current", cur_w), (width, "max", max_w), (gen, "current", cur_g), (gen, "max", max_g)):
            if v:
                fam.add_metric([*lb, state], float(v))
        profiles: dict[str, int] = {}
        for mi in g.mig.instances:
            profiles[mi.profile] = profiles.get(mi.profile, 0) + 1
        for prof, n_inst in sorted(profiles.items()):
            mig.add_metric([*lb, prof], n_inst)
        if g.owner.kind == "vgpu" or g.vgpu.instances:
            vgpu.add_metric(lb, len(g.vgpu.instances))
    yield from (info, util, mem_used, mem_total, temp, power, ecc, rr_pending, rr_failure, width, gen, mig, vgpu)


def _vm_families(snap: HostSnapshot) -> Iterator[Metric]:
    from nodeconsole.console.checks import vm_alignment

    info = GaugeMetricFamily("nodeconsole_vm_info", "a VM and its state", labels=["vm", "state", "hypervisor"])
    vcpus = GaugeMetricFamily("nodeconsole_vm_vcpus", "vCPUs of the VM", labels=["vm", "hypervisor"])
    pinned = GaugeMetricFamily("nodeconsole_vm_pinned", "1 when the VM's vCPUs are pinned", labels=["vm", "hypervisor"])
    aligned = GaugeMetricFamily("nodeconsole_vm_numa_aligned",
                                "1 when the VM's vCPUs are pinned on its GPUs' NUMA nodes (no series without a GPU)",
                                labels=["vm", "hypervisor"])
    cpu = GaugeMetricFamily("nodeconsole_vm_cpu_usage_ratio", "CPU use of the VM in host CPUs (1 = one CPU busy)",
                            labels=["vm", "hypervisor"])
    mem = GaugeMetricFamily("nodeconsole_vm_memory_bytes", "memory of the VM", labels=["vm", "hypervisor"])
    for v in snap.vms:
        lb = [v.name, v.hypervisor]
        info.add_metric([v.name, v.state, v.hypervisor], 1)
        vcpus.add_metric(lb, v.vcpus)
        pinned.add_metric(lb, 1 if v.pins else 0)
        al = vm_alignment(snap, v)
        if al:
            aligned.add_metric(lb, 1 if al == "aligned" else 0)
        if v.cpu_percent is not None:
            cpu.add_metric(lb, v.cpu_percent / 100)
        mem.add_metric(lb, v.memory_kib * 1024)
    yield from (info, vcpus, pinned, aligned, cpu, mem)


class SnapshotCollector:
    """A prometheus_client collector serving the sampler's latest sample."""

    def __init__(self, latest: Callable[[], Sample | None]) -> None:
        self.latest = latest

    def collect(self) -> Iterator[Metric]:
        return families(self.latest())


def registry_for(latest: Callable[[], Sample | None]) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(latest))
    return reg
