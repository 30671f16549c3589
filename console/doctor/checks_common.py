"""What every check shares: the run's context (the snapshot, the files, the role, facts derived once),
the verdict builder that turns what a check found into a CheckResult, and each check's title and why.

The verdict rule: any failure → fail; else any warning → warn; else anything the check needed but could
not read → skip, naming it; else pass. So a check passes only when everything it needs was read, and
a warning or failure that what *was* read proves is reported even when something else is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from nodeconsole.console.checks import effective_pins
from nodeconsole.console.doctor import bootloader, facts
from nodeconsole.console.doctor.files import HostFiles, clip, evidence
from nodeconsole.console.doctor.model import CheckResult, Evidence, Fix
from nodeconsole.console.model import Gpu, HostSnapshot, PciDevice, VcpuPin, Vm
from nodeconsole.console.sources.types import Hypervisor

VFIO_DRIVERS = ("vfio-pci", "pci-stub")
INACTIVE_STATES = ("shut off", "crashed")

TITLES = {
    "kvm": "KVM is available (CPU virtualization, /dev/kvm, the kvm module)",
    "iommu": "The IOMMU is on (firmware table, kernel flag, IOMMU groups)",
    "iommu-pt": "The IOMMU runs in pass-through mode for host devices (iommu=pt)",
    "interrupt-remapping": "Interrupt remapping is on and vfio does not allow unsafe interrupts",
    "acs-override": "IOMMU groups are real (no ACS override on the kernel command line)",
    "vfio-modules": "vfio modules are loaded and load at boot",
    "nouveau": "nouveau is not loaded and is blacklisted",
    "nvidia-driver": "The NVIDIA driver is loaded, consistent, with persistence mode on",
    "libvirtd": "The hypervisor's daemon answers (libvirt's QEMU driver; Proxmox: pve-cluster and /etc/pve)",
    "vhost-net": "/dev/vhost-net exists (virtio networking in the kernel)",
    "tun": "/dev/net/tun exists (network devices for VMs)",
    "cgroups": "The cgroup controllers libvirt's QEMU driver needs are there",
    "secure-guest": "Secure guests (AMD SEV, Intel TDX) are on where the platform offers them",
    "hugepages": "Huge pages are reserved where the VMs that ask for them run",
    "host-cores": "CPUs are kept for the host on every NUMA node, and no VM is pinned onto them",
    "vcpu-commit": "vCPUs are not overcommitted",
    "numa-balancing": "Automatic NUMA balancing is off on a host with pinned VMs",
    "acs": "PCIe switches isolate their GPUs (ACS), and what it costs",
    "pcie-link": "Every GPU's PCIe link runs at its full width and speed",
    "mig-pending": "No MIG mode change is waiting for a GPU reset",
    "vgpu-host": "The vGPU manager is installed and SR-IOV VFs are enabled",
    "vm-memory": "VMs have enough memory for their GPUs, and the host is not overcommitted",
    "pve-vfio": "Proxmox VE: vfio-pci claims the GPUs the VMs take whole before their own driver",
    "pve-mappings": "Proxmox VE: the PCI resource mappings of this node match its devices",
    "pve-hookscripts": "Proxmox VE: every hookscript a VM names is there",
}

WHY = {
    "kvm": "Without hardware virtualization and /dev/kvm, QEMU falls back to emulation: VMs run orders of "
           "magnitude slower and GPU passthrough is impossible.",
    "iommu": "The IOMMU isolates a device's DMA to its VM's memory; without it vfio refuses to hand any "
             "GPU to a VM.",
    "iommu-pt": "With iommu=pt the host's own devices bypass DMA translation: NICs and NVMe drives on the "
                "host keep their full speed while VMs still get isolated devices.",
    "interrupt-remapping": "Without interrupt remapping a VM's device can inject arbitrary interrupts into "
                           "the host; allowing unsafe interrupts gives up that protection.",
    "acs-override": "The ACS override patch splits IOMMU groups the hardware cannot isolate: devices that "
                    "can still reach each other by peer-to-peer DMA end up in different VMs.",
    "vfio-modules": "vfio-pci is the driver that hands a GPU to a VM; if it does not load at boot, "
                    "passthrough VMs fail to start after a reboot.",
    "nouveau": "nouveau grabs NVIDIA GPUs at boot before vfio-pci or the NVIDIA driver can, and cannot "
               "always let go of them.",
    "nvidia-driver": "Host-side GPU features (MIG, vGPU, monitoring) need the NVIDIA driver; without "
                     "persistence mode every GPU re-initialises on each use, slowly, and MIG and vGPU "
                     "state can be lost.",
    "libvirtd": "Every VM is started, pinned and given its GPUs through the hypervisor's daemon; when it does "
                "not answer, nothing about the VMs can be read or changed.",
    "vhost-net": "Without vhost_net, virtio network traffic goes through QEMU's own threads: more CPU per "
                 "packet and less bandwidth for the VMs.",
    "tun": "QEMU connects VMs to bridges and virtual networks through tap devices made from /dev/net/tun; "
           "without it VMs get no network.",
    "cgroups": "libvirt confines each VM with cgroups: CPU shares and pinning (cpu, cpuset), memory limits, "
               "device access (devices) and disk I/O (blkio / io); a missing controller drops that confinement.",
    "secure-guest": "AMD SEV or Intel TDX encrypt a VM's memory against the host; off in the kernel, VMs that "
                    "ask for it cannot start (informational: only where the platform offers it).",
    "hugepages": "VMs backed by huge pages cannot start (or fall back) when the pages are not reserved on "
                 "their NUMA node; huge pages cut TLB misses for large GPU VMs.",
    "host-cores": "The host's own work (interrupts, QEMU I/O threads, libvirt) needs CPUs no VM is pinned "
                  "to, on every node; otherwise it steals time from pinned vCPUs and adds jitter.",
    "vcpu-commit": "Past about 70 % of the host's threads, VMs start waiting for CPUs; pinned vCPUs "
                   "sharing a CPU run at half speed or worse.",
    "numa-balancing": "Automatic NUMA balancing migrates the memory of pinned VMs behind their back and "
                      "adds latency spikes; pinning already places it.",
    "acs": "ACS keeps GPUs under one switch apart (each in its own IOMMU group); it also sends their "
           "peer-to-peer traffic up through the root complex, at about half the bandwidth.",
    "pcie-link": "A GPU whose link trained below its width (or speed) moves data at a fraction of its "
                 "bandwidth: a seating, riser or slot problem.",
    "mig-pending": "A MIG mode change only takes effect after a GPU reset; until then the GPU keeps its "
                   "old mode and MIG plans fail.",
    "vgpu-host": "vGPU needs NVIDIA's vGPU manager (host driver) and, on Ampere and later GPUs, SR-IOV "
                 "virtual functions enabled before any vGPU can be created.",
    "vm-memory": "A VM needs 2-3x the memory of its GPUs to stage data for them; VMs committing more "
                 "memory than the host has make the host swap or kill VMs.",
    "pve-vfio": "Proxmox binds a passed GPU to vfio-pci at the VM's start; when the NVIDIA driver took it at boot "
                "it has to be torn off a live driver first, which can hang the start or the host.",
    "pve-mappings": "Proxmox refuses to start a VM whose mapped device no longer matches (\"hardware probably "
                    "changed\"): a moved or replaced card stops every VM that uses the mapping.",
    "pve-hookscripts": "A VM whose config names a hookscript that is not there does not start.",
}


def active(vm: Vm) -> bool:
    """Running, paused or otherwise holding the host's CPUs and memory."""
    return vm.state not in INACTIVE_STATES


