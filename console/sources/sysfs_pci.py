"""PCI functions and vGPU (mdev and SR-IOV) from sysfs.

Each function's attributes are read through its /sys/bus/pci/devices link; its place in the PCIe tree
comes from the link's target, resolved as text (sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from nodeconsole.console.model import NumaNode, PciDevice, PciLink, VgpuInstance, VgpuType
from nodeconsole.console.pciids import PciIds
from nodeconsole.console.sources.sysfs_root import (
    PCI_COMPONENT,
    SysfsRoot,
    canonical_pci,
    pci_sort_key,
    to_cpulist,
    to_cpumask,
    to_int,
)

PCI_DIR = "sys/bus/pci/devices"


def locality(numa_node: int | None | Callable[[], int | None], local: tuple[int, ...] | None,
             node_cpus: dict[int, frozenset[int]]) -> int | None:
    """The NUMA node a PCI function hangs off. local_cpus decides, as for lstopo: the one node whose
    CPUs it touches; all CPUs or several nodes mean no single node (None), even when the numa_node
    file names one (the kernel derives local_cpus from the node, so a disagreement is a doctored or
    broken tree). The numa_node file (-1 = unknown) counts when local_cpus is absent or empty, or
    touches no node's CPUs: a device of a CPU-less node."""
    if local:
        hit = [nid for nid, cpus in node_cpus.items() if not cpus.isdisjoint(local)]
        if len(hit) == 1:
            return hit[0]
        if hit:
            return None
    if callable(numa_node):  # read only when needed: one file less for most functions
        numa_node = numa_node()
    return numa_node if numa_node is not None and numa_node in node_cpus else None


def ancestors(target: str | None, address: str) -> list[str]:
    """The PCI addresses above a device in its resolved path, nearest first
    (sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:04.0 → 0000:18:00.0, 0000:17:00.0)."""
    if not target:
        return []
    comps = [c for c in target.split("/") if PCI_COMPONENT.match(c)]
    if not comps or canonical_pci(comps[-1]) != address:
        return []
    return [a for a in (canonical_pci(c) for c in reversed(comps[:-1])) if a]


def read_pci(fs: SysfsRoot, nodes: tuple[NumaNode, ...],
             ids: PciIds) -> tuple[tuple[PciDevice, ...], dict[str, str], dict[str, str]]:
    """All PCI functions in address order, the sysfs dir of each that has an nvidia/ directory, and the
    sysfs dir of each whose directory is not named by its canonical address (a captured tree's)."""
    node_cpus = {n.id: frozenset(n.cpus) for n in nodes}
    masks: dict[str, tuple[int, ...] | None] = {}  # most functions share a handful of local_cpus masks
    devices, nvidia_dirs, odd_dirs = [], {}, {}
    chains: dict[str, list[str]] = {}
    for name in fs.listdir(PCI_DIR):
        address = canonical_pci(name)
        if address is None:
            continue
        rel = f"{PCI_DIR}/{name}"
        if name != address:
            odd_dirs[address] = rel
        found = _read_function(fs, rel, address, node_cpus, masks, ids)
        if found is not None:
            dev, above, has_nvidia = found
            devices.append(dev)
            chains[address] = above
            if has_nvidia:
                nvidia_dirs[address] = rel
    # parent = the bridge right above; a capture may lack it (trimmed), then the nearest one it lists
    for i, dev in enumerate(devices):
        if dev.parent is not None and dev.parent not in chains:
            parent = next((a for a in chains[dev.address] if a in chains), None)
            devices[i] = dataclasses.replace(dev, parent=parent)
    devices.sort(key=lambda d: pci_sort_key(d.address))
    return tuple(devices), nvidia_dirs, odd_dirs


