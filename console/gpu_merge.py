"""Each GPU of a snapshot, merged from what sysfs and NVML say of it and the VMs holding it.

Pure (no I/O): `merge_gpus` reads the PCI index and sysfs vGPUs a `Derived` (console/derived.py) keeps,
NVML's records and the VMs with their host devices mapped to GPUs.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from nodeconsole.console.model import (
    Gpu,
    GpuOwner,
    Mig,
    MigInstance,
    PciDevice,
    PciLink,
    Vgpu,
    VgpuInstance,
    Vm,
    metric_names,
)
from nodeconsole.console.sources.types import NvmlData, NvmlGpu

if TYPE_CHECKING:
    from nodeconsole.console.derived import Derived

T = TypeVar("T")

VFIO_DRIVERS = ("vfio-pci", "pci-stub")
HOST_GPU_DRIVERS = ("nvidia", "nouveau")
_NVML_METRICS = metric_names()


def with_fields(obj: T, **changes: object) -> T:
    """dataclasses.replace for the model's frozen dataclasses (no __post_init__, no slots), without
    running __init__ again: a 500-VM poll replaces a field of every VM, and replace() was a fifth of it."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


@dataclass
class _Holders:
    """Who holds what, from the VMs' host devices: the VMs on each GPU (in order), the VM holding each
    mdev and each PCI function, and (made when first asked) the VM names by UUID."""
    vms: Sequence[Vm]
    users: dict[str, list[str]] = field(default_factory=dict)
    mdev_vm: dict[str | None, str] = field(default_factory=dict)
    vf_vm: dict[str | None, str] = field(default_factory=dict)
    _by_uuid: dict[str, str] | None = None

    def __post_init__(self) -> None:
        for vm in self.vms:
            for h in vm.hostdevs:
                if h.gpu and vm.name not in self.users.setdefault(h.gpu, []):
                    self.users[h.gpu].append(vm.name)
                if h.type == "mdev":
                    self.mdev_vm[h.uuid] = vm.name
                elif h.type == "pci":
                    self.vf_vm[h.address] = vm.name

    def by_uuid(self) -> dict[str, str]:
        """VM names by UUID, made when a MIG or NVML vGPU instance asks."""
        if self._by_uuid is None:
            self._by_uuid = {vm.uuid: vm.name for vm in self.vms if vm.uuid}
        return self._by_uuid


def merge_gpus(d: Derived, nvml: NvmlData | None, vms: Sequence[Vm], known_names: dict[str, str]) -> tuple[Gpu, ...]:
    """Every GPU sysfs or NVML knows, in PCI address order (their console index)."""
    nv = {g.address: g for g in (nvml.gpus if nvml else ())}
    held = _Holders(vms)
    return tuple(_gpu(d, index, addr, nv.get(addr), held, known_names)
                 for index, addr in enumerate(sorted(d.gpu_addrs | set(nv))))


def _gpu(d: Derived, index: int, addr: str, n: NvmlGpu | None, held: _Holders, known_names: dict[str, str]) -> Gpu:
    dev: PciDevice | None = d.by_addr.get(addr)
    driver = dev.driver if dev else ("nvidia" if n else None)
    # vGPU types/instances from sysfs, attached to the GPU they live on (directly or via a VF)
    types = d.types_of.get(addr, ())
    insts = tuple(_with_vm(i, i.vm or held.mdev_vm.get(i.uuid) or held.vf_vm.get(i.uuid))
                  for i in d.insts_of.get(addr, ()))
    if n is not None:
        types = types or n.vgpu_types
        if not insts and n.vgpu_instances:
            names = held.by_uuid()
            insts = tuple(_with_vm(i, names.get(i.vm or "", i.vm)) for i in n.vgpu_instances)
    mig = n.mig if n else Mig()
    if mig.instances:
        names = held.by_uuid()
        mig = replace(mig, instances=tuple(_mig_vm(mi, names) for mi in mig.instances))
    vm_names = list(held.users.get(addr, []))
    for vm in [*(i.vm for i in insts), *(mi.vm for mi in mig.instances)]:
        if vm and vm not in vm_names:
            vm_names.append(vm)
    name = (n.name if n else "") or known_names.get(addr) or (dev.device_name if dev else "") or "NVIDIA GPU"
    return Gpu(
        address=addr, name=name, uuid=n.uuid if n else None, driver=driver,
        numa_node=dev.numa_node if dev else None, owner=GpuOwner(owner_kind(driver, mig, insts), tuple(vm_names)),
        mig=mig, vgpu=Vgpu(types=types, instances=insts), index=index,
        nvml_index=n.nvml_index if n else None,
        iommu_group=dev.iommu_group if dev else None,
        link=dev.link if dev else PciLink(),
        processes=n.processes if n else (), nvml_error=n.error if n else "",
        **({k: getattr(n, k) for k in _NVML_METRICS} if n else {}),
    )


def _with_vm(inst: VgpuInstance, vm: str | None) -> VgpuInstance:
    return inst if vm == inst.vm else with_fields(inst, vm=vm)


def _mig_vm(mi: MigInstance, vm_by_uuid: dict[str, str]) -> MigInstance:
    if mi.vm and mi.vm in vm_by_uuid:
        return replace(mi, vm=vm_by_uuid[mi.vm])
    return mi


def owner_kind(driver: str | None, mig: Mig, insts: tuple[VgpuInstance, ...]) -> str:
    """Who holds a GPU: "vfio", "unbound", "mig", "vgpu" or "host"."""
    if driver in VFIO_DRIVERS:
        return "vfio"
    if driver is None:
        return "unbound"
    if mig.mode == "enabled":
        return "mig"
    if insts:
        return "vgpu"
    return "host"
