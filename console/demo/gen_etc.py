"""The disk of a synthetic host: the boot configuration under /etc and /boot that the next boot reads
(GRUB, modules at boot, modprobe options and blacklists, the initramfs module list, sysctl, the
systemd manager's CPU affinity, nvidia-persistenced), laid out as on Ubuntu. `demo reboot` keeps these
files and boots from them (console/demo/boot.py)."""
from __future__ import annotations

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.demo.builders import core_cpus
from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.spec import CpuSpec, HostSpec

# Words the boot loader puts before the configured ones: the image, the root file system
PREFIX_NAMES = ("BOOT_IMAGE", "root", "ro", "rw", "rootflags", "rootfstype")
VFIO_CONF = "etc/modules-load.d/vfio.conf"
VHOST_NET_CONF = "etc/modules-load.d/vhost-net.conf"
NOUVEAU_CONF = "etc/modprobe.d/blacklist-nouveau.conf"
SYSCTL_CONF = "etc/sysctl.d/80-vm-host.conf"
CPU_AFFINITY_CONF = "etc/systemd/system.conf.d/60-host-cores.conf"
PERSISTENCED_UNIT = "usr/lib/systemd/system/nvidia-persistenced.service"
PERSISTENCED_WANTS = "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"
GRUB_CFG = "boot/grub/grub.cfg"
VFIO_MODULES = "vfio\nvfio_iommu_type1\nvfio_pci\n"
PROGRAMS = ("usr/sbin/update-grub", "usr/sbin/update-initramfs", "usr/bin/systemctl", "usr/sbin/sysctl")

