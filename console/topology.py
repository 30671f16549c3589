"""PCIe topology from a snapshot (no I/O): the tree per NUMA node and an `nvidia-smi topo -m` style
matrix computed from sysfs, so GPUs bound to vfio-pci are included.

Levels (as nvidia-smi): X self, PIX through at most one PCIe switch, PXB through several switches
without the host bridge, PHB through a host bridge, NODE between host bridges of one NUMA node, SYS
across the inter-socket link; NV# between GPUs joined by # NVLinks (NVML's link state and remote ends:
GPUs that NVML cannot see, on vfio-pci or unbound, keep their PCIe level).
"""
from __future__ import annotations

from dataclasses import dataclass

from nodeconsole.console.model import Gpu, HostSnapshot, PciDevice, Vm, nvlink_peers

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
    owners: tuple[str, ...] = ()  # the VMs holding it (a GPU whole or in slices; a NIC's PF or its VFs)
    nvml_index: int | None = None  # GPUs: nvidia-smi's index, None when NVML does not see it
    nvlink_known: bool = False  # GPUs: NVML reported its NVLinks (or that it has none)


def gpu_relation(snap: HostSnapshot, a: Gpu, b: Gpu, index: dict[str, PciDevice] | None = None) -> str:
    """The nvidia-smi topo level between two GPUs: NV# when NVLink joins them (# links, through an
    NVSwitch or directly), else the PCIe level. A GPU NVML cannot see (on vfio-pci, unbound) has no NVLink
    facts on this host: its pairs get the PCIe level, which is what the host's PCIe tree says."""
    if a.address == b.address:
        return "X"
    links = nvlink_peers(a, b)
    return f"NV{links}" if links else relation(snap, a.address, b.address, index)


def device_owners(snap: HostSnapshot) -> dict[str, tuple[str, ...]]:
    """PCI address of each GPU and NIC physical function → the VMs holding it (for a NIC: the PF itself
    or any of its VFs), in order, without repeats."""
    out: dict[str, tuple[str, ...]] = {g.address: tuple(g.owner.vms) for g in snap.gpus}
    for n in snap.nics:
        names = ([n.vm] if n.vm else []) + [v.vm for v in n.vfs if v.vm]
        out[n.address] = tuple(dict.fromkeys(names))
    return out


def matrix(snap: HostSnapshot) -> tuple[list[MatrixDevice], list[list[str]]]:
    """GPUs and NICs (physical functions) against each other; GPU pairs joined by NVLink read NV#."""
    index = {d.address: d for d in snap.pci_devices}
    owners = device_owners(snap)
    devs: list[MatrixDevice] = []
    for g in snap.gpus:
        d = index.get(g.address)
        devs.append(MatrixDevice(f"GPU{g.index}", g.address, g.numa_node, d.local_cpus if d else (),
                                 owners.get(g.address, ()), g.nvml_index, g.nvlinks_read))
    nics = [d for d in snap.pci_devices if is_nic(d)]
    for i, d in enumerate(nics):
        devs.append(MatrixDevice(f"NIC{i}", d.address, d.numa_node, d.local_cpus, owners.get(d.address, ())))
    gpus = {g.address: g for g in snap.gpus}
    rows = [[gpu_relation(snap, gpus[x.address], gpus[y.address], index)
             if x.address in gpus and y.address in gpus else relation(snap, x.address, y.address, index)
             for y in devs] for x in devs]
    return devs, rows


@dataclass(frozen=True)
class TreeNode:
    address: str
    label: str
    children: tuple[TreeNode, ...] = ()
    owners: tuple[str, ...] = ()  # GPUs and NIC PFs: the VMs holding them (see device_owners)


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
    owners = device_owners(snap)

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
        return TreeNode(d.address, label, tuple(kids), owners.get(d.address, ()))

    out: dict[int | None, list[TreeNode]] = {}
    for top in sorted(children.get(None, []), key=lambda x: x.address):
        node = build(top)
        if node is not None:
            out.setdefault(top.numa_node, []).append(node)
    return out


@dataclass(frozen=True)
class VmPath:
    """The path between two devices a VM holds: its GPUs pairwise (P2P) and each GPU to each of its NIC
    functions (GPUDirect RDMA), at the nvidia-smi topo level (NV# for NVLink)."""
    a: str  # "GPU1", "GPU4 (MIG)"
    b: str  # "GPU5", "NIC0 VF 0000:1a:00.2"
    level: str
    a_node: int | None = None
    b_node: int | None = None


def vm_gpus(snap: HostSnapshot, vm: Vm) -> list[Gpu]:
    """The GPUs a VM uses (whole, or a MIG slice/vGPU on them), in the order of its hostdevs."""
    out: list[Gpu] = []
    for h in vm.hostdevs:
        g = snap.gpu(h.gpu) if h.gpu else None
        if g is not None and g not in out:
            out.append(g)
    return out


def vm_paths(snap: HostSnapshot, vm: Vm) -> list[VmPath]:
    """Its GPUs pairwise, then each GPU to each NIC function (PF or VF) the VM holds."""
    index = {d.address: d for d in snap.pci_devices}
    gpus = vm_gpus(snap, vm)
    out = [VmPath(f"GPU{a.index}", f"GPU{b.index}", gpu_relation(snap, a, b, index), a.numa_node, b.numa_node)
           for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    nic_label = {}
    for n in snap.nics:
        nic_label[n.address] = n.label
        for v in n.vfs:
            nic_label[v.address] = f"{n.label} VF {v.address}"
    for h in vm.hostdevs:
        if h.type != "pci" or not h.address or h.address not in nic_label:
            continue
        node = index[h.address].numa_node if h.address in index else None
        for g in gpus:
            out.append(VmPath(f"GPU{g.index}", nic_label[h.address], relation(snap, g.address, h.address, index),
                              g.numa_node, node))
    return out
