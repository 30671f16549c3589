"""The snapshot's GPU: what NVML measures of it (GpuMetrics, NA for what the GPU does not support), its
MIG instances, vGPUs, owner, processes and NVLinks (console/model.py gathers the whole model)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from nodeconsole.console.gpu_events import Drain, Health, KernelEvent
from nodeconsole.console.model_host import PciLink
from nodeconsole.console.model_json import NOT_JSON, json_as, to_jsonable

NA = "N/A"
LINKS_READ = "read"  # GpuMetrics.nvlink_state: NVML listed the GPU's NVLinks

# A value NVML may not support: a number, NA when not supported, None when not read at all.
Metric = int | float | str | None


def is_na(value: object) -> bool:
    return value == NA


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
    # each NVLink of the GPU; `nvlink_state` says whether NVML listed them (the JSON writes the links, or
    # the state when there are none: N/A without NVLink, null when not read)
    nvlinks: tuple[NvLink, ...] = field(default=(), metadata=json_as(lambda g: _nvlinks_json(g)))
    fabric_state: Metric = None  # NVLink fabric: "completed", "in progress", "not started"; NA before Hopper
    fabric_status: Metric = None  # "ok", or why the GPU could not join the fabric
    fabric_clique_id: Metric = None
    nvlink_state: str | None = field(default=None, metadata=NOT_JSON)  # LINKS_READ, NA (no NVLink), None: not read

    @property
    def nvlinks_read(self) -> bool:
        """NVML answered about NVLink: the links, or that the GPU has none."""
        return bool(self.nvlinks) or self.nvlink_state is not None


def _nvlinks_json(g: GpuMetrics) -> Any:
    return to_jsonable(g.nvlinks) if g.nvlinks or g.nvlink_state == LINKS_READ else g.nvlink_state


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
    if not a.nvlinks or not b.nvlinks or a.address == b.address:
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
