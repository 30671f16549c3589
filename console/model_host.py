"""The snapshot's parts that describe the host's hardware: its name and kernel, CPUs, NUMA nodes, PCI
functions and links, the IOMMU and its groups (console/model.py gathers the whole model)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class HostInfo:
    """The host's name and kernel."""

    hostname: str = ""
    kernel: str = ""
    cmdline: str = ""
    cpu_vendor: str = ""  # "intel", "amd", "arm", "" when unknown (drives the IOMMU kernel flag advice)


@dataclass(frozen=True)
class Cpu:
    """One logical CPU and where it sits (package, core, NUMA node)."""

    id: int
    package: int  # physical_package_id, -1 when unknown (offline CPUs have no topology files)
    core: int  # unique physical core number within its package (see sources/sysfs.py), -1 unknown
    numa_node: int | None
    online: bool
    die: int = 0
    core_id: int = -1  # raw sysfs core_id (repeats across dies)
    siblings: tuple[int, ...] = ()  # hyperthread siblings including itself


@dataclass(frozen=True)
class NumaNode:
    """A NUMA node: its CPUs and memory."""

    id: int
    cpus: tuple[int, ...]
    memory_kib: int
    distances: tuple[int, ...] = ()  # in the order of the snapshot's numa_nodes
    hugepages: tuple[tuple[int, int], ...] = ()  # (page size kib, nr pages)
    online: bool = True


@dataclass(frozen=True)
class PciLink:
    """A PCIe link: its current and greatest speed and width."""

    current_speed: str = ""  # as sysfs writes it, e.g. "16.0 GT/s PCIe"
    current_width: int | None = None
    max_speed: str = ""
    max_width: int | None = None

    @property
    def downtrained(self) -> bool:
        """Width below max is the downtraining signal (speed drops at idle on GPUs, width does not)."""
        if self.current_width and self.max_width:
            return self.current_width < self.max_width
        return False


@dataclass(frozen=True)
class PciDevice:
    """One PCI function as sysfs shows it: identity, driver, place in the tree, IOMMU group."""

    address: str  # canonical DDDD:BB:DD.F (domain may have more than 4 hex digits)
    vendor_id: int
    device_id: int
    class_id: int  # 24-bit class code, e.g. 0x030200
    driver: str | None
    numa_node: int | None
    iommu_group: int | None
    parent: str | None  # address of the upstream PCI bridge/port, None under a host bridge
    subsystem_vendor_id: int | None = None
    subsystem_device_id: int | None = None
    driver_override: str | None = None
    vendor_name: str = ""
    device_name: str = ""
    class_name: str = ""
    local_cpus: tuple[int, ...] = ()
    link: PciLink = field(default_factory=PciLink)
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    physfn: str | None = None  # for a VF: its PF
    vfs: tuple[str, ...] = ()  # for a PF: its VFs
    boot_vga: bool = False
    is_bridge: bool = False

    @property
    def base_class(self) -> int:
        return self.class_id >> 16


@dataclass(frozen=True)
class IommuGroup:
    """An IOMMU group and the functions in it."""

    id: int
    devices: tuple[str, ...]
    viable: bool
    reason: str = ""


@dataclass(frozen=True)
class Iommu:
    """Whether the IOMMU is on, and its groups."""

    enabled: bool
    groups: tuple[IommuGroup, ...] = ()
    cmdline_flags: tuple[str, ...] = ()  # iommu related kernel command line words
    acs_override: bool = False
    how_to_enable: str = ""  # advice when disabled
