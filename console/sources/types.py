"""What each source hands the collector. Sources raise `SourceError` (or any exception) on failure; the
collector turns that into `sources.<name> = "unavailable: reason"` and keeps going."""
from __future__ import annotations

from dataclasses import dataclass, field

from nodeconsole.console.model import (
    Cpu,
    GpuMetrics,
    GpuProcess,
    HostInfo,
    Iommu,
    Mig,
    NetFunction,
    NumaNode,
    PciDevice,
    VgpuInstance,
    VgpuType,
    Vm,
)


class SourceError(Exception):
    """A source cannot be read; the message is shown to the admin as the reason."""


@dataclass(frozen=True)
class SysfsData:
    host: HostInfo
    cpus: tuple[Cpu, ...]
    numa_nodes: tuple[NumaNode, ...]
    pci_devices: tuple[PciDevice, ...]
    iommu: Iommu  # groups with viable/reason computed from sysfs drivers
    vgpu_types: tuple[VgpuType, ...] = ()  # mdev_supported_types and nvidia/creatable_vgpu_types
    vgpu_instances: tuple[VgpuInstance, ...] = ()  # mdev devices and VFs with current_vgpu_type != 0
    net_functions: tuple[NetFunction, ...] = ()  # RDMA devices, netdevs of network functions (PFs and VFs)
    # the sysfs directory (under sys/bus/pci/devices) of each function with an nvidia/ directory, by address
    nvidia_dirs: tuple[tuple[str, str], ...] = ()
    # the sysfs directory of each function whose directory name is not its canonical address, by address
    odd_dirs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NvmlGpu(GpuMetrics):
    """One GPU as NVML sees it. Metrics follow model.Metric: NA when NOT_SUPPORTED."""
    address: str  # canonical PCI address (lower-case, 4+ digit domain)
    nvml_index: int
    name: str
    uuid: str | None
    mig: Mig = field(default_factory=Mig)
    vgpu_types: tuple[VgpuType, ...] = ()
    vgpu_instances: tuple[VgpuInstance, ...] = ()  # vm = VM id/name NVML reports
    processes: tuple[GpuProcess, ...] = ()
    error: str = ""  # this GPU failed (e.g. "GPU is lost"); others are still read


@dataclass(frozen=True)
class NvmlData:
    driver_version: str | None
    gpus: tuple[NvmlGpu, ...]


@dataclass(frozen=True)
class Hypervisor:
    """What the VM source's connection says of itself: libvirt's version, the driver (QEMU, or the demo's
    test driver), the hypervisor's own version and the domain types its capabilities offer (kvm, qemu)."""
    uri: str
    version: str  # libvirt's ("10.0.0"), "" when unknown
    driver: str = ""  # "QEMU", "TEST"
    driver_version: str = ""  # the hypervisor's ("8.2.2"), "" when unknown
    domain_types: tuple[str, ...] = ()  # for the host's architecture, e.g. ("qemu", "kvm")
    arch: str = ""


@dataclass(frozen=True)
class LibvirtData:
    vms: tuple[Vm, ...]