GRUB_DEFAULT = """\
# If you change this file or any /etc/default/grub.d/*.cfg file,
# run 'update-grub' afterwards to update /boot/grub/grub.cfg.
# For full documentation of the options in these files, see:
#   info -f grub -n 'Simple configuration'

GRUB_DEFAULT=0
GRUB_TIMEOUT_STYLE=hidden
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=`( . /etc/os-release; echo ${{NAME:-Ubuntu}} ) 2>/dev/null || echo Ubuntu`
GRUB_CMDLINE_LINUX_DEFAULT="{default}"
GRUB_CMDLINE_LINUX=""

# Uncomment to disable graphical terminal (grub-pc only)
#GRUB_TERMINAL=console
"""
INITRAMFS_MODULES = """\
# List of modules that you want to include in your initramfs.
# They will be loaded at boot time in the order below.
#
# Syntax:  module_name [args ...]
#
# You must run update-initramfs(8) to effect this change.
#
# Examples:
#
# raid1
# sd_mod
"""
ETC_MODULES = """\
# /etc/modules: kernel modules to load at boot time.
#
# This file contains the names of kernel modules that should be loaded
# at boot time, one per line. Lines beginning with "#" are ignored.
# Parameters can be specified after the module name.

"""
MODPROBE_BLACKLIST = """\
# This file lists those modules which we don't want to be loaded by
# alias expansion, usually so some other driver will be loaded for the
# device instead.

# evbug is a debug tool that should be loaded explicitly
blacklist evbug

# these drivers are very simple, the HID drivers are usually preferred
blacklist usbmouse
blacklist usbkbd
"""
SYSCTL = """\
#
# /etc/sysctl.conf - Configuration file for setting system variables
# See /etc/sysctl.d/ for additional system variables.
# See sysctl.conf (5) for information.
#

#kernel.domainname = example.com
"""
SYSTEM_CONF = """\
#  This file is part of systemd.
#
# Use 'systemd --dump-configuration-items' to see the full list.
# See systemd-system.conf(5) for details.

[Manager]
#LogLevel=info
#CPUAffinity=
#NUMAPolicy=default
#DefaultTimeoutStopSec=90s
"""
PERSISTENCED = """\
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
StopWhenUnneeded=true
Before=systemd-backlight@backlight:acpi_video0.service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""


def split_cmdline(cmdline: str) -> tuple[list[str], list[str]]:
    """(the boot loader's leading words: BOOT_IMAGE, root, ro…; the configured words after them)."""
    words = cmdline.split()
    n = 0
    while n < len(words) and words[n].split("=", 1)[0] in PREFIX_NAMES:
        n += 1
    return words[:n], words[n:]


def default_host_cores(cpu: CpuSpec) -> tuple[int, ...]:
    """Cores 0-1 of every NUMA node with their hyperthread siblings: what the presets keep for the host
    (their emulator threads run there; no vCPU is pinned there)."""
    per_node = cpu.cores_per_socket // cpu.nodes_per_socket
    return tuple(sorted(c for node in range(cpu.nodes) for c in core_cpus(cpu, node, range(min(2, per_node)))))


def host_cores(spec: HostSpec) -> tuple[int, ...]:
    return default_host_cores(spec.cpu) if spec.host_cores is None else spec.host_cores


def grub_cfg(prefix: list[str], linux: str, default: str, release: str) -> str:
    """/boot/grub/grub.cfg as update-grub writes it for one kernel (BOOT_IMAGE is GRUB's own word)."""
    image = next((w.split("=", 1)[1] for w in prefix if w.startswith("BOOT_IMAGE=")), f"/boot/vmlinuz-{release}")
    words = " ".join([image] + [w for w in prefix if not w.startswith("BOOT_IMAGE=")])
    return ("#\n# DO NOT EDIT THIS FILE\n#\n# It is automatically generated by grub-mkconfig using templates\n"
            "# from /etc/grub.d and settings from /etc/default/grub\n#\n\nset default=\"0\"\nset timeout=0\n\n"
            "menuentry 'Ubuntu' --class ubuntu --class gnu-linux --class gnu --class os {\n"
            f"\tlinux\t{words} {linux} {default}\n\tinitrd\t/boot/initrd.img-{release}\n}}\n")


def write_etc(w: TreeWriter, spec: HostSpec) -> None:
    prefix, extra = split_cmdline(spec.cmdline)
    w.attr("etc/hostname", spec.hostname)
    w.raw("etc/default/grub", GRUB_DEFAULT.format(default=" ".join(extra)))
    w.raw(GRUB_CFG, grub_cfg(prefix, "", " ".join(extra), spec.kernel_release))
    # the kernel and its initramfs, as the demo's update-initramfs writes it (modules forced in, blacklist)
    w.raw(f"boot/vmlinuz-{spec.kernel_release}", "")
    blacklist = "evbug usbmouse usbkbd" + (" nouveau" if spec.nouveau_blacklisted else "")
    modules = " ".join(VFIO_MODULES.split()) if spec.vfio_at_boot else ""
    w.raw(f"boot/initrd.img-{spec.kernel_release}",
          f"simulated initramfs (update-initramfs)\nmodules: {modules}\nblacklist: {blacklist}\n")
    for program in PROGRAMS:  # placeholders: the demo's commands seam answers for them, nothing runs
        w.raw(program, "")
    w.raw("etc/modules", ETC_MODULES)
    w.link("etc/modules-load.d/modules.conf", "etc/modules")
    w.raw("etc/initramfs-tools/modules", INITRAMFS_MODULES + (VFIO_MODULES if spec.vfio_at_boot else ""))
    if spec.vfio_at_boot:
        w.raw(VFIO_CONF, "# vfio for PCI passthrough to VMs\n" + VFIO_MODULES)
    if spec.vhost_net:
        w.raw(VHOST_NET_CONF, "# virtio networking in the kernel\nvhost_net\n")
    w.raw("etc/modprobe.d/blacklist.conf", MODPROBE_BLACKLIST)
    if spec.nouveau_blacklisted:
        w.raw(NOUVEAU_CONF, "# the NVIDIA driver owns the GPUs\nblacklist nouveau\noptions nouveau modeset=0\n")
    w.raw("etc/sysctl.conf", SYSCTL)
    w.link("etc/sysctl.d/99-sysctl.conf", "etc/sysctl.conf")
    w.raw("etc/sysctl.d/10-kernel-hardening.conf", "kernel.kptr_restrict = 1\n")
    if spec.sysctl_numa_balancing is not None:
        w.raw(SYSCTL_CONF, f"# VMs are pinned to their nodes\nkernel.numa_balancing = {spec.sysctl_numa_balancing}\n")
    w.raw("etc/systemd/system.conf", SYSTEM_CONF)
    cores = host_cores(spec)
    if cores:
        w.raw(CPU_AFFINITY_CONF, f"# keep system services on the host's cores\n[Manager]\n"
                                 f"CPUAffinity={format_cpulist(cores)}\n")
    w.raw(PERSISTENCED_UNIT, PERSISTENCED)
    if spec.persistenced_enabled:
        w.link(PERSISTENCED_WANTS, PERSISTENCED_UNIT)