def gib(kib: int | float) -> str:
    value = kib / (1024 * 1024)
    return f"{value:.0f} GiB" if value >= 10 or value == int(value) else f"{value:.1f} GiB"


def names(items: list[str], limit: int = 6) -> str:
    """'a, b, c' — with '… (+N more)' past `limit`."""
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" … (+{len(items) - limit} more)"


@dataclass
class Verdict:
    """What a check found, turned into its result by `result()` (see the module doc)."""
    check_id: str
    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said after the verdict, on pass too
    missing: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    fix: Fix | None = None

    def read(self, rel: str, value: str) -> None:
        self.evidence.append(evidence(rel, value))

    def result(self, passed: str) -> CheckResult:
        if self.fails:
            status, text = "fail", self.fails
        elif self.warns:
            status, text = "warn", self.warns
        elif self.missing:
            status, text = "skip", ["cannot check: " + "; ".join(dict.fromkeys(self.missing))]
        else:
            status, text = "pass", [passed]
        finding = "; ".join(text + (self.notes if status != "skip" else []))
        fix = self.fix if status in ("warn", "fail") else None
        return CheckResult(self.check_id, status, clip(finding, 400), tuple(self.evidence[:24]), fix,
                           TITLES.get(self.check_id, ""), WHY.get(self.check_id, ""))


def skipped(check_id: str, why: str) -> CheckResult:
    """A skip: what the check needs could not be read (it applies, its verdict is unknown)."""
    return CheckResult(check_id, "skip", why, (), None, TITLES.get(check_id, ""), WHY.get(check_id, ""))


def not_applicable(check_id: str, why: str) -> CheckResult:
    """A skip because the check does not concern this host or role (`applies` False, saying why)."""
    return CheckResult(check_id, "skip", why, (), None, TITLES.get(check_id, ""), WHY.get(check_id, ""),
                       applies=False, applies_why=why)


