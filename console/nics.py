"""NICs as first-class devices, from one snapshot (no I/O): each network controller's physical function
with its SR-IOV VFs, its RDMA devices and ports, its netdevs, which VM holds each VF and how far it
sits from every GPU (the `nvidia-smi topo -m` levels of console/topology.py).

The collector builds `HostSnapshot.nics` with `build_nics`; the NIC commands, the passthrough planner,
the NCCL topology file and the Overview's problems read them from there.
"""
from __future__ import annotations

from collections.abc import Iterable

from nodeconsole.console.model import HostSnapshot, NetFunction, Nic, NicGpu, NicVf, PciDevice, Vm
from nodeconsole.console.topology import is_nic, relation

# nvidia-smi topo -m levels, nearest first (X: the device itself)
DISTANCES = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
# the NIC's link layer from its PCI class when neither an RDMA port nor a netdev says
_CLASS_LINK = {0x0200: "Ethernet", 0x0207: "InfiniBand", 0x0C06: "InfiniBand"}


def distance_rank(level: str) -> int:
    return DISTANCES.index(level) if level in DISTANCES else len(DISTANCES)


def holders(snap: HostSnapshot) -> dict[str, tuple[str, str]]:
    """Host PCI address → (VM name, VM state) of every PCI hostdev of the snapshot's VMs."""
    out: dict[str, tuple[str, str]] = {}
    for vm in snap.vms:
        for h in vm.hostdevs:
            if h.type == "pci" and h.address:
                out.setdefault(h.address, (vm.name, vm.state))
    return out


def nic_inputs(snap: HostSnapshot, net: Iterable[NetFunction]) -> tuple[object, ...]:
    """Everything build_nics reads: the PCI functions, the network facts, each GPU's address and index
    and who holds each PCI function. Equal inputs give equal NICs (the collector keeps the last NICs
    while they are equal)."""
    return snap.pci_devices, tuple(net), tuple((g.address, g.index) for g in snap.gpus), holders(snap)


def build_nics(snap: HostSnapshot, net: Iterable[NetFunction]) -> tuple[Nic, ...]:
    """The NICs of `snap` in the topology matrix's order (NIC0, NIC1 ...), with `net`'s RDMA and netdev
    facts of each PF and VF."""
    by_net = {n.address: n for n in net}
    index = {d.address: d for d in snap.pci_devices}
    held = holders(snap)
    out = []
    for i, dev in enumerate(d for d in snap.pci_devices if is_nic(d)):
        info = by_net.get(dev.address) or NetFunction(dev.address)
        vfs = tuple(_vf(index.get(a), a, k, by_net.get(a), held.get(a)) for k, a in enumerate(dev.vfs))
        gpus = sorted((NicGpu(g.address, g.index, relation(snap, dev.address, g.address, index)) for g in snap.gpus),
                      key=lambda g: (distance_rank(g.distance), g.index))
        vm = held.get(dev.address)
        out.append(Nic(address=dev.address, label=f"NIC{i}", name=dev.device_name or dev.class_name,
                       vendor=dev.vendor_name, driver=dev.driver, numa_node=dev.numa_node,
                       link_layer=link_layer(dev, info), rdma=info.rdma, ports=info.ports, netdevs=info.netdevs,
                       link=dev.link, iommu_group=dev.iommu_group, sriov_totalvfs=dev.sriov_totalvfs,
                       sriov_numvfs=dev.sriov_numvfs, sriov_drivers_autoprobe=info.sriov_drivers_autoprobe,
                       vfs=vfs, gpus=tuple(gpus), vm=vm[0] if vm else None))
    return tuple(out)


def _vf(dev: PciDevice | None, address: str, k: int, info: NetFunction | None,
        holder: tuple[str, str] | None) -> NicVf:
    return NicVf(address=address, index=k, driver=dev.driver if dev else None,
                 driver_override=dev.driver_override if dev else None,
                 iommu_group=dev.iommu_group if dev else None, rdma=info.rdma if info else (),
                 netdevs=info.netdevs if info else (), vm=holder[0] if holder else None,
                 vm_state=holder[1] if holder else None)


