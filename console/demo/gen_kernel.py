"""What the running kernel of a synthetic host shows about its own set-up: the loaded modules
(/sys/module), the device nodes (/dev/kvm, /dev/vhost-net, /dev/net/tun), the mounts (/proc/mounts, the
unified cgroup hierarchy and its controllers), the firmware's IOMMU table (/sys/firmware/acpi/tables),
the IOMMU units (/sys/class/iommu), numa_balancing and the boot id."""
from __future__ import annotations

from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.gen_pci import PciLayout, pci_drivers
from nodeconsole.console.demo.spec import HostSpec, stable_uuid

MODULES = "sys/module"
ACPI_TABLES = "sys/firmware/acpi/tables"
VFIO_STACK = ("vfio", "vfio_iommu_type1", "vfio_pci_core", "vfio_pci")  # what `modprobe vfio-pci` loads
BUILT_IN = {"pcieport"}  # PCI drivers compiled into the kernel: no module of that name
# The IOMMU units' capability registers as a Sapphire Rapids reports them (ecap bit 3: interrupt remapping)
DMAR_CAP, DMAR_ECAP = "d2008c40660462", "29a00f0505e"
VHOST_NET = ("vhost_net", "vhost", "vhost_iotlb", "tap")  # what `modprobe vhost_net` loads
# The unified (v2) cgroup hierarchy as systemd mounts it on Ubuntu 24.04, and the controllers its root offers
CGROUP2_MOUNT = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0"
CGROUP2_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"


def is_intel(spec: HostSpec) -> bool:
    return spec.cpu.vendor_id == "GenuineIntel"


def kvm_module(spec: HostSpec) -> str:
    return "kvm_intel" if is_intel(spec) else "kvm_amd"


def module_name(driver: str) -> str:
    """The module a driver name belongs to, as /sys/module spells it (`vfio-pci` → `vfio_pci`)."""
    return driver.replace("-", "_")


def loaded_modules(spec: HostSpec, pci: PciLayout) -> dict[str, dict[str, str]]:
    """Module name → its parameters (file → value), for every module the host has loaded."""
    mods: dict[str, dict[str, str]] = {}
    if spec.kvm_loaded and spec.cpu.virtualization:
        mods["kvm"] = {}
        mods[kvm_module(spec)] = {"nested": "Y"} if is_intel(spec) else {"nested": "1"}
    for name in spec.modules_extra:
        mods.setdefault(module_name(name), {})
    if spec.vhost_net:
        for name in VHOST_NET:
            mods.setdefault(name, {})
    if spec.vfio_loaded:
        for name in VFIO_STACK:
            mods[name] = {}
    if "vfio_iommu_type1" in mods:
        mods["vfio_iommu_type1"] = {"allow_unsafe_interrupts": "Y" if spec.allow_unsafe_interrupts else "N",
                                    "dma_entry_limit": "65535"}
    for driver in pci_drivers(spec, pci):
        if driver not in BUILT_IN:
            mods.setdefault(module_name(driver), {})
    return mods


def validate_kernel(spec: HostSpec, pci: PciLayout) -> None:
    """Reject a running kernel no host could have."""
    if spec.iommu and not spec.acpi_iommu_table:
        raise ValueError("the IOMMU is on but the firmware publishes no DMAR/IVRS table")
    if not spec.vfio_loaded and any(f.driver == "vfio-pci" for f in pci.funcs.values()):
        raise ValueError("a function is bound to vfio-pci but vfio-pci is not loaded")
    if spec.numa_balancing not in range(4):
        raise ValueError(f"numa_balancing {spec.numa_balancing} is not 0-3")


def write_kernel(w: TreeWriter, spec: HostSpec, pci: PciLayout) -> None:
    seed = spec.seed or spec.hostname
    w.attr("proc/sys/kernel/numa_balancing", spec.numa_balancing)
    w.attr("proc/sys/kernel/random/boot_id", stable_uuid(seed, "boot", spec.boot_count))
    mods = loaded_modules(spec, pci)
    for name, params in sorted(mods.items()):
        d = f"{MODULES}/{name}"
        w.attr(f"{d}/initstate", "live")
        for param, value in params.items():
            w.attr(f"{d}/parameters/{param}", value)
    if "nvidia" in mods:
        w.attr(f"{MODULES}/nvidia/version", spec.nvml_driver_version)
    if "kvm" in mods:
        w.raw("dev/kvm", "")  # a regular file stands for the character device (a tree cannot mknod)
    if "vfio" in mods:
        w.raw("dev/vfio/vfio", "")
    if "vhost_net" in mods:
        w.raw("dev/vhost-net", "")
    w.raw("dev/net/tun", "")  # tun is built into the kernel: its node is always there
    w.mkdir("dev/vfio")
    _write_mounts(w, spec)
    _write_acpi(w, spec)
    w.mkdir("sys/class/iommu")
    if spec.iommu:
        _write_iommu_units(w, spec)


