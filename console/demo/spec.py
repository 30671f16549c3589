"""The description of a synthetic host: plain dataclasses the generator turns into a sysfs/procfs tree, a
libvirt test-driver node file and the simulated NVML library's state.

The spec is explicit data (every PCI function has its slot, every bridge its secondary bus) so a test can
say exactly which host it wants; `presets.py` has the builders that compute bus numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nodeconsole.console.pciaddr import format_pci_address

NVIDIA = 0x10DE


@dataclass(frozen=True)
class CpuSpec:
    """Sockets × cores × threads. CPU ids are numbered like Linux on x86: the first thread of every core
    (socket by socket), then the second threads, so a core's siblings are `n` and `n + cores`."""
    sockets: int = 2
    cores_per_socket: int = 32
    threads_per_core: int = 2
    nodes_per_socket: int = 1  # >1: sub-NUMA clustering, the cores of a socket split between nodes
    offline: tuple[int, ...] = ()  # CPUs present but offline (no topology directory, like Linux)
    extra_possible: int = 0  # hot-pluggable CPU slots beyond the present ones (widens every cpumask)
    virtualization: bool = True  # vmx/svm enabled by the firmware (in /proc/cpuinfo, kvm_intel/amd loads)
    vendor_id: str = "GenuineIntel"
    model_name: str = "Intel(R) Xeon(R) Platinum 8462Y+"
    family: int = 6
    model: int = 143
    stepping: int = 8
    mhz: float = 2800.0

    @property
    def count(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def nodes(self) -> int:
        return self.sockets * self.nodes_per_socket


@dataclass(frozen=True)
class Link:
    """PCIe link: current and maximum generation and width (generation 5 = "32.0 GT/s PCIe")."""
    gen: int
    width: int
    max_gen: int | None = None  # None: same as current
    max_width: int | None = None


@dataclass(frozen=True)
class MigInstanceSpec:
    """A GPU instance with one compute instance spanning it (what `nvidia-smi mig -cgi P -C` makes)."""
    profile: str  # e.g. "3g.40gb"
    profile_id: int  # nvmlGpuInstanceProfileInfo_t.id (9 for 3g.40gb on H100)
    start: int  # placement in memory slices
    size: int  # memory slices occupied
    gi_id: int
    ci_profile_id: int  # compute instance profile id of the full-size CI (= NVML enum)


@dataclass(frozen=True)
class VgpuTypeSpec:
    """A vGPU type as NVML and sysfs name it. `type_id` doubles as the mdev type `nvidia-<type_id>`."""
    type_id: int
    name: str  # "NVIDIA H100XM-10C"
    framebuffer_mib: int
    max_instances: int


@dataclass(frozen=True)
class MdevSpec:
    """A mediated device (time-sliced vGPU) created on a GPU, optionally given to a VM."""
    uuid: str
    type_id: int


@dataclass(frozen=True)
class GpuProcessSpec:
    pid: int
    name: str
    used_mib: int


@dataclass(frozen=True)
class GpuSpec:
    """What NVML knows about one GPU (it only sees it while the PCI function is bound to nvidia)."""
    model: str = "H100-80GB-HBM3"  # key of the MIG profile tables
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_mib: int = 81559
    power_limit_w: int = 700
    mig_capable: bool = True
    mig_enabled: bool = False
    mig_pending: bool | None = None  # None: same as current
    mig_instances: tuple[MigInstanceSpec, ...] = ()
    vgpu_types: tuple[VgpuTypeSpec, ...] = ()  # offered as mdev types on the GPU (time-sliced)
    mdevs: tuple[MdevSpec, ...] = ()
    processes: tuple[GpuProcessSpec, ...] = ()
    ecc_volatile_uncorrected: int = 0
    ecc_aggregate_uncorrected: int = 0
    retired_pages: int = 0
    remapped_rows_pending: int = 0
    remapped_rows_failure: int = 0
    not_supported: tuple[str, ...] = ()
    lost: bool = False
    load: tuple[int, int, int] = (0, 0, 60)  # (base %, amplitude %, period s)
    ecc_volatile_corrected: int = 0
    ecc_aggregate_corrected: int = 0
    pcie_replay: int = 0  # NVML's PCIe replay counter (retransmitted TLPs: a marginal link)
    clock_events: tuple[str, ...] = ()  # clock-event reasons forced on (e.g. "hw_thermal_slowdown")
    nvlink_errors: tuple[tuple[int, str, int], ...] = ()  # (link, counter, count): replay, recovery, crc_*
    nvlink_down: tuple[int, ...] = ()  # links that are not active


@dataclass(frozen=True)
class VfSpec:
    """One SR-IOV virtual function. `vgpu_types` non-empty makes it an SR-IOV vGPU VF (vGPU 17+ style):
    `VF/nvidia/creatable_vgpu_types` lists them and `current_vgpu_type` holds `vgpu_type`."""
    driver: str | None = None
    default_driver: str | None = None  # what a probe binds without an override; None: same as driver
    driver_override: str | None = None
    vgpu_types: tuple[VgpuTypeSpec, ...] = ()
    vgpu_type: int = 0
    vgpu_gi_id: int | None = None  # the MIG GPU instance a MIG-backed vGPU sits on


@dataclass(frozen=True)
class SriovSpec:
    totalvfs: int
    vf_device: int  # PCI device id of the VFs
    vfs: tuple[VfSpec, ...] = ()  # the enabled VFs: sriov_numvfs = len(vfs)
    offset: int = 1  # routing-id offset of VF 0 from the PF, then `stride` apart (ARI numbering)
    stride: int = 1
    vf_driver: str | None = None  # what a VF created later binds to; None: the first VF's default


@dataclass(frozen=True)
class PciDev:
    """One PCI function. A bridge (root port, switch port) has `secondary_bus` and `children`, the
    functions on that bus; an endpoint has neither."""
    slot: int
    function: int = 0
    vendor: int = 0x8086
    device: int = 0
    class_id: int = 0
    subsystem_vendor: int | None = None  # None: same as vendor
    subsystem_device: int = 0
    driver: str | None = None
    default_driver: str | None = None  # what drivers_probe binds without an override; None: driver
    driver_override: str | None = None
    link: Link | None = None  # None: not a PCIe link (root complex integrated device)
    secondary_bus: int | None = None
    children: tuple[PciDev, ...] = ()
    acs: bool | None = None  # bridges: False = no isolation below (one IOMMU group for all below);
    # endpoints: True = multifunction with ACS (functions get their own groups). None: bridge True,
    # endpoint False.
    boot_vga: bool = False
    reset_method: str | None = "flr bus"
    sriov: SriovSpec | None = None
    gpu: GpuSpec | None = None
    label: str = ""  # a name for presets and tests ("gpu3"), written nowhere
    rdma_link_layer: str | None = None  # NICs: the link layer ("InfiniBand", "Ethernet") of the RDMA device
    # mlx5_core registers for the function and its VFs; None: no RDMA device

    @property
    def is_bridge(self) -> bool:
        return self.secondary_bus is not None


@dataclass(frozen=True)
class HostBridge:
    """A PCI host bridge: `/sys/devices/pciDDDD:BB`."""
    bus: int
    numa_node: int  # -1: unknown (the kernel's value for no affinity)
    children: tuple[PciDev, ...] = ()
    domain: int = 0


@dataclass(frozen=True)
class HostdevSpec:
    """A device given to a VM: a PCI function by address, or a mediated device by UUID."""
    address: str | None = None
    mdev_uuid: str | None = None
    managed: bool = True


@dataclass(frozen=True)
class VmSpec:
    name: str
    state: str = "running"  # "running", "paused", "shut off"
    vcpus: int = 2
    memory_mib: int = 4096
    pins: tuple[tuple[int, ...], ...] = ()  # per vCPU host cpuset; () = not pinned
    emulator_pins: tuple[int, ...] = ()
    numatune: tuple[str, tuple[int, ...]] | None = None  # (mode, nodeset)
    threads_per_core: int = 1  # guest CPU topology
    hostdevs: tuple[HostdevSpec, ...] = ()
    hugepages_kib: int | None = None  # memory backed by hugepages of this size
    uuid: str | None = None  # None: derived from the host and VM names


@dataclass(frozen=True)
class HostSpec:
    hostname: str = "gpu-node-01"
    kernel_release: str = "6.8.0-45-generic"
    cmdline: str = "BOOT_IMAGE=/boot/vmlinuz-6.8.0-45-generic root=/dev/mapper/vg0-root ro"
    cpu: CpuSpec = field(default_factory=CpuSpec)
    memory_per_node_mib: int = 262144
    hugepages_2m_per_node: int = 0
    hugepages_1g_per_node: int = 0
    hugepages_node_pages: tuple[tuple[int, int, int], ...] = ()  # (node, page KiB, pages): replaces the
    # per-node figure of that size on that node (an uneven spread)
    iommu: bool = True
    host_bridges: tuple[HostBridge, ...] = ()
    vms: tuple[VmSpec, ...] = ()
    drivers_loaded: tuple[str, ...] = ("vfio-pci", "pci-stub")  # modules loaded without a device
    nvml_driver_version: str = "550.90.07"
    cuda_driver_version: int = 12040
    seed: str = ""  # mixed into every derived UUID and serial; "" = the hostname
    # -- the running kernel (sys/module, /proc/sys, /dev/kvm, ACPI). Defaults: a host set up for VMs --
    acpi_iommu_table: bool = True  # the firmware publishes DMAR (Intel) / IVRS (AMD): VT-d/AMD-Vi enabled
    kvm_loaded: bool = True  # kvm + kvm_intel|kvm_amd (needs cpu.virtualization); /dev/kvm
    vfio_loaded: bool = True  # vfio, vfio_iommu_type1, vfio_pci_core, vfio_pci (+ the vfio-pci driver)
    nouveau_loaded: bool = False
    modules_extra: tuple[str, ...] = ()  # other modules loaded (e.g. listed in /etc/modules-load.d)
    vhost_net: bool = True  # vhost_net loaded (/dev/vhost-net) and listed in /etc/modules-load.d/vhost-net.conf
    allow_unsafe_interrupts: bool = False  # vfio_iommu_type1's parameter
    numa_balancing: int = 0  # /proc/sys/kernel/numa_balancing
    persistence_mode: bool = True  # every GPU's NVML persistence mode
    boot_count: int = 0  # which boot this is: the boot_id is derived from it
    # when this boot began (proc/stat btime, seconds since the epoch): a fixed day for a generated host (its
    # tree stays the same from one generation to the next), the moment of `demo reboot` after one
    boot_time: int = 1_764_547_200  # 2025-12-01T00:00:00Z
    # -- the boot configuration below /etc (what the next `demo reboot` reads) --
    # /etc/default/grub's GRUB_CMDLINE_LINUX_DEFAULT is the command line's words after BOOT_IMAGE/root/ro
    vfio_at_boot: bool = True  # /etc/modules-load.d/vfio.conf and /etc/initramfs-tools/modules
    nouveau_blacklisted: bool = True  # /etc/modprobe.d/blacklist-nouveau.conf
    sysctl_numa_balancing: int | None = 0  # /etc/sysctl.d/ kernel.numa_balancing; None: no such line
    host_cores: tuple[int, ...] | None = None  # systemd CPUAffinity= drop-in; None: cores 0-1 of every
    # node and their hyperthread siblings; (): no drop-in
    persistenced_enabled: bool = True  # nvidia-persistenced.service wanted by multi-user.target
    # -- the GPU baseboard --
    # NVSwitch chips of an HGX baseboard: every GPU's NVLinks (18 on H100 SXM5) go to them, spread over the
    # switches, and the GPUs are in the NVLink fabric. 0: no NVLink (each GPU answers NOT_SUPPORTED).
    nvswitches: int = 0
    # NVLink bridges between PCIe cards (H100 PCIe: 3 bridges join a pair, all 12 links of each card go to
    # the other): pairs of GPU function addresses. The cards are in no NVLink fabric.
    nvlink_bridges: tuple[tuple[str, str], ...] = ()


def walk(spec: HostSpec):
    """Every PCI function of the spec as (address, PciDev, parent address | None, host bridge), parents
    before children, in address order under each host bridge. VFs are not included."""
    for hb in sorted(spec.host_bridges, key=lambda h: (h.domain, h.bus)):
        yield from _walk(hb, hb.bus, hb.children, None)


def _walk(hb: HostBridge, bus: int, devs, parent: str | None):
    for dev in sorted(devs, key=lambda d: (d.slot, d.function)):
        addr = format_pci_address(hb.domain, bus, dev.slot, dev.function)
        yield addr, dev, parent, hb
        if dev.secondary_bus is not None:
            yield from _walk(hb, dev.secondary_bus, dev.children, addr)


def vf_address(pf_address: str, sriov: SriovSpec, index: int) -> str:
    """Address of VF `index`: the PF's routing id plus offset + index × stride (bus may roll over)."""
    return vf_address_at(pf_address, sriov.offset, sriov.stride, index)


def vf_address_at(pf_address: str, offset: int, stride: int, index: int) -> str:
    dom, bus, rest = pf_address.split(":")
    dev, fn = rest.split(".")
    rid = (int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn)) + offset + index * stride
    return format_pci_address(int(dom, 16), rid >> 8, (rid >> 3) & 0x1F, rid & 7)


def stable_uuid(*parts: object) -> str:
    """A UUID derived from names, so a spec always generates the same identities."""
    import uuid
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "nodeconsole-sim:" + "/".join(str(p) for p in parts)))
