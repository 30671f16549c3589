"""The snapshot fields that move with time. A replay shows the values captured (or, for the VMs' CPU use
and the host's load, what a replay can measure: nothing moves), so two snapshots of the same host state
are compared with these fields blanked: `blank_live(a) == blank_live(b)`."""
from __future__ import annotations

import copy
from typing import Any

SNAPSHOT_LIVE = ("taken_at",)
LOAD_LIVE = ("cpu_percent", "load_avg", "memory_available_kib")
GPU_LIVE = ("utilization_gpu", "utilization_memory", "memory_used_mib", "temperature_c", "power_w", "clock_sm_mhz",
            "clock_mem_mhz", "clock_events")
PROCESS_LIVE = ("used_memory_mib",)
VM_LIVE = ("cpu_percent", "steal_percent")
NODE_LIVE = ("cpu_percent",)  # load.nodes[]: CPU use moves; memory and huge pages are the host's state


def blank_live(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A copy of a snapshot's JSON object (HostSnapshot.to_dict()) with every live field set to None."""
    out = copy.deepcopy(snapshot)
    for key in SNAPSHOT_LIVE:
        out[key] = None
    for key in LOAD_LIVE:
        if isinstance(out.get("load"), dict):
            out["load"][key] = None
    for node in (out.get("load") or {}).get("nodes") or ():
        for key in NODE_LIVE:
            node[key] = None
    for gpu in out.get("gpus") or ():
        for key in GPU_LIVE:
            gpu[key] = None
        for proc in gpu.get("processes") or ():
            for key in PROCESS_LIVE:
                proc[key] = None
    for vm in out.get("vms") or ():
        for key in VM_LIVE:
            vm[key] = None
    return out
