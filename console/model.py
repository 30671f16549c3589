"""The immutable host snapshot and its parts.

Every source produces pieces of this model; the collector assembles one frozen `HostSnapshot` per tick.
Field names are a public interface (`nodeconsole snapshot --json`): add fields, never rename them.

Conventions:
- IDs are ints; CPU sets are sorted tuples of ints (lists in JSON).
- A metric that NVML reports as NOT_SUPPORTED is the string ``NA`` ("N/A"), never 0.
  ``None`` means "not read" (e.g. a GPU that NVML cannot see because it sits on vfio-pci).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from nodeconsole.console.gpu_events import Drain, Health, KernelEvent, SourceChange
from nodeconsole.console.source_state import SOURCE_NAMES, SOURCE_OK, SOURCE_PENDING, SourceState  # noqa: F401

SCHEMA = 1
NA = "N/A"
NOT_JSON = {"json": False}  # a field's metadata: left out of to_jsonable (the snapshot's JSON)

# A value NVML may not support: a number, NA when not supported, None when not read at all.
Metric = int | float | str | None


def is_na(value: object) -> bool:
    return value == NA


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


@dataclass(frozen=True)
class MigInstance:
    """A MIG GPU instance: its profile, placement and compute instances."""

    profile: str  # e.g. "3g.40gb"
    start: int
    size: int
    uuid: str | None = None
    vm: str | None = None
    gi_id: int | None = None
    profile_id: int | None = None
    compute_instances: tuple[str, ...] = ()  # CI profile names


@dataclass(frozen=True)
class Mig:
    """A GPU's MIG mode (current and pending) and its instances."""

    mode: str = NA  # "enabled" / "disabled" / NA (not capable or not readable)
    pending_mode: str = NA
    instances: tuple[MigInstance, ...] = ()
    memory_slices: int = 0


@dataclass(frozen=True)
class VgpuType:
    """A vGPU type a GPU offers, and how many more can be made."""

    id: str  # mdev type name ("nvidia-123") or creatable id ("1414")
    name: str
    available: int | None = None
    max_instances: int | None = None
    framebuffer_mib: int | None = None
    via: str = ""  # "mdev", "sriov" or "nvml"
    parent: str = ""  # PCI address offering this type (the GPU or one of its VFs)


@dataclass(frozen=True)
class VgpuInstance:
    """A vGPU made on a GPU, and the VM using it."""

    uuid: str  # mdev UUID, or VF address for SR-IOV vGPU
    type_name: str
    parent: str  # PCI address of the GPU/VF it lives on
    vm: str | None = None


@dataclass(frozen=True)
class Vgpu:
    """A GPU's vGPU types and instances."""

    types: tuple[VgpuType, ...] = ()
    instances: tuple[VgpuInstance, ...] = ()