def refresh_pci(fs: SysfsRoot, last: tuple[PciDevice, ...], ids: PciIds,
                odd_dirs: dict[str, str]) -> tuple[PciDevice, ...]:
    """`last` (read_pci of the same functions, each still bound to the same driver) with what can change
    meanwhile read again: the current link speed and width, driver_override, the VF count; and the names
    looked up again (pci.ids may have been replaced). An unchanged function is `last`'s object; nothing
    changed at all: `last` itself."""
    out = []
    for dev in last:
        rel = odd_dirs.get(dev.address) or f"{PCI_DIR}/{dev.address}"
        override = fs.read(f"{rel}/driver_override")
        override = None if override in (None, "", "(null)") else override
        link = dev.link
        speed, width = fs.read(f"{rel}/current_link_speed") or "", to_int(fs.read(f"{rel}/current_link_width"))
        if speed != link.current_speed or width != link.current_width:
            link = dataclasses.replace(link, current_speed=speed, current_width=width)
        numvfs = to_int(fs.read(f"{rel}/sriov_numvfs")) if dev.sriov_totalvfs is not None else dev.sriov_numvfs
        names = (ids.vendor_name(dev.vendor_id), ids.device_name(dev.vendor_id, dev.device_id),
                 ids.class_name(dev.class_id))
        if (override, link, numvfs, names) != (dev.driver_override, dev.link, dev.sriov_numvfs,
                                               (dev.vendor_name, dev.device_name, dev.class_name)):
            dev = dataclasses.replace(dev, driver_override=override, link=link, sriov_numvfs=numvfs,
                                      vendor_name=names[0], device_name=names[1], class_name=names[2])
        out.append(dev)
    return last if all(a is b for a, b in zip(out, last)) else tuple(out)


def _read_function(fs: SysfsRoot, rel: str, address: str, node_cpus: dict[int, frozenset[int]],
                   masks: dict[str, tuple[int, ...] | None],
                   ids: PciIds) -> tuple[PciDevice, list[str], bool] | None:
    entries = set(fs.listdir(rel))  # one call says which optional attributes exist
    if not entries:
        return None  # dangling link or empty directory

    def read(attr: str) -> str | None:
        return fs.read(f"{rel}/{attr}") if attr in entries else None

    # a partial tree (a capture that missed some files) still holds the function: unknown ids read as
    # 0000, as lstopo shows them
    vendor, device = to_int(read("vendor"), 16) or 0, to_int(read("device"), 16) or 0
    class_id = to_int(read("class"), 16)
    if class_id is None or not 0 <= class_id <= 0xFFFFFF:
        class_id = 0
    mask_text = read("local_cpus")
    if mask_text is not None and mask_text not in masks:
        masks[mask_text] = to_cpumask(mask_text)
    local = masks.get(mask_text) if mask_text is not None else None
    if not local:  # local_cpus wins over local_cpulist when both exist (they can disagree)
        local = to_cpulist(read("local_cpulist"))
    override = read("driver_override")
    virtfns = sorted((e for e in entries if e.startswith("virtfn") and e[6:].isascii() and e[6:].isdigit()),
                     key=lambda e: int(e[6:]))
    above = ancestors(fs.link_target(rel), address)
    link = PciLink(current_speed=read("current_link_speed") or "", current_width=to_int(read("current_link_width")),
                   max_speed=read("max_link_speed") or "", max_width=to_int(read("max_link_width")))
    dev = PciDevice(
        address=address, vendor_id=vendor, device_id=device, class_id=class_id,
        driver=fs.link_name(f"{rel}/driver") if "driver" in entries else None,
        numa_node=locality(lambda: to_int(read("numa_node")), local, node_cpus),
        iommu_group=to_int(fs.link_name(f"{rel}/iommu_group")) if "iommu_group" in entries else None,
        parent=above[0] if above else None,
        subsystem_vendor_id=to_int(read("subsystem_vendor"), 16),
        subsystem_device_id=to_int(read("subsystem_device"), 16),
        driver_override=None if override in (None, "", "(null)") else override,
        vendor_name=ids.vendor_name(vendor), device_name=ids.device_name(vendor, device),
        class_name=ids.class_name(class_id), local_cpus=local or (), link=link,
        sriov_totalvfs=to_int(read("sriov_totalvfs")), sriov_numvfs=to_int(read("sriov_numvfs")),
        physfn=canonical_pci(fs.link_name(f"{rel}/physfn")) if "physfn" in entries else None,
        vfs=tuple(a for a in (canonical_pci(fs.link_name(f"{rel}/{e}")) for e in virtfns) if a),
        boot_vga=read("boot_vga") == "1",
        is_bridge=(class_id >> 8) == 0x0604,
    )
    return dev, above, "nvidia" in entries


