"""IOMMU state and vfio group viability.

A group is usable by vfio when every non-bridge member is bound to vfio-pci, pci-stub or no driver
(kernel Documentation/driver-api/vfio.rst). Passing a card through hands over all functions of its
slot (GPU + audio + USB-C), so members that are functions of one card never block each other: a group
that holds a single card is viable even while that card is still on its host driver — the passthrough
plan rebinds it. What blocks is anything else in the group still serving the host.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from nodeconsole.console.model import Iommu, IommuGroup, PciDevice
from nodeconsole.console.pciaddr import is_pci_address, parse_pci_address
from nodeconsole.console.root import Root

VFIO_DRIVERS = frozenset({"vfio-pci", "pci-stub"})
# Drivers vfio tolerates in a group: PCIe port services stay bound to bridges.
EXEMPT_DRIVERS = frozenset({"pcieport", "shpchp"})

_FLAG_PREFIXES = ("intel_iommu=", "amd_iommu=", "iommu=", "iommu.", "vfio-pci.", "vfio_pci.",
                  "vfio_iommu_type1.", "vfio.", "pcie_acs_override", "amd_iommu_intr=", "intremap=")


def slot_of(address: str) -> str:
    """'0000:17:00.1' → '0000:17:00' (the card: all functions of one slot)."""
    return address.rsplit(".", 1)[0]


def iommu_cmdline_flags(cmdline: str) -> tuple[str, ...]:
    """The words of the kernel command line that concern the IOMMU, vfio or ACS."""
    out = []
    for word in cmdline.split():
        if word.startswith(_FLAG_PREFIXES) or (word.startswith("pci=") and "acs_override" in word):
            out.append(word)
    return tuple(out)


def has_acs_override(flags: Iterable[str]) -> bool:
    return any(w.startswith("pcie_acs_override") or (w.startswith("pci=") and "acs_override" in w)
               for w in flags)


def how_to_enable(cpu_vendor: str, flags: Iterable[str] = ()) -> str:
    """Advice shown when no IOMMU is active, by CPU vendor."""
    flags = tuple(flags)
    grub = ("to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub (grub2-mkconfig -o "
            "/boot/grub2/grub.cfg on RHEL-like systems) and reboot")
    off = [w for w in flags if w in ("intel_iommu=off", "amd_iommu=off", "iommu=off")]
    prefix = f"Remove {' '.join(off)} from the kernel command line. " if off else ""
    if cpu_vendor == "intel" and "intel_iommu=on" in flags:
        return ("intel_iommu=on is on the kernel command line but no IOMMU is active: enable VT-d (Intel "
                "Virtualization Technology for Directed I/O) in the firmware (BIOS/UEFI) setup and reboot.")
    if cpu_vendor == "intel":
        return (prefix + "Enable VT-d (Intel Virtualization Technology for Directed I/O) in the firmware "
                "(BIOS/UEFI) setup, then add intel_iommu=on iommu=pt " + grub + ".")
    if cpu_vendor == "amd":
        return (prefix + "Enable IOMMU / AMD-Vi (and SVM) in the firmware (BIOS/UEFI) setup; the kernel turns "
                "it on by default, to be explicit add amd_iommu=on iommu=pt " + grub + ".")
    if cpu_vendor == "arm":
        return (prefix + "Enable the SMMU in the firmware setup (it must be described in the ACPI IORT "
                "table) and boot a kernel with arm-smmu-v3; add iommu.passthrough=1 " + grub + ".")
    return (prefix + "Enable VT-d (Intel) or IOMMU / AMD-Vi (AMD) in the firmware (BIOS/UEFI) setup, then add "
            "intel_iommu=on iommu=pt (Intel) or amd_iommu=on iommu=pt (AMD) " + grub + ".")


def _is_bridge(dev: PciDevice) -> bool:
    return dev.is_bridge or dev.driver in EXEMPT_DRIVERS


def _describe(gid: int | None, address: str, dev: PciDevice | None) -> str:
    where = f"group {gid}" if gid is not None else "its IOMMU group"
    if dev is None:
        return f"shares {where} with {address} (not a PCI device this console can read)"
    what = dev.class_name or f"class {dev.class_id:06x}"
    return f"shares {where} with {address} {what} bound to {dev.driver}"


def _members(group: IommuGroup | Iterable[str]) -> tuple[str, ...]:
    return tuple(group.devices) if isinstance(group, IommuGroup) else tuple(group)


def _group_id(group: IommuGroup | Iterable[str], members: tuple[str, ...],
              devices_by_addr: Mapping[str, PciDevice]) -> int | None:
    if isinstance(group, IommuGroup):
        return group.id
    for a in members:
        dev = devices_by_addr.get(a)
        if dev is not None and dev.iommu_group is not None:
            return dev.iommu_group
    return None


def group_blockers(group: IommuGroup | Iterable[str], devices_by_addr: Mapping[str, PciDevice],
                   passing: Iterable[str]) -> list[str]:
    """Addresses of the members that would be taken from the host if the cards of `passing` (every
    function of their slots dddd:bb:dd) were handed to vfio: non-bridge members outside those slots
    that are bound to a driver other than vfio-pci / pci-stub, or that cannot be read."""
    slots = {slot_of(a) for a in passing}
    out = []
    for address in _members(group):
        if slot_of(address) in slots:
            continue
        dev = devices_by_addr.get(address)
        if dev is None:
            out.append(address)
            continue
        if _is_bridge(dev) or dev.driver is None or dev.driver in VFIO_DRIVERS:
            continue
        out.append(address)
    return sorted(out)


def blocker_reasons(group: IommuGroup | Iterable[str], devices_by_addr: Mapping[str, PciDevice],
                    passing: Iterable[str]) -> list[str]:
    """`group_blockers` as sentences: "shares group 14 with 0000:00:1f.3 Audio device bound to
    snd_hda_intel"."""
    members = _members(group)
    gid = _group_id(group, members, devices_by_addr)
    return [_describe(gid, a, devices_by_addr.get(a))
            for a in group_blockers(members, devices_by_addr, passing)]