@dataclass(frozen=True)
class GpuOwner:
    """Who holds a GPU: the host's driver, vfio-pci, MIG, vGPU or nobody, and the VMs using it."""

    kind: str  # "host", "vfio", "mig", "vgpu", "unbound"
    vms: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuProcess:
    """A process using a GPU (NVML)."""

    pid: int
    name: str
    used_memory_mib: Metric = None
    kind: str = "compute"


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU as NVML reports it (read on the slow cadence; the remote end once per NVML
    session). Counters follow Metric: NA when not supported, None when not read."""
    link: int
    active: bool
    version: Metric = None  # NVLink generation (4 on H100)
    remote: str | None = None  # PCI address of the other end: an NVSwitch on HGX, a GPU over a bridge
    remote_type: str = ""  # "gpu", "switch", "ibmnpu", "" when unknown
    replay: Metric = None  # data-link error counters (NVML_NVLINK_ERROR_DL_*)
    recovery: Metric = None
    crc_flit: Metric = None
    crc_data: Metric = None

    @property
    def errors(self) -> int:
        return sum(v for v in (self.replay, self.recovery, self.crc_flit, self.crc_data) if isinstance(v, int))


@dataclass(frozen=True, kw_only=True)
class GpuMetrics:
    """What NVML measures of a GPU; shared by the NVML source's record and the snapshot's Gpu
    (keyword-only, so these fields follow each subclass's own)."""
    memory_total_mib: Metric = None
    memory_used_mib: Metric = None
    utilization_gpu: Metric = None  # percent
    utilization_memory: Metric = None
    temperature_c: Metric = None
    power_w: Metric = None
    power_limit_w: Metric = None
    ecc_volatile_uncorrected: Metric = None
    ecc_aggregate_uncorrected: Metric = None
    retired_pages: Metric = None
    remapped_rows_pending: Metric = None
    remapped_rows_failure: Metric = None
    pcie_gen: Metric = None
    pcie_width: Metric = None
    pcie_max_gen: Metric = None
    pcie_max_width: Metric = None
    persistence_mode: Metric = None  # "enabled" / "disabled"; NA when the GPU does not support it
    # -- health, read on the slow cadence --
    clock_sm_mhz: Metric = None
    clock_sm_max_mhz: Metric = None
    clock_mem_mhz: Metric = None
    clock_mem_max_mhz: Metric = None
    # the active clock-event (throttle) reasons by name ("gpu_idle", "sw_power_cap", "hw_thermal_slowdown"
    # …, see CLOCK_EVENT_NAMES); () none, NA when not supported
    clock_events: tuple[str, ...] | str | None = None
    ecc_volatile_corrected: Metric = None
    ecc_aggregate_corrected: Metric = None
    remapped_rows_correctable: Metric = None  # rows remapped for correctable / uncorrectable errors
    remapped_rows_uncorrectable: Metric = None
    pcie_replay_count: Metric = None
    nvlinks: tuple[NvLink, ...] | str | None = None  # each link; NA when the GPU has no NVLink
    fabric_state: Metric = None  # NVLink fabric: "completed", "in progress", "not started"; NA before Hopper
    fabric_status: Metric = None  # "ok", or why the GPU could not join the fabric
    fabric_clique_id: Metric = None


# nvmlClocksEventReason* bits → the names `clock_events` uses (nvidia-smi -q, "Clocks Event Reasons").
CLOCK_EVENT_NAMES: dict[int, str] = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}


def clock_event_names(mask: int) -> tuple[str, ...]:
    """The names of the bits set in a clock-event reason mask, lowest bit first ("bit N" when unknown)."""
    return tuple(CLOCK_EVENT_NAMES.get(1 << b, f"bit {b}") for b in range(64) if mask >> b & 1)


def nvlink_peers(a: Gpu, b: Gpu) -> int:
    """NVLinks joining two GPUs, as `nvidia-smi topo -m` counts them (its NV#): the active links of `a`
    that end on `b`, or on a switch that `b` also has an active link to (NVSwitch: each GPU reaches every
    other through all of its links). 0 when NVML does not report NVLink for either."""
    if not isinstance(a.nvlinks, tuple) or not isinstance(b.nvlinks, tuple) or a.address == b.address:
        return 0
    b_switches = {lk.remote for lk in b.nvlinks if lk.active and lk.remote_type == "switch"}
    return sum(1 for lk in a.nvlinks if lk.active and lk.remote is not None
               and (lk.remote == b.address or (lk.remote_type == "switch" and lk.remote in b_switches)))


def metric_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(GpuMetrics))


def format_metric(v: object, unit: str = "", digits: int = 0) -> str:
    """Numbers with a unit; N/A stays N/A (never 0); not read is '-'."""
    if v is None:
        return "-"
    if v == NA:
        return NA
    if isinstance(v, float):
        return f"{v:.{digits}f}{unit}"
    return f"{v}{unit}"