# -- vGPU -----------------------------------------------------------------------------------------

_DESC_FB = re.compile(r"framebuffer=(\d+)M")
_DESC_MAX = re.compile(r"max_instance=(\d+)")
_CREATABLE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*$")


def read_vgpu(fs: SysfsRoot, nvidia_dirs: dict[str, str]) -> tuple[tuple[VgpuType, ...], tuple[VgpuInstance, ...]]:
    """vGPU types and instances: mdev (vGPU ≤ 16, and Ampere after sriov-manage) and SR-IOV vGPU
    (vGPU 17+: nvidia/creatable_vgpu_types and current_vgpu_type under each VF)."""
    types = _mdev_types(fs)
    instances = _mdev_instances(fs)
    names: dict[str, str] = {}
    current: list[tuple[str, int]] = []
    for address in sorted(nvidia_dirs, key=pci_sort_key):
        rel = f"{nvidia_dirs[address]}/nvidia"
        for line in (fs.read(f"{rel}/creatable_vgpu_types") or "").splitlines():
            m = _CREATABLE.match(line)
            if m:  # the header line "ID : vGPU Name" does not match
                names.setdefault(m.group(1), m.group(2))
                types.append(VgpuType(id=m.group(1), name=m.group(2), via="sriov", parent=address))
        type_id = to_int(fs.read(f"{rel}/current_vgpu_type"))
        if type_id:
            current.append((address, type_id))
    # a VF that holds a vGPU no longer lists its type as creatable: name it from any VF that does
    for address, type_id in current:
        instances.append(VgpuInstance(uuid=address, type_name=names.get(str(type_id), str(type_id)),
                                      parent=address))
    return tuple(types), tuple(instances)


def _mdev_types(fs: SysfsRoot) -> list[VgpuType]:
    types = []
    for dev in fs.listdir("sys/class/mdev_bus"):
        parent = canonical_pci(dev) or dev
        base = f"sys/class/mdev_bus/{dev}/mdev_supported_types"
        for tid in fs.listdir(base):
            desc = fs.read(f"{base}/{tid}/description") or ""  # "num_heads=4, framebuffer=2048M, max_instance=8"
            fb, mx = _DESC_FB.search(desc), _DESC_MAX.search(desc)
            types.append(VgpuType(id=tid, name=fs.read(f"{base}/{tid}/name") or tid,
                                  available=to_int(fs.read(f"{base}/{tid}/available_instances")),
                                  max_instances=int(mx.group(1)) if mx else None,
                                  framebuffer_mib=int(fb.group(1)) if fb else None, via="mdev", parent=parent))
    return types


def _mdev_instances(fs: SysfsRoot) -> list[VgpuInstance]:
    out = []
    for uuid in fs.listdir("sys/bus/mdev/devices"):
        # the link's target sits under its parent: sys/devices/pci0000:00/0000:00:02.0/UUID
        real = fs.link_target(f"sys/bus/mdev/devices/{uuid}") or f"sys/bus/mdev/devices/{uuid}"
        type_dir = fs.link_target(f"{real}/mdev_type")
        type_id = type_dir.rsplit("/", 1)[-1] if type_dir else ""
        type_name = (fs.read(f"{type_dir}/name") if type_dir else None) or type_id
        comps = [c for c in real.split("/") if PCI_COMPONENT.match(c)]
        parent = canonical_pci(comps[-1]) if comps else None  # None: a component that is no PCI address
        out.append(VgpuInstance(uuid=uuid, type_name=type_name, parent=parent or ""))
    return out
