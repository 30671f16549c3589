"""nvml.json states for the NVML tests (format in docs/demo-host.md) and a helper that installs a simulated
library under the real pynvml for one test."""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from nodeconsole.console.demo.nvml_sim import SimulatedNvml

H100, A100, L40S, A100_80 = "0000:17:00.0", "0000:3b:00.0", "0000:ca:00.0", "0000:4e:00.0"
MIG_UUID = "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"


def gpu(address: str, model: str, name: str, memory_mib: int, **extra: Any) -> dict[str, Any]:
    entry = {"address": address, "model": model, "name": name,
             "uuid": f"GPU-{address.replace(':', '').replace('.', '')}-0000-0000-0000-000000000000",
             "serial": "1650" + address[5:7] + "000000", "memory_total_mib": memory_mib, "power_limit_w": 400,
             "pcie": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16}, "processes": [],
             "ecc": {"volatile_uncorrected": 0, "aggregate_uncorrected": 0}, "retired_pages": 0,
             "remapped_rows": {"pending": 0, "failure": 0}, "not_supported": [], "lost": False}
    entry.update(extra)
    return entry


def demo_state() -> dict[str, Any]:
    """Four GPUs: H100 with MIG on and one 3g instance, A100 busy with a process and MIG off, L40S with
    vGPUs (power NOT_SUPPORTED), A100-80GB idle with MIG off. Addresses deliberately out of PCI order."""
    return copy.deepcopy({
        "driver_version": "550.90.07",
        "cuda_driver_version": 12040,
        "gpus": [
            gpu(L40S, "L40S", "NVIDIA L40S", 46068, power_limit_w=350, not_supported=["power"],
                vgpu={"supported_type_ids": [1001, 1002], "active": [
                    {"instance_id": 3251634176, "type_id": 1001,
                     "uuid": "5b3ef1a8-0000-4000-8000-000000000001",
                     "mdev_uuid": "aaaaaaaa-0000-0000-0000-000000000001", "vm_id": "desk",
                     "vm_uuid": "11111111-2222-3333-4444-000000000003", "gi_id": None}]},
                load={"base": 20, "amplitude": 10, "period_s": 30}),
            gpu(H100, "H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", 81559, power_limit_w=700,
                pcie={"gen": 5, "width": 16, "max_gen": 5, "max_width": 16},
                mig={"capable": True, "current": 1, "pending": 1, "instances": [
                    {"gi_id": 1, "profile_id": 9, "start": 0, "size": 4, "uuid": MIG_UUID,
                     "compute_instances": [{"ci_id": 0, "profile_id": 2}]}]},
                load={"base": 40, "amplitude": 30, "period_s": 60}),
            gpu(A100, "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 40960,
                mig={"capable": True, "current": 0, "pending": 0, "instances": []},
                processes=[{"pid": 4242, "name": "python3", "used_mib": 30000},
                           {"pid": 4243, "name": "Xorg", "used_mib": 12, "type": "graphics"}],
                ecc={"volatile_uncorrected": 2, "aggregate_uncorrected": 5},
                retired_pages={"single_bit": 1, "double_bit": 2}, remapped_rows={"pending": 1, "failure": 0},
                load={"base": 70, "amplitude": 20, "period_s": 45}),
            gpu(A100_80, "A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 81920,
                mig={"capable": True, "current": 0, "pending": 1, "instances": []}),
        ],
        "vgpu_types": {"1001": {"name": "NVIDIA L40S-4C", "framebuffer_mib": 4096, "max_instances": 12},
                       "1002": {"name": "NVIDIA L40S-8C", "framebuffer_mib": 8192, "max_instances": 6}},
    })


def mig_state(model: str = "A100-SXM4-40GB", current: int = 1, **extra: Any) -> dict[str, Any]:
    """One MIG-capable GPU of `model` with MIG mode `current` and no instances."""
    names = {"A100-SXM4-40GB": ("NVIDIA A100-SXM4-40GB", 40960),
             "A100-SXM4-80GB": ("NVIDIA A100-SXM4-80GB", 81920),
             "H100-80GB-HBM3": ("NVIDIA H100 80GB HBM3", 81559), "H200-141GB": ("NVIDIA H200", 143771),
             "A30-24GB": ("NVIDIA A30", 24576)}
    name, mem = names[model]
    return {"driver_version": "550.90.07", "cuda_driver_version": 12040,
            "gpus": [gpu(H100, model, name, mem, mig={"capable": True, "current": current, "pending": current,
                                                      "instances": []}, **extra)],
            "vgpu_types": {}}


def driver_tree(root: Path, drivers: dict[str, str]) -> Path:
    """A minimal sysfs: sys/bus/pci/devices/ADDR/driver → ../../../../bus/pci/drivers/NAME."""
    for addr, drv in drivers.items():
        set_driver(root, addr, drv)
    return root


def set_driver(root: Path, addr: str, drv: str) -> None:
    dev = root / "sys/bus/pci/devices" / addr
    dev.mkdir(parents=True, exist_ok=True)
    (root / "sys/bus/pci/drivers" / drv).mkdir(parents=True, exist_ok=True)
    link = dev / "driver"
    if link.is_symlink():
        link.unlink()
    os.symlink(f"../../../../bus/pci/drivers/{drv}", link)


def new_sim(state: dict[str, Any] | Path, **kwargs: Any) -> SimulatedNvml:
    return SimulatedNvml(state, **kwargs)
