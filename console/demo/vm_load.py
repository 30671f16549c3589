"""VM CPU load on the demo host.

libvirt's test driver reports wall-clock time as CPU time, so every running test-driver VM would sit
at ~100 % for ever. The demo host gives each running VM a load that moves over time instead
(deterministic for a given name and time, like the simulated GPUs' utilization); a paused VM uses no
CPU, as on a real host.
"""
from __future__ import annotations

import math
import zlib


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
