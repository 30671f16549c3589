"""What assembling a snapshot keeps between polls (`Derived`) and which GPU a PCI function belongs to
(`GpuIndex`): used by console/assembly.py and console/gpu_merge.py, which import it from here (neither
imports the other back)."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from nodeconsole.console.model import Hostdev, PciDevice, VgpuInstance, VgpuType, Vm

T = TypeVar("T")

NVIDIA = 0x10DE


def is_gpu(dev: PciDevice) -> bool:
    """NVIDIA display/3D controllers (not their audio functions, not NVSwitches)."""
    return dev.vendor_id == NVIDIA and dev.base_class == 0x03 and dev.physfn is None


def slot_of(address: str) -> str:
    """`dddd:bb:dd.f` → `dddd:bb:dd` (all functions of one card)."""
    return address.rsplit(".", 1)[0]


class Derived:
    """What assembling a snapshot derives from parts that rarely change, kept for the next poll and used
    again while those parts are the same: the PCI index (one sysfs read), each VM's host devices mapped
    to their GPUs (one domain definition, one sysfs read), the NICs and the problems (kept while
    `nics.nic_inputs` / `checks.problem_inputs` are equal, i.e. while only the per-poll figures
    moved). Between their reads the sources hand back the very same objects, so most of these
    comparisons are identity checks. Used by one assemble at a time (`lock`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pci: tuple[PciDevice, ...] | None = None
        self.mdevs: tuple[VgpuInstance, ...] | None = None
        self.vgpu_types: tuple[VgpuType, ...] | None = None
        self.by_addr: dict[str, PciDevice] = {}
        self.gpu_of = GpuIndex({})
        self.gpu_addrs: set[str] = set()  # the GPUs among the PCI functions
        # sysfs vGPU types and instances by the GPU they live on (directly or through a VF), in order
        self.types_of: dict[str, tuple[VgpuType, ...]] = {}
        self.insts_of: dict[str, tuple[VgpuInstance, ...]] = {}
        # id(a VM's hostdevs) → (those hostdevs, mapped to their GPUs), for the last poll's VMs
        self.hostdevs: dict[int, tuple[tuple[Hostdev, ...], tuple[Hostdev, ...]]] = {}
        self.mapped_vms: dict[str, tuple[Vm, Vm]] = {}  # name → (the source's record, mapped), last poll's
        self._kept: dict[str, tuple[object, object]] = {}

    def index(self, pci: tuple[PciDevice, ...], mdevs: tuple[VgpuInstance, ...],
              vgpu_types: tuple[VgpuType, ...]) -> None:
        """Index the PCI functions and sysfs vGPUs (again only when sysfs was read again)."""
        if pci is self.pci and mdevs is self.mdevs and vgpu_types is self.vgpu_types:
            return
        self.pci, self.mdevs, self.vgpu_types = pci, mdevs, vgpu_types
        self.by_addr = {d.address: d for d in pci}
        self.gpu_of = gpu_of = GpuIndex(self.by_addr)
        self.gpu_addrs = {d.address for d in pci if is_gpu(d)}
        types: dict[str | None, list[VgpuType]] = {}
        for t in vgpu_types:
            types.setdefault(gpu_of(t.parent), []).append(t)
        insts: dict[str | None, list[VgpuInstance]] = {}
        for i in mdevs:
            insts.setdefault(gpu_of(i.parent), []).append(i)
        self.types_of = {a: tuple(v) for a, v in types.items() if a is not None}
        self.insts_of = {a: tuple(v) for a, v in insts.items() if a is not None}
        self.hostdevs = {}
        self.mapped_vms = {}

    def keep(self, slot: str, key: object, make: Callable[[], T]) -> T:
        """`make()`, or what it made last time for an equal `key`."""
        kept = self._kept.get(slot)
        if kept is not None and kept[0] == key:
            return kept[1]  # type: ignore[return-value]
        value = make()
        self._kept[slot] = (key, value)
        return value



class GpuIndex:
    """Which GPU a host PCI function belongs to: the GPU itself, a companion function on the same
    card (audio, USB-C), or an SR-IOV VF of the GPU. Built once per snapshot (lookups are O(1))."""

    def __init__(self, by_addr: dict[str, PciDevice]) -> None:
        self.by_addr = by_addr
        self.slot_gpu = {slot_of(d.address): d.address for d in by_addr.values() if is_gpu(d)}

    def __call__(self, address: str) -> str | None:
        dev = self.by_addr.get(address)
        if dev is not None and dev.physfn:
            parent = self.by_addr.get(dev.physfn)
            return dev.physfn if parent is not None and is_gpu(parent) else None
        return self.slot_gpu.get(slot_of(address))
