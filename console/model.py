"""The immutable host snapshot and its parts.

Every source produces pieces of this model; the collector assembles one frozen `HostSnapshot` per tick.
Field names are a public interface (`nodeconsole snapshot --json`): add fields, never rename them.

Conventions:
- IDs are ints; CPU sets are sorted tuples of ints (lists in JSON).
- A metric that NVML reports as NOT_SUPPORTED is the string ``NA`` ("N/A"), never 0.
  ``None`` means "not read" (e.g. a GPU that NVML cannot see because it sits on vfio-pci).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodeconsole.console.gpu_events import KernelEvent, SourceChange
from nodeconsole.console.model_gpu import (  # noqa: F401 (the model's names, importable from here)
    CLOCK_EVENT_NAMES,
    LINKS_READ,
    NA,
    Gpu,
    GpuMetrics,
    GpuOwner,
    GpuProcess,
    Metric,
    Mig,
    MigInstance,
    NvLink,
    Vgpu,
    VgpuInstance,
    VgpuType,
    clock_event_names,
    format_metric,
    is_na,
    metric_names,
    nvlink_peers,
)
from nodeconsole.console.model_host import (  # noqa: F401
    Cpu,
    HostInfo,
    Iommu,
    IommuGroup,
    NumaNode,
    PciDevice,
    PciLink,
)
from nodeconsole.console.model_json import NOT_JSON, to_jsonable
from nodeconsole.console.model_net import NetFunction, Nic, NicGpu, NicVf, RdmaPort  # noqa: F401
from nodeconsole.console.source_state import SOURCE_NAMES, SOURCE_OK, SOURCE_PENDING, SourceState  # noqa: F401

SCHEMA = 1


@dataclass(frozen=True)
class VcpuPin:
    """The host CPUs one vCPU of a VM may run on."""

    vcpu: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class Hostdev:
    """A host device given to a VM (a PCI function or an mdev)."""

    type: str  # "pci" or "mdev"
    address: str | None = None  # host PCI address for type pci
    uuid: str | None = None  # mdev uuid
    gpu: str | None = None  # host PCI address of the GPU this hostdev maps to, if any
    managed: bool = True
    guest_address: str | None = None  # the PCI address the guest sees (the hostdev's own <address>), if set


@dataclass(frozen=True)
class Vm:
    """A VM (a libvirt domain, or a Proxmox VE qemu-server VM): its state, vCPUs and their pins, memory,
    host devices and CPU use."""

    name: str
    state: str  # "running", "paused", "shut off", "crashed", ...
    vcpus: int
    pins: tuple[VcpuPin, ...] = ()
    emulator_pins: tuple[int, ...] = ()
    memory_kib: int = 0
    hostdevs: tuple[Hostdev, ...] = ()
    cpu_percent: float | None = None  # of one host CPU × 100 per vCPU-time; None until two samples
    uuid: str = ""
    numa_mode: str | None = None  # numatune memory mode ("strict", "preferred", "interleave")
    numa_nodeset: tuple[int, ...] = ()
    threads_per_core: int = 1  # guest CPU topology
    # Huge page size (KiB) the VM's memory is backed with (<memoryBacking><hugepages>); 0 = the host's
    # default huge page size (<hugepages/> without <page>); None = not backed by huge pages.
    hugepages_kib: int | None = None
    # vCPU steal: percent of the time its vCPU threads were runnable but waiting for a host CPU (their
    # /proc/PID/task/TID/schedstat wait time), averaged over its vCPUs; None when the host does not say
    steal_percent: float | None = None
    # -- the hypervisor: "libvirt" (a domain) or "proxmox" (a qemu-server VM, console/vms/proxmox.py) --
    hypervisor: str = "libvirt"
    vmid: int | None = None  # Proxmox's VM id; None for libvirt
    lock: str | None = None  # Proxmox's `lock:` (backup, migrate, snapshot…): changes are refused
    template: bool = False  # a Proxmox template: never runs, holds no device
    pending: tuple[str, ...] = ()  # options whose new value waits (Proxmox [PENDING]) for the VM's restart
    pending_delete: tuple[str, ...] = ()  # options whose removal waits likewise
    # what is wrong with the VM's config as read ("FILE:LINE: …", a mapping that no longer matches sysfs)
    config_problems: tuple[str, ...] = ()
    rss_kib: int | None = None  # the QEMU process's resident memory (Proxmox: /proc/PID/status); None: not read


@dataclass(frozen=True)
class HugepageUse:
    """Huge pages of one size on a node: total and free."""

    size_kib: int
    total: int
    free: int


@dataclass(frozen=True)
class NodeUse:
    """How busy one NUMA node is: CPU use of its online CPUs, memory and huge pages used and free
    (sysfs node meminfo and hugepages)."""
    node: int
    cpu_percent: float | None = None  # mean busy percent of its online CPUs; None until two samples
    memory_total_kib: int = 0
    memory_free_kib: int = 0
    hugepages: tuple[HugepageUse, ...] = ()

    @property
    def memory_used_kib(self) -> int:
        return max(0, self.memory_total_kib - self.memory_free_kib)


@dataclass(frozen=True)
class Load:
    """CPU and memory use: per CPU, per node, and the host's."""

    cpu_percent: tuple[float, ...] = ()  # per online CPU, index = position in psutil's order
    memory_total_kib: int = 0
    memory_available_kib: int = 0
    load_avg: tuple[float, float, float] = (0.0, 0.0, 0.0)
    nodes: tuple[NodeUse, ...] = ()  # per NUMA node; cpu_percent filled in by the collector