def link_layer(dev: PciDevice, info: NetFunction) -> str:
    """InfiniBand or Ethernet: the RDMA ports say, else the netdev's type, else the PCI class."""
    layers = [p.link_layer for p in info.ports if p.link_layer]
    if layers:
        return layers[0]
    if info.netdev_link_layer:
        return info.netdev_link_layer
    return _CLASS_LINK.get(dev.class_id >> 8, "")


def nic_of(snap: HostSnapshot, address: str) -> tuple[Nic, NicVf | None] | None:
    """The NIC `address` belongs to and, for a VF, the VF; None when it is no NIC function."""
    for n in snap.nics:
        if n.address == address:
            return n, None
        for v in n.vfs:
            if v.address == address:
                return n, v
    return None


def _vm(snap: HostSnapshot, vm: Vm | str) -> Vm | None:
    return snap.vm(vm) if isinstance(vm, str) else vm


def vm_nic_functions(snap: HostSnapshot, vm_name: Vm | str) -> list[tuple[Nic, NicVf | None]]:
    """The NIC functions (VFs, or whole PFs) the VM's definition holds, in the order it lists them."""
    vm = _vm(snap, vm_name)
    out = []
    for h in vm.hostdevs if vm is not None else ():
        if h.type == "pci" and h.address and (found := nic_of(snap, h.address)) is not None:
            out.append(found)
    return out


def vm_gpu_addresses(snap: HostSnapshot, vm_name: Vm | str) -> list[str]:
    """The whole GPUs (not vGPU VFs or audio functions) the VM's definition holds."""
    vm = _vm(snap, vm_name)
    out: list[str] = []
    for h in vm.hostdevs if vm is not None else ():
        # h.gpu names the GPU of any function of its card (or its VF): only the GPU itself counts
        if h.type == "pci" and h.address and h.gpu == h.address and h.address not in out:
            out.append(h.address)
    return out


def distance_to(nic: Nic, gpu_address: str) -> str:
    """The distance between a NIC (PF or any of its VFs: they hang off the same port) and a GPU."""
    return next((g.distance for g in nic.gpus if g.address == gpu_address), "SYS")


def group_blockers(snap: HostSnapshot, address: str) -> list[str]:
    """Why the function's IOMMU group cannot go to vfio-pci with it: each other non-bridge member a
    host driver holds ([] when none, or when the snapshot has no group for it)."""
    dev = snap.pci(address)
    grp = snap.group(dev.iommu_group) if dev is not None else None
    if grp is None:
        return []
    out = []
    for a in grp.devices:
        other = snap.pci(a) if a != address else dev
        if a == address or (other is not None and (other.is_bridge or other.driver in (None, "vfio-pci", "pci-stub",
                                                                                          "pcieport"))):
            continue
        what = (other.class_name or "device") if other is not None else "device"
        out.append(f"shares group {grp.id} with {a} {what} bound to {other.driver if other else '?'}")
    return out


def free_vfs(snap: HostSnapshot) -> list[tuple[Nic, NicVf]]:
    """VFs no VM's definition holds, in NIC order."""
    return [(n, v) for n in snap.nics for v in n.vfs if v.vm is None]


def vf_preference(vf: NicVf) -> int:
    """Among free VFs at one distance: unbound or on vfio-pci first, then those a host driver uses."""
    return 0 if vf.driver in (None, "vfio-pci") else 1


def closest_free_vf(snap: HostSnapshot, gpu_address: str, allow_sys: bool = False,
                    skip: Iterable[str] = ()) -> tuple[Nic, NicVf, str] | None:
    """The free VF (its group passable to a VM) nearest the GPU: PIX, then PXB, PHB, NODE; SYS only with
    `allow_sys`. None when there is none."""
    skipped = set(skip)
    best: tuple[tuple[int, int, str], tuple[Nic, NicVf, str]] | None = None
    for nic, vf in free_vfs(snap):
        level = distance_to(nic, gpu_address)
        if vf.address in skipped or (level == "SYS" and not allow_sys) or group_blockers(snap, vf.address):
            continue
        key = (distance_rank(level), vf_preference(vf), vf.address)
        if best is None or key < best[0]:
            best = (key, (nic, vf, level))
    return best[1] if best else None