def _main_card(members: tuple[str, ...], devices_by_addr: Mapping[str, PciDevice]) -> str | None:
    """The card a group is about: the first with a display function, else the first already on vfio,
    else the first non-bridge member (addresses sort by bus order)."""
    devs = [(a, devices_by_addr.get(a)) for a in sorted(members)]
    devs = [(a, d) for a, d in devs if d is None or not _is_bridge(d)]
    for test in (lambda d: d is not None and d.base_class == 0x03,
                 lambda d: d is not None and d.driver in VFIO_DRIVERS,
                 lambda d: True):
        for a, d in devs:
            if test(d):
                return slot_of(a)
    return None


def group_verdict(group_devices: IommuGroup | Iterable[str], devices_by_addr: Mapping[str, PciDevice],
                  acs_override: bool) -> tuple[bool, str]:
    """(viable, reason) for one IOMMU group (`group_devices`: its addresses, or the IommuGroup).

    Viable when the group can go to vfio without taking anything from the host: every non-bridge
    member is on vfio-pci / pci-stub / no driver, except the functions of the group's main card (its
    GPU), which the passthrough plan rebinds. Otherwise the reason names each member that would be taken,
    "shares group 14 with 0000:00:1f.3 Audio device bound to snd_hda_intel". Warnings (a boot VGA
    member, ACS override) are appended to the reason whether viable or not."""
    members = _members(group_devices)
    main = _main_card(members, devices_by_addr)
    reasons = blocker_reasons(group_devices if isinstance(group_devices, IommuGroup) else members,
                              devices_by_addr, [main + ".0"] if main else [])
    notes = list(reasons)
    for a in sorted(members):
        dev = devices_by_addr.get(a)
        if dev is not None and dev.boot_vga:
            notes.append(f"warning: {a} is the boot VGA device (the host console draws on it)")
    if acs_override:
        notes.append("warning: ACS override is on the kernel command line, so this group's isolation "
                     "is not guaranteed by the hardware")
    return (not reasons, "; ".join(notes))


def read_iommu(root: Root, cmdline: str, cpu_vendor: str,
               devices_by_addr: Mapping[str, PciDevice]) -> Iommu:
    """IOMMU state from sys/class/iommu and sys/kernel/iommu_groups, with a verdict per group."""
    flags = iommu_cmdline_flags(cmdline)
    acs = has_acs_override(flags)
    group_ids = sorted(int(n) for n in root.listdir("sys/kernel/iommu_groups") if n.isdigit())
    enabled = bool(root.listdir("sys/class/iommu")) or bool(group_ids)
    groups = []
    for gid in group_ids:
        members = []
        for name in root.listdir(f"sys/kernel/iommu_groups/{gid}/devices"):
            members.append(parse_pci_address(name) if is_pci_address(name) else name)
        group = IommuGroup(id=gid, devices=tuple(sorted(members)), viable=False)
        if members:
            viable, reason = group_verdict(group, devices_by_addr, acs)
        else:
            viable, reason = False, "the group has no devices"
        groups.append(IommuGroup(id=gid, devices=group.devices, viable=viable, reason=reason))
    return Iommu(enabled=enabled, groups=tuple(groups), cmdline_flags=flags, acs_override=acs,
                 how_to_enable="" if enabled else how_to_enable(cpu_vendor, flags))