class Context:
    """One doctor run: the snapshot, the files (read once), the role, and facts derived once."""

    def __init__(self, snap: HostSnapshot, files: HostFiles, role: str,
                 hypervisor: Hypervisor | None = None) -> None:
        self.snap = snap
        self.files = files
        self.role = role
        self.hypervisor = hypervisor  # what the VM source's connection said of itself, when known

    # -- the host ----------------------------------------------------------------------------------
    @cached_property
    def loader(self) -> bootloader.BootLoader:
        return bootloader.detect(self.files.root)

    @cached_property
    def cmdline(self) -> list[str] | None:
        return self.files.cmdline()

    @cached_property
    def next_cmdline(self) -> list[str] | None:
        """The words the boot loader's configuration gives the next boot (None when not readable)."""
        try:
            text = bootloader.loader_cmdline(self.files.root, self.loader)
        except PermissionError:
            return None
        return None if text is None else text.split()

    @cached_property
    def vendor(self) -> str:
        return self.snap.host.cpu_vendor

    @cached_property
    def online(self) -> tuple[int, ...]:
        return tuple(c.id for c in self.snap.cpus if c.online)

    @cached_property
    def node_of(self) -> dict[int, int | None]:
        return self.snap.cpu_node()

    @cached_property
    def by_addr(self) -> dict[str, PciDevice]:
        return {d.address: d for d in self.snap.pci_devices}

    def source_down(self, name: str) -> str | None:
        """"libvirt unavailable: …" when that source did not answer, else None."""
        status = getattr(self.snap.sources, name)
        return None if status.ok else f"{name} {status}"

    # -- VMs ---------------------------------------------------------------------------------------
    @cached_property
    def pins(self) -> dict[str, tuple[VcpuPin, ...]]:
        """Each VM's effective vCPU pins (pins to every online CPU are no pins)."""
        return {vm.name: effective_pins(self.snap, vm) for vm in self.snap.vms}

    @cached_property
    def gpu_vms(self) -> list[Vm]:
        """VMs holding a GPU (whole, MIG-backed or vGPU)."""
        return [vm for vm in self.snap.vms if any(h.gpu for h in vm.hostdevs)]

    @cached_property
    def pinned_vms(self) -> list[Vm]:
        return [vm for vm in self.snap.vms if self.pins[vm.name]]

    # -- GPUs --------------------------------------------------------------------------------------
    @cached_property
    def kept_gpus(self) -> list[Gpu]:
        """GPUs the host keeps: bound to a driver other than vfio-pci/pci-stub."""
        return [g for g in self.snap.gpus if g.driver is not None and g.driver not in VFIO_DRIVERS]

    def label(self, g: Gpu) -> str:
        return f"GPU {g.index} {g.address}"

    # -- fixes -------------------------------------------------------------------------------------
    def cmdline_fix(self, summary: str, add: list[str], remove: list[str]) -> Fix:
        """A kernel command-line change through the boot loader this host uses (detected), or by hand
        when none is recognised. Already in the boot loader's configuration: only a reboot is left."""
        nxt = self.next_cmdline
        conflicts = [w for w in nxt or [] for a in add if "=" in a and w != a
                     and bootloader.flag_name(w) == bootloader.flag_name(a)]
        if conflicts:  # a flag there with another value is replaced, never "already there"
            summary += (f" (the boot loader's configuration has {' '.join(dict.fromkeys(conflicts))}: "
                        "the fix replaces it)")
        elif nxt is not None and all(a in nxt for a in add) and not any(
                w == r or bootloader.flag_name(w) == r for r in remove for w in nxt):
            return Fix(f"reboot: {' '.join(add + ['-' + r for r in remove])} is already in the boot "
                       f"loader's configuration ({self.loader.describe()})", (), True, False)
        loader = self.loader
        if not loader.known:
            words = " ".join([f"+{a}" for a in add] + [f"-{r}" for r in remove])
            return Fix(f"{summary} — no known boot loader found ({names(list(loader.found)) or 'nothing'}"
                       f" seen): set {words} on the kernel command line by hand", (), True, False)
        return Fix(f"{summary} via {loader.describe()}, then reboot", loader.commands(add, remove), True, True)

    def in_next_boot(self, word: str) -> bool:
        nxt = self.next_cmdline
        return nxt is not None and word in nxt


def cmdline_has(words: list[str], *wanted: str) -> str | None:
    """The first word of `words` that is one of `wanted` (names without '=' match any value)."""
    for w in words:
        for x in wanted:
            if w == x or ("=" not in x and bootloader.flag_name(w) == x):
                return w
    return None


def iommu_state(ctx: Context) -> tuple[bool | None, list[Evidence], str]:
    """(on, evidence, why unknown): True when IOMMU units or groups exist, False when the kernel's folders
    are there and empty (or the command line turns it off), None when the tree has neither folder."""
    f = ctx.files
    ev: list[Evidence] = []
    units = f.listdir(facts.CLASS_IOMMU)
    groups = [n for n in f.listdir(facts.IOMMU_GROUPS) if n.isdigit()]
    have = f.isdir(facts.CLASS_IOMMU) or f.isdir(facts.IOMMU_GROUPS)
    if f.isdir(facts.CLASS_IOMMU):
        ev.append(evidence(facts.CLASS_IOMMU, ", ".join(units) or "empty"))
    if f.isdir(facts.IOMMU_GROUPS):
        ev.append(evidence(facts.IOMMU_GROUPS, f"{len(groups)} groups"))
    if units or groups:
        return True, ev, ""
    off = cmdline_has(ctx.cmdline or [], "intel_iommu=off", "amd_iommu=off", "iommu=off")
    if have or off:
        return False, ev, ""
    return None, ev, f.missing(facts.IOMMU_GROUPS)