def _write_mounts(w: TreeWriter, spec: HostSpec) -> None:
    """/proc/mounts (the root, the kernel's file systems, the unified cgroup hierarchy) and what that
    hierarchy's root offers; this process's place in it (/proc/self/cgroup)."""
    w.raw("proc/mounts", "".join(f"{line}\n" for line in (
        "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
        "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0",
        "udev /dev devtmpfs rw,nosuid,relatime,mode=755,inode64 0 0",
        "/dev/mapper/vg0-root / ext4 rw,relatime 0 0",
        CGROUP2_MOUNT,
        "hugetlbfs /dev/hugepages hugetlbfs rw,nosuid,nodev,relatime,pagesize=2M 0 0")))
    w.raw("sys/fs/cgroup/cgroup.controllers", CGROUP2_CONTROLLERS + "\n")
    w.raw("sys/fs/cgroup/cgroup.subtree_control", CGROUP2_CONTROLLERS + "\n")
    w.raw("proc/self/cgroup", "0::/user.slice/user-0.slice/session-1.scope\n")


def _acpi_table(signature: bytes, body: bytes, revision: int = 1) -> bytes:
    """An ACPI table: the 36-byte header (signature, length, revision, checksum, OEM ids) and `body`;
    the checksum makes every byte of the table sum to zero."""
    length = 36 + len(body)
    header = (signature + length.to_bytes(4, "little") + bytes([revision, 0]) + b"INTEL " + b"EDK2    "
              + (2).to_bytes(4, "little") + b"INTL" + (0x20200717).to_bytes(4, "little"))
    table = bytearray(header + body)
    table[9] = (-sum(table)) & 0xFF
    return bytes(table)


def _write_acpi(w: TreeWriter, spec: HostSpec) -> None:
    w.raw_bytes(f"{ACPI_TABLES}/APIC", _acpi_table(b"APIC", bytes(8), 5))
    w.raw_bytes(f"{ACPI_TABLES}/MCFG", _acpi_table(b"MCFG", bytes(8)))
    if not spec.acpi_iommu_table:
        return
    units = len(spec.host_bridges) or 1
    if is_intel(spec):
        # host address width 52 bits (51), flags INTR_REMAP | DMA_CTRL_PLATFORM_OPT_IN, one DRHD per unit
        body = bytes([51, 0x05]) + bytes(10)
        for i in range(units):
            flags = 1 if i == units - 1 else 0  # the last unit covers every device the others do not
            body += ((0).to_bytes(2, "little") + (16).to_bytes(2, "little") + bytes([flags, 0])
                     + (0).to_bytes(2, "little") + (0xFD000000 + i * 0x100000).to_bytes(8, "little"))
        w.raw_bytes(f"{ACPI_TABLES}/DMAR", _acpi_table(b"DMAR", body))
    else:
        # IVinfo (virtual address size 64, physical 52) then one IVHD type 0x11 header per unit
        body = (0x00203040).to_bytes(4, "little") + bytes(8)
        for i in range(units):
            body += (bytes([0x11, 0xB0]) + (24).to_bytes(2, "little") + (2).to_bytes(2, "little")
                     + bytes([0x40, 0]) + (0xFD000000 + i * 0x100000).to_bytes(8, "little") + bytes(8))
        w.raw_bytes(f"{ACPI_TABLES}/IVRS", _acpi_table(b"IVRS", body, 2))


def _write_iommu_units(w: TreeWriter, spec: HostSpec) -> None:
    """One IOMMU unit (Intel DMAR or AMD IVHD) per host bridge, with its capability registers."""
    intel = is_intel(spec)
    prefix = "dmar" if intel else "ivhd"
    for i in range(len(spec.host_bridges) or 1):
        d = f"sys/devices/virtual/iommu/{prefix}{i}"
        w.attr(f"{d}/uevent", "")
        if intel:
            w.attr(f"{d}/intel-iommu/cap", DMAR_CAP)
            w.attr(f"{d}/intel-iommu/ecap", DMAR_ECAP)
            w.attr(f"{d}/intel-iommu/version", "1:0")
            w.attr(f"{d}/intel-iommu/address", f"{0xFD000000 + i * 0x100000:x}")
        else:
            w.attr(f"{d}/amd-iommu/cap", "0x00190063")
            w.attr(f"{d}/amd-iommu/features", "25bf732fa2295afe:53d")
        w.link(f"sys/class/iommu/{prefix}{i}", d)
