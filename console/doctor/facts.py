"""What the doctor reads and what a ready host has: paths (root-relative) and wanted values, shared by
the checks (console/doctor), the fix plans (actions/doctor_fixes.py) and the demo host's generator."""
from __future__ import annotations

CPUINFO = "proc/cpuinfo"
CMDLINE = "proc/cmdline"
NUMA_BALANCING = "proc/sys/kernel/numa_balancing"
BOOT_ID = "proc/sys/kernel/random/boot_id"
DEV_KVM = "dev/kvm"
MODULES = "sys/module"
ACPI_TABLES = "sys/firmware/acpi/tables"
CLASS_IOMMU = "sys/class/iommu"
IOMMU_GROUPS = "sys/kernel/iommu_groups"
ALLOW_UNSAFE_INTERRUPTS = "sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts"
NVIDIA_VERSION = "sys/module/nvidia/version"
MODULES_LOAD_D = "etc/modules-load.d"
MODPROBE_D = "etc/modprobe.d"
INITRAMFS_MODULES = "etc/initramfs-tools/modules"  # Debian/Ubuntu/Proxmox
DRACUT_CONF_D = "etc/dracut.conf.d"  # RHEL
SYSCTL_D = "etc/sysctl.d"
SYSTEMD_CONF = "etc/systemd/system.conf"
SYSTEMD_CONF_D = "etc/systemd/system.conf.d"
PERSISTENCED_WANTS = "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"
NODE_DIR = "sys/devices/system/node"
DEV_VHOST_NET = "dev/vhost-net"
DEV_TUN = "dev/net/tun"
DEV_SEV = "dev/sev"
FIRMWARE_TDX = "sys/firmware/tdx"
PROC_MOUNTS = "proc/mounts"
PROC_SELF_CGROUP = "proc/self/cgroup"
CGROUP_ROOT = "sys/fs/cgroup"
PVE_QEMU_SERVER = "etc/pve/qemu-server"  # a Proxmox VE host's VM configurations (its cluster file system)
PMXCFS = "usr/bin/pmxcfs"  # Proxmox's cluster file system daemon (pve-cluster.service)

# Files the fixes write (one per concern, so undo and a second run find them)
VFIO_MODULES_FILE = "etc/modules-load.d/nodeconsole-vfio.conf"
NOUVEAU_BLACKLIST_FILE = "etc/modprobe.d/nodeconsole-blacklist-nouveau.conf"
SYSCTL_FILE = "etc/sysctl.d/90-nodeconsole.conf"
HOST_CORES_FILE = "etc/systemd/system.conf.d/90-nodeconsole-host-cores.conf"
DRACUT_VFIO_FILE = "etc/dracut.conf.d/nodeconsole-vfio.conf"
# modules-load.d files the vhost-net and tun fixes write (one per module)
MODULE_CONF = {"vhost_net": "etc/modules-load.d/nodeconsole-vhost-net.conf",
               "tun": "etc/modules-load.d/nodeconsole-tun.conf"}
# the device node each of those modules makes
MODULE_DEVICE = {"vhost_net": DEV_VHOST_NET, "tun": DEV_TUN}

VFIO_MODULES = ("vfio", "vfio_pci", "vfio_iommu_type1")
# Kernel flags that turn the IOMMU on, by CPU vendor (AMD's is on by default)
IOMMU_ON_FLAGS = {"intel": ("intel_iommu=on",), "amd": (), "arm": ()}
IOMMU_PT = "iommu=pt"
ACS_OVERRIDE = "pcie_acs_override"
IR_OFF_FLAGS = ("intremap=off", "nointremap", "intremap=no_x2apic_optout")

VCPU_WARN_RATIO = 0.70  # of host threads (../REFERENCE rule of thumb: give VMs at most ~70 %)
VM_MEMORY_MIN_FACTOR = 2.0  # VM memory ≥ 2× the memory of the GPUs it holds (2–3× recommended)
HOST_MEMORY_RESERVE_KIB = 16 * 1024 * 1024  # kept for the host when committing memory to VMs

# ACS extended capability (PCIe): id and control-register bits
ACS_CAP_ID = 0x000D
ACS_SV, ACS_TB, ACS_RR, ACS_CR, ACS_UF, ACS_EC, ACS_DT = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40


def module_loaded_path(name: str) -> str:
    """/sys/module/<name> exists when the module is loaded (built-ins too). Names use underscores."""
    return f"{MODULES}/{name.replace('-', '_')}"


def acs_control(config: bytes) -> int | None:
    """The ACS Control register of a PCI function's config space (None when it has no ACS extended
    capability, or the config space read is too short to hold extended capabilities)."""
    if len(config) < 0x104:
        return None
    offset, seen = 0x100, set()
    while 0x100 <= offset <= len(config) - 8 and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            return int.from_bytes(config[offset + 6:offset + 8], "little")
        offset = (header >> 20) & 0xFFC
        if offset == 0:
            return None
    return None
