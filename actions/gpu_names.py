"""One name per GPU: NVML's, once seen, for a GPU that has since gone to vfio-pci (where NVML cannot see
it and sysfs only knows pci.ids' chip name, e.g. "GH100 [H100 SXM5 80GB]" for "NVIDIA H100 80GB HBM3").

Every change that names a GPU NVML sees records that name in its audit request (`gpu_name`); the
snapshots the actions plan from take the names the audit log remembers per PCI address as the
collector's known names (NVML's answer of the moment still wins). So the passthrough and the release
of one GPU carry one name in their titles and in the log. A GPU NVML never saw keeps pci.ids' name.
"""
from __future__ import annotations

from typing import Any

from nodeconsole.actions.audit import AuditLog
from nodeconsole.console.model import Gpu


def with_gpu_name(request: dict[str, Any], gpu: Gpu) -> dict[str, Any]:
    """`request` with the GPU's name when NVML gave it (it sees the GPU now)."""
    if gpu.nvml_index is not None and gpu.name:
        request["gpu_name"] = gpu.name
    return request


def recorded_names(log: AuditLog) -> dict[str, str]:
    """PCI address → the GPU name the newest record of the audit log that named it gave ({} when
    unreadable)."""
    try:
        records = log.records()
    except OSError:
        return {}
    names: dict[str, str] = {}
    for r in records:
        req = r.request
        if req is not None and isinstance(req.get("gpu"), str) and isinstance(req.get("gpu_name"), str):
            names[req["gpu"]] = req["gpu_name"]
    return names