@dataclass(frozen=True)
class Gpu(GpuMetrics):
    """One NVIDIA GPU: what sysfs and NVML say of it, merged."""

    address: str
    name: str
    uuid: str | None
    driver: str | None
    numa_node: int | None
    owner: GpuOwner
    mig: Mig = field(default_factory=Mig)
    vgpu: Vgpu = field(default_factory=Vgpu)
    index: int = 0  # console index, stable: order of PCI address
    nvml_index: int | None = None  # None = NVML does not see it
    link: PciLink = field(default_factory=PciLink)  # from sysfs; works on vfio too
    processes: tuple[GpuProcess, ...] = ()
    iommu_group: int | None = None
    nvml_error: str = ""  # e.g. "GPU is lost" for one GPU while others read fine
    # its kernel-log events (Xid, AER; oldest first, the newest few) and the verdict on its health
    # (console/health.py): every consumer reads this verdict
    events: tuple[KernelEvent, ...] = ()
    health: Health = field(default_factory=Health)
    drain: Drain | None = None  # an admin's drain mark (console/drains.py): no new work until undrained

    @property
    def smi(self) -> str:
        """nvidia-smi's index of the GPU (NVML's order) as shown: "3", or "–" when NVML does not see it."""
        return "–" if self.nvml_index is None else str(self.nvml_index)


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
    """A libvirt domain: its state, vCPUs and their pins, memory, host devices and CPU use."""

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


@dataclass(frozen=True)
class RdmaPort:
    """One port of an RDMA device (/sys/class/infiniband/DEV/ports/N)."""
    device: str  # RDMA device name, e.g. mlx5_0
    port: int
    state: str = ""  # "ACTIVE", "DOWN", "INIT" ... (the name in "4: ACTIVE")
    phys_state: str = ""  # "LinkUp", "Polling", "Disabled" ...
    rate: str = ""  # as sysfs writes it, e.g. "400 Gb/sec (4X NDR)"
    rate_gbps: float | None = None
    link_layer: str = ""  # "InfiniBand" or "Ethernet" (RoCE)


@dataclass(frozen=True)
class NetFunction:
    """What a network PCI function's driver registered: RDMA devices with their ports, and netdevs."""
    address: str
    rdma: tuple[str, ...] = ()
    ports: tuple[RdmaPort, ...] = ()
    netdevs: tuple[str, ...] = ()
    netdev_link_layer: str = ""  # from the first netdev's type (1 Ethernet, 32 InfiniBand)
    sriov_drivers_autoprobe: bool | None = None  # PFs: whether new VFs are probed by a host driver


@dataclass(frozen=True)
class NicVf:
    """One SR-IOV virtual function of a NIC."""
    address: str
    index: int  # its virtfnN number
    driver: str | None = None
    driver_override: str | None = None
    iommu_group: int | None = None
    rdma: tuple[str, ...] = ()  # the host's RDMA devices on it (none while on vfio-pci)
    netdevs: tuple[str, ...] = ()
    vm: str | None = None  # the VM whose definition holds it
    vm_state: str | None = None


@dataclass(frozen=True)
class NicGpu:
    """A GPU as seen from a NIC: its PCIe distance (nvidia-smi topo -m levels PIX/PXB/PHB/NODE/SYS)."""
    address: str
    index: int
    distance: str


@dataclass(frozen=True)
class Nic:
    """A network controller's physical function with its VFs and its place beside the GPUs."""
    address: str
    label: str  # NIC0, NIC1 ... as the topology matrix names it
    name: str  # the device's name (pci.ids), e.g. "MT2910 Family [ConnectX-7]"
    vendor: str = ""
    driver: str | None = None
    numa_node: int | None = None
    link_layer: str = ""  # "InfiniBand", "Ethernet" or "" when nothing tells
    rdma: tuple[str, ...] = ()
    ports: tuple[RdmaPort, ...] = ()
    netdevs: tuple[str, ...] = ()
    link: PciLink = field(default_factory=PciLink)
    iommu_group: int | None = None
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    sriov_drivers_autoprobe: bool | None = None
    vfs: tuple[NicVf, ...] = ()
    gpus: tuple[NicGpu, ...] = ()  # every GPU, closest first
    vm: str | None = None  # a VM whose definition holds the PF itself

    @property
    def closest(self) -> tuple[NicGpu, ...]:
        """The GPUs at the smallest distance (empty without GPUs)."""
        if not self.gpus:
            return ()
        best = self.gpus[0].distance
        return tuple(g for g in self.gpus if g.distance == best)


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
        for v in self.vms:
            if v.name == name:
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


def to_jsonable(obj: Any) -> Any:
    """Dataclasses → dicts (but the fields marked NOT_JSON), tuples → lists; recursion without copying
    twice."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.metadata.get("json", True)}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj
