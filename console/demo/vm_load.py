"""VM CPU load on the demo host.

libvirt's test driver reports wall-clock time as CPU time, so every running test-driver VM would sit
at ~100 % for ever. The demo host gives each running VM a load that moves over time instead
(deterministic for a given name and time, like the simulated GPUs' utilization); a paused VM uses no
CPU, as on a real host.
"""
from __future__ import annotations

import math
import zlib

from nodeconsole.console.sources.pressure import cpu_layout


def demo_vm_cpu_percent(name: str, state: str, vcpus: int, t: float) -> float | None:
    """Percent of one host CPU (a 4-vCPU VM busy on all is 400 %); None when not running."""
    if state == "paused":
        return 0.0
    if state != "running":
        return None
    seed = zlib.crc32(name.encode())
    base = 0.15 + (seed % 60) / 100  # 15 %..75 % of its vCPUs on average
    period = 40 + seed % 80  # seconds
    phase = (seed >> 8) % 360
    swing = 0.2 * math.sin(2 * math.pi * t / period + math.radians(phase))
    busy = min(1.0, max(0.02, base + swing))
    return round(busy * vcpus * 100, 1)


HOST_BUSY = 3.0  # percent every host CPU spends on the host's own work (daemons, interrupts)


def demo_cpu_percent(cpus, vms) -> tuple[float, ...]:
    """Busy percent per online host CPU (CPU id order) made of the VMs' load: a pinned vCPU loads its
    pinned CPUs, an unpinned VM spreads over every online CPU, and the host's own share on top."""
    online = cpu_layout(cpus)[0]
    busy = dict.fromkeys(online, HOST_BUSY)
    for vm in vms:
        if vm.state != "running" or not vm.cpu_percent or not vm.vcpus:
            continue
        per_vcpu = vm.cpu_percent / vm.vcpus
        pins = [p.cpus for p in vm.pins if p.cpus]
        if len(pins) == vm.vcpus:
            for cpus_of in pins:
                for c in cpus_of:
                    if c in busy:
                        busy[c] += per_vcpu / len(cpus_of)
        else:
            for c in busy:
                busy[c] += vm.cpu_percent / len(busy)
    # in CPU order (busy keeps `online`'s); at most 100 %
    return tuple([round(b, 1) if b < 100.0 else 100.0 for b in busy.values()])


def demo_vm_steal_percent(vm, t: float) -> float | None:
    """vCPU steal of a running VM: a little for pinned VMs (their CPUs are their own), more for unpinned
    ones, which share every host CPU; moves over time, deterministic for a name and time."""
    if vm.state != "running":
        return None
    seed = zlib.crc32(("steal" + vm.name).encode())
    swing = 0.5 + 0.5 * math.sin(2 * math.pi * t / (30 + seed % 60))
    if vm.pins:
        return round(0.1 + (seed % 5) / 10 + 0.2 * swing, 1)
    return round(3.0 + (seed % 40) / 10 + 2.0 * swing, 1)