@dataclass(frozen=True)
class Sources:
    """Each source's state (a SourceState; a str given is made one)."""

    sysfs: SourceState = SOURCE_OK
    nvml: SourceState = SOURCE_OK
    libvirt: SourceState = SOURCE_OK
    psutil: SourceState = SOURCE_OK

    def __post_init__(self) -> None:
        for name in SOURCE_NAMES:
            value = getattr(self, name)
            if type(value) is not SourceState:
                object.__setattr__(self, name, SourceState(value))

    def items(self) -> tuple[tuple[str, SourceState], ...]:
        """(name, state) of each source, in their order."""
        return tuple((name, getattr(self, name)) for name in SOURCE_NAMES)


@dataclass(frozen=True)
class HostSnapshot:
    """Everything one poll read of the host; immutable, handed to the screens and the CLI."""

    schema: int
    taken_at: float
    host: HostInfo
    cpus: tuple[Cpu, ...]
    numa_nodes: tuple[NumaNode, ...]
    pci_devices: tuple[PciDevice, ...]
    iommu: Iommu
    gpus: tuple[Gpu, ...]
    vms: tuple[Vm, ...]
    load: Load
    sources: Sources
    nvml_driver_version: str | None = None
    problems: tuple[Problem, ...] = ()
    nics: tuple[Nic, ...] = ()  # network controllers (physical functions) with their VFs
    # -- the kernel log as the console's poll read it (not in the JSON: each GPU's events are, and
    # `nodeconsole events --json` writes the log's; a sysfs-only first frame has none of them) --
    # the host's and the guests' GPU events tied to the VMs, oldest first (the newest few hundred)
    kernel_events: tuple[KernelEvent, ...] = field(default=(), metadata=NOT_JSON)
    source_changes: tuple[SourceChange, ...] = field(default=(), metadata=NOT_JSON)  # sources lost, got back
    kernel_log_error: str = field(default="", metadata=NOT_JSON)  # why the log cannot be read, else ""

    # -- lookups (cheap, used by screens and actions) --
    def pci(self, address: str) -> PciDevice | None:
        for d in self.pci_devices:
            if d.address == address:
                return d
        return None

    def gpu(self, address: str) -> Gpu | None:
        for g in self.gpus:
            if g.address == address:
                return g
        return None

    def vm(self, name: str) -> Vm | None:
        """The VM called `name`; else the Proxmox VM whose vmid `name` is."""
        for v in self.vms:
            if v.name == name:
                return v
        if name.isascii() and name.isdigit():
            for v in self.vms:
                if v.vmid is not None and v.vmid == int(name):
                    return v
        return None

    def nic(self, address: str) -> Nic | None:
        """The NIC whose PF is `address`, or whose VF it is."""
        for n in self.nics:
            if n.address == address or any(v.address == address for v in n.vfs):
                return n
        return None

    def group(self, gid: int | None) -> IommuGroup | None:
        for g in self.iommu.groups:
            if g.id == gid:
                return g
        return None

    def cpu_node(self) -> dict[int, int | None]:
        return {c.id: c.numa_node for c in self.cpus}

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-able data (`snapshot --json` prints it); every record's `to_dict` is
        data, the JSON text is made where it is written."""
        return to_jsonable(self)


@dataclass(frozen=True)
class Problem:
    """Something wrong with the host, what it is about, and how to fix it."""

    severity: str  # "error", "warning", "info"
    subject: str  # what it is about: a GPU address, VM name, "iommu", a source
    message: str
    fix: str = ""
    check: str = ""  # the doctor check (`nodeconsole doctor`, the Setup screen) that covers it, if any
