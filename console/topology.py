"""PCIe topology from a snapshot (no I/O): the tree per NUMA node and an `nvidia-smi topo -m` style
matrix computed from sysfs, so GPUs bound to vfio-pci are included.

Levels (as nvidia-smi): X self, PIX through at most one PCIe switch, PXB through several switches
without the host bridge, PHB through a host bridge, NODE between host bridges of one NUMA node, SYS
across the inter-socket link.
"""
from __future__ import annotations

from dataclasses import dataclass

from nodeconsole.console.model import HostSnapshot, PciDevice

NIC_CLASSES = (0x02, 0x0C06)  # network controllers; InfiniBand (serial bus 0x0c06)
NVME_CLASS = 0x010802


def ancestors(snap_index: dict[str, PciDevice], address: str) -> list[str]:
    """Upstream bridges of a device, nearest first (guarded against loops in odd trees)."""
    chain: list[str] = []
    dev = snap_index.get(address)
    seen = {address}
    while dev is not None and dev.parent and dev.parent not in seen:
        chain.append(dev.parent)
        seen.add(dev.parent)
        dev = snap_index.get(dev.parent)
    return chain


def _root_bus(index: dict[str, PciDevice], address: str) -> str:
    chain = ancestors(index, address)
    top = chain[-1] if chain else address
    return top.rsplit(":", 1)[0]  # dddd:bb of the top-most bridge = its host bridge


def relation(snap: HostSnapshot, a: str, b: str, index: dict[str, PciDevice] | None = None) -> str:
    """The nvidia-smi topo level between two PCI functions."""
    if a == b:
        return "X"
    index = index or {d.address: d for d in snap.pci_devices}
    ca, cb = ancestors(index, a), ancestors(index, b)
    common = next((x for x in ca if x in cb), None)
    if common is not None:
        hops = ca.index(common) + cb.index(common)
        # endpoint → downstream port → upstream port on each side = one switch
        return "PIX" if hops <= 2 else "PXB"
    if _root_bus(index, a) == _root_bus(index, b):
        return "PHB"
    na = index[a].numa_node if a in index else None
    nb = index[b].numa_node if b in index else None
    if na is not None and na == nb:
        return "NODE"
    return "SYS"


def is_nic(dev: PciDevice) -> bool:
    return (dev.base_class == 0x02 or (dev.class_id >> 8) == 0x0C06) and dev.physfn is None


@dataclass(frozen=True)
class MatrixDevice:
    label: str  # GPU0, NIC1
    address: str
    numa_node: int | None
    cpus: tuple[int, ...]


def matrix(snap: HostSnapshot) -> tuple[list[MatrixDevice], list[list[str]]]:
    """GPUs and NICs (physical functions) against each other."""
    index = {d.address: d for d in snap.pci_devices}
    devs: list[MatrixDevice] = []
    for g in snap.gpus:
        d = index.get(g.address)
        devs.append(MatrixDevice(f"GPU{g.index}", g.address, g.numa_node, d.local_cpus if d else ()))
    nics = [d for d in snap.pci_devices if is_nic(d)]
    for i, d in enumerate(nics):
        devs.append(MatrixDevice(f"NIC{i}", d.address, d.numa_node, d.local_cpus))
    rows = [[relation(snap, x.address, y.address, index) for y in devs] for x in devs]
    return devs, rows


@dataclass(frozen=True)
class TreeNode:
    address: str
    label: str
    children: tuple[TreeNode, ...] = ()


def device_label(dev: PciDevice) -> str:
    name = dev.device_name or dev.class_name or f"{dev.vendor_id:04x}:{dev.device_id:04x}"
    kind = "bridge" if dev.is_bridge else (dev.class_name or "device")
    drv = f" [{dev.driver}]" if dev.driver else " [no driver]"
    return f"{dev.address} {kind}: {name}{drv}" if dev.is_bridge else f"{dev.address} {name}{drv}"


def tree(snap: HostSnapshot, interesting_only: bool = True) -> dict[int | None, list[TreeNode]]:
    """The PCIe tree per NUMA node: root ports → switches → endpoints. With interesting_only, only
    branches leading to GPUs, NICs and NVMe (the devices an admin places VMs by) are kept."""
    children: dict[str | None, list[PciDevice]] = {}
    for d in snap.pci_devices:
        if d.physfn:  # VFs are listed with their PF, not as tree nodes
            continue
        children.setdefault(d.parent, []).append(d)
    gpu_addrs = {g.address for g in snap.gpus}

    def keep(d: PciDevice) -> bool:
        return d.address in gpu_addrs or is_nic(d) or d.class_id == NVME_CLASS

    def build(d: PciDevice) -> TreeNode | None:
        kids = [n for c in sorted(children.get(d.address, []), key=lambda x: x.address)
                if (n := build(c)) is not None]
        if interesting_only and not kids and not keep(d):
            return None
        label = device_label(d)
        if d.vfs:
            label += f"  ({len(d.vfs)} VFs)"
        return TreeNode(d.address, label, tuple(kids))

    out: dict[int | None, list[TreeNode]] = {}
    for top in sorted(children.get(None, []), key=lambda x: x.address):
        node = build(top)
        if node is not None:
            out.setdefault(top.numa_node, []).append(node)
    return out
