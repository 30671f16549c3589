"""The NCCL topology file for a VM, and the environment its guest needs.

Inside a VM, NCCL sees a flattened PCI tree (every passed-through device on a root port of its own) and
picks paths blindly. `vm_topology` writes what the host sees instead, in NCCL's topology XML
(`NCCL_TOPO_FILE`, the format `NCCL_TOPO_DUMP_FILE` writes): one `<cpu>` per host NUMA node the VM's
devices hang off, the host's PCIe bridges (`<pci>` with class and link), `<gpu>` (with `<nvlink>` when
NVLink is known) and `<nic><net>` — but with the PCI bus ids the *guest* sees, from the `<address>` each
hostdev has in the VM's definition, so NCCL inside the VM finds its devices in the file.

What the host cannot know is said, not guessed silently: the guest's RDMA device names are predicted
(mlx5 devices are numbered in probe order, that is guest PCI order), the guest's network interfaces are
left to the guest (NCCL_SOCKET_IFNAME).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

from nodeconsole.actions.plan import RequestError
from nodeconsole.actions.targets import resolve_vm
from nodeconsole.console.model import HostSnapshot, Nic, NicVf, PciDevice, Vm
from nodeconsole.console.nics import nic_of
from nodeconsole.console.topology import ancestors

VERSION = "1"  # NCCL_TOPO_XML_VERSION
DEFAULT_TOPO_PATH = "/etc/nccl/topo.xml"
IB_TIMEOUT, IB_RETRY_CNT = "22", "7"  # against transient fabric jitter
NVSWITCH_TARGET, NVSWITCH_CLASS = "fffffff:ffff:ff", "0x068000"  # how NCCL writes an NVLink to an NVSwitch
GPU_CLASS = "0x030200"
# compute capability × 10 by GPU family, from the model name (None: NCCL asks CUDA itself)
_SM = ((r"\b(GB|B)(100|200)\b", 100), (r"\b(GH200|H100|H200|H800|H20)\b", 90), (r"\b(L40S?|L4|L20)\b", 89),
       (r"\b(A40|A10G?|A16|A2|RTX A\d+)\b", 86), (r"\b(A100|A800|A30)\b", 80), (r"\bT4\b", 75), (r"\bV100\b", 70))
_CPUINFO = re.compile(r"^(vendor_id|cpu family|model)\s*:\s*(.+?)\s*$", re.M)


def gpu_sm(*names: str) -> int | None:
    for name in names:
        for pattern, sm in _SM:
            if re.search(pattern, name or ""):
                return sm
    return None


def cpumask(cpus: Sequence[int]) -> str:
    """The sysfs cpumask form NCCL writes for `affinity`: 32-bit hex words, most significant first."""
    top = max(cpus, default=0)
    words = [0] * (top // 32 + 1)
    for c in cpus:
        words[c // 32] |= 1 << (c % 32)
    return ",".join(f"{w:08x}" for w in reversed(words))


@dataclass(frozen=True)
class GuestDevice:
    """A passed-through GPU or NIC function: where the host has it and where the guest sees it."""
    host: str
    guest: str
    kind: str  # "gpu" or "nic"
    name: str = ""  # GPUs: the model; NICs: the RDMA device name predicted for the guest
    nic: Nic | None = None
    vf: NicVf | None = None


@dataclass
class VmTopology:
    vm: str
    xml: str
    gpus: list[GuestDevice] = field(default_factory=list)
    nics: list[GuestDevice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _devices(snap: HostSnapshot, vm: Vm) -> tuple[list[GuestDevice], list[GuestDevice], list[str]]:
    gpus, nics, missing = [], [], []
    for h in vm.hostdevs:
        if h.type != "pci" or not h.address:
            continue
        g = snap.gpu(h.address)
        found = nic_of(snap, h.address) if g is None else None
        if g is None and found is None:
            continue
        if not h.guest_address:
            missing.append(h.address)
            continue
        if g is not None:
            gpus.append(GuestDevice(h.address, h.guest_address, "gpu", g.name))
        elif found is not None:
            nics.append(GuestDevice(h.address, h.guest_address, "nic", nic=found[0], vf=found[1]))
    return sorted(gpus, key=lambda d: d.guest), sorted(nics, key=lambda d: d.guest), missing


def guest_rdma_names(nics: list[GuestDevice]) -> list[GuestDevice]:
    """Each NIC function with the RDMA device name the guest will most likely give it: mlx5 devices are
    numbered in probe order (guest PCI order); others keep the host's name for them."""
    out, k = [], 0
    for d in nics:
        assert d.nic is not None
        if d.nic.driver == "mlx5_core":
            name = f"mlx5_{k}"
            k += 1
        else:
            name = ((d.vf.rdma if d.vf else ()) or d.nic.rdma or ("",))[0]
        out.append(GuestDevice(d.host, d.guest, d.kind, name, d.nic, d.vf))
    return out


def _cpu_attrs(snap: HostSnapshot, vm: Vm, host_node: int | None, guest_node: int, nodes: list[int | None],
               cpuinfo: str) -> dict[str, str]:
    """numaid/affinity as the guest numbers them: the guest vCPUs pinned to that host node (all vCPUs when
    the devices hang off one node or the VM is not pinned), and the host CPU's identity."""
    node_of = snap.cpu_node()
    vcpus = list(range(vm.vcpus or 1))
    if len(nodes) > 1 and vm.pins:
        on = sorted({p.vcpu for p in vm.pins for c in p.cpus if node_of.get(c) == host_node})
        vcpus = on or vcpus
    info = dict(_CPUINFO.findall(cpuinfo or ""))
    attrs = {"numaid": str(guest_node), "affinity": cpumask(vcpus),
             "arch": "arm64" if snap.host.cpu_vendor == "arm" else "x86_64"}
    if info.get("vendor_id"):
        attrs["vendor"] = info["vendor_id"]
    if info.get("cpu family", "").isdigit():
        attrs["familyid"] = info["cpu family"]
    if info.get("model", "").isdigit():
        attrs["modelid"] = info["model"]
    return attrs


def _pci_attrs(dev: PciDevice | None, busid: str, physfn: PciDevice | None = None) -> dict[str, str]:
    """A <pci> element's attributes; a VF, whose own link registers say nothing, has its PF's link."""
    attrs = {"busid": busid}
    if dev is None:
        return attrs
    attrs["class"] = f"0x{dev.class_id:06x}"
    attrs["vendor"] = f"0x{dev.vendor_id:04x}"
    attrs["device"] = f"0x{dev.device_id:04x}"
    if dev.subsystem_vendor_id is not None:
        attrs["subsystem_vendor"] = f"0x{dev.subsystem_vendor_id:04x}"
    if dev.subsystem_device_id is not None:
        attrs["subsystem_device"] = f"0x{dev.subsystem_device_id:04x}"
    link = physfn.link if physfn is not None and not (dev.link.max_speed or dev.link.current_speed) else dev.link
    speed = link.max_speed or link.current_speed
    width = link.max_width or link.current_width
    if speed:
        attrs["link_speed"] = speed
    if width:
        attrs["link_width"] = str(width)
    return attrs


class _Xml:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def open(self, depth: int, tag: str, attrs: Mapping[str, str], empty: bool = False) -> None:
        text = "".join(f" {k}={quoteattr(v)}" for k, v in attrs.items())
        self.lines.append(f"{'  ' * depth}<{tag}{text}{'/' if empty else ''}>")

    def close(self, depth: int, tag: str) -> None:
        self.lines.append(f"{'  ' * depth}</{tag}>")


def vm_topology(snap: HostSnapshot, vm_name: str, cpuinfo: str = "",
                nvlinks: Mapping[str, Sequence[tuple[str, int]]] | None = None) -> VmTopology:
    """The topology file of VM `vm_name`. `nvlinks`: host GPU address → (remote host PCI address, link
    count) of its NVLinks, when known (an NVSwitch's address makes an NVSwitch link). RequestError when
    the VM is unknown, holds no whole GPU, or its definition gives a device no guest address."""
    vm = resolve_vm(snap, vm_name)
    gpus, nics, missing = _devices(snap, vm)
    if missing:
        raise RequestError(f"the definition of VM {vm.name} gives no guest PCI address to {', '.join(missing)}: libvirt "
                           "assigns one when it defines the domain (virsh dumpxml shows <address type='pci' ...> in "
                           "each <hostdev>); define it again, then run this again")
    if not gpus:
        raise RequestError(f"VM {vm.name} holds no whole GPU through PCI passthrough: there is no GPU topology to "
                           "describe (a vGPU or MIG guest sees a virtual device)")
    nics = guest_rdma_names(nics)
    index = {d.address: d for d in snap.pci_devices}
    devices = gpus + nics
    guest_ids = {d.guest for d in devices}
    chains = {d.host: list(reversed(ancestors(index, d.host))) for d in devices}

    def node_of(d: GuestDevice) -> int | None:
        top = chains[d.host][0] if chains[d.host] else d.host
        dev = index.get(top) or index.get(d.host)
        return dev.numa_node if dev is not None else None

    nodes = sorted({node_of(d) for d in devices}, key=lambda n: (n is None, n or 0))
    renamed: dict[str, str] = {}
    for chain in chains.values():  # a host bridge at a bus id the guest uses for a device gets another id
        for b in chain:
            if b in guest_ids and b not in renamed:
                renamed[b] = f"ffff:{len(renamed):02x}:00.0"
    notes = [f"bridge {b} is written as {n}: the guest has a device at {b}" for b, n in renamed.items()]
    ids = _Ids({d.host: i for i, d in enumerate(gpus)}, {d.host: d.guest for d in gpus},
               {d.host: i for i, d in enumerate(nics)}, dict(nvlinks if nvlinks is not None else
                                                            snapshot_nvlinks(snap, [d.host for d in gpus])))
    x = _Xml()
    x.open(0, "system", {"version": VERSION})
    for guest_node, host_node in enumerate(nodes):
        x.open(1, "cpu", _cpu_attrs(snap, vm, host_node, guest_node, nodes, cpuinfo))
        _tree(x, [d for d in devices if node_of(d) == host_node], chains, index, renamed, ids, snap, notes)
        x.close(1, "cpu")
    x.close(0, "system")
    if not nics:
        notes.append(f"VM {vm.name} holds no NIC VF: NCCL inside it talks to other nodes through sockets "
                     f"(nodeconsole passthrough GPU --vm {vm.name} --with-nic gives it one)")
    if any(gpu_sm(d.name, index[d.host].device_name if d.host in index else "") is None for d in gpus):
        notes.append("the compute capability of some GPU is unknown here: its <gpu> has no sm, NCCL asks CUDA")
    return VmTopology(vm.name, "\n".join(x.lines) + "\n", gpus, nics, notes)


@dataclass(frozen=True)
class _Ids:
    gpu_dev: dict[str, int]  # host GPU address → NCCL/CUDA device number in the guest
    gpu_guest: dict[str, str]  # host GPU address → guest bus id
    nic_dev: dict[str, int]  # host NIC function → NCCL net device number
    nvlinks: dict[str, Sequence[tuple[str, int]]]


def snapshot_nvlinks(snap: HostSnapshot, gpus: list[str]) -> dict[str, list[tuple[str, int]]]:
    """GPU → (remote, active link count) from the snapshot's NVLink state, where NVML read it (a GPU on
    vfio-pci is invisible to NVML: its links are unknown and left out)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for a in gpus:
        g = snap.gpu(a)
        links = g.nvlinks if g is not None else ()
        counts: dict[str, int] = {}
        for lk in links:
            if lk.active and lk.remote:
                counts[lk.remote] = counts.get(lk.remote, 0) + 1
        if counts:
            out[a] = sorted(counts.items())
    return out


def _tree(x: _Xml, devices: list[GuestDevice], chains: dict[str, list[str]], index: dict[str, PciDevice],
          renamed: dict[str, str], ids: _Ids, snap: HostSnapshot, notes: list[str]) -> None:
    """The <pci> bridges shared by the devices, nested as on the host, each device at its guest bus id."""
    def walk(level: int, group: list[GuestDevice], depth: int) -> None:
        here = [d for d in group if len(chains[d.host]) <= level]
        below: dict[str, list[GuestDevice]] = {}
        for d in group:
            if len(chains[d.host]) > level:
                below.setdefault(chains[d.host][level], []).append(d)
        for bridge in sorted(below):
            x.open(depth, "pci", _pci_attrs(index.get(bridge), renamed.get(bridge, bridge)))
            walk(level + 1, below[bridge], depth + 1)
            x.close(depth, "pci")
        for d in sorted(here, key=lambda d: d.guest):
            _leaf(x, d, depth, index, ids, snap, notes)

    walk(0, devices, 2)


def _leaf(x: _Xml, d: GuestDevice, depth: int, index: dict[str, PciDevice], ids: _Ids, snap: HostSnapshot,
          notes: list[str]) -> None:
    dev = index.get(d.host)
    x.open(depth, "pci", _pci_attrs(dev, d.guest, index.get(dev.physfn) if dev is not None and dev.physfn else None))
    if d.kind == "gpu":
        n = ids.gpu_dev[d.host]
        attrs = {"dev": str(n)}
        sm = gpu_sm(d.name, dev.device_name if dev else "")
        if sm is not None:
            attrs["sm"] = str(sm)
        attrs.update(rank=str(n), gdr="1")
        links = []
        switched = 0  # NCCL writes every link to an NVSwitch as one element
        for remote, count in ids.nvlinks.get(d.host, ()):
            if remote in ids.gpu_guest:
                links.append({"target": ids.gpu_guest[remote], "count": str(count), "tclass": GPU_CLASS})
            elif snap.gpu(remote) is None:  # an NVSwitch
                switched += count
            else:
                notes.append(f"the NVLink of GPU {d.host} to GPU {remote} is left out: that GPU is not in the VM")
        if switched:
            links.append({"target": NVSWITCH_TARGET, "count": str(switched), "tclass": NVSWITCH_CLASS})
        x.open(depth + 1, "gpu", attrs, empty=not links)
        if links:
            for link in links:
                x.open(depth + 2, "nvlink", link, empty=True)
            x.close(depth + 1, "gpu")
    else:
        assert d.nic is not None
        port = d.nic.ports[0] if d.nic.ports else None
        net = {"name": d.name, "dev": str(ids.nic_dev[d.host])}
        if port is not None and port.rate_gbps:
            net["speed"] = str(int(port.rate_gbps * 1000))  # Mb/s
        net["port"] = str(port.port if port is not None else 1)
        net["gdr"] = "1"
        x.open(depth + 1, "nic", {})
        x.open(depth + 2, "net", net, empty=True)
        x.close(depth + 1, "nic")
    x.close(depth, "pci")


# -- the guest's environment ------------------------------------------------------------------------

@dataclass(frozen=True)
class EnvItem:
    name: str
    value: str | None  # None: the host cannot know it (set in the guest)
    note: str = ""


def guest_env(topo: VmTopology, topo_path: str = DEFAULT_TOPO_PATH) -> list[EnvItem]:
    """What NCCL inside the VM needs: the topology file, the RDMA devices, fabric timeouts, and what only
    the guest can say (its interface names)."""
    items = [EnvItem("NCCL_TOPO_FILE", topo_path,
                     f"copy there what `nodeconsole nccl topo --vm {topo.vm} -o FILE` writes")]
    if topo.nics:
        host = "; ".join(
            f"{d.host} ({'VF of ' if d.vf else ''}{d.nic.label if d.nic else '?'}, host RDMA device "
            f"{', '.join((d.vf.rdma if d.vf else d.nic.rdma if d.nic else ()) or ('none: on vfio-pci',))})"
            for d in topo.nics)
        items.append(EnvItem("NCCL_IB_HCA", ",".join(d.name for d in topo.nics),
                             "the guest's names may differ: predicted from guest PCI order (mlx5 devices are "
                             f"numbered as they probe), check with ibv_devices in the guest; the host's view: {host}"))
    items.append(EnvItem("NCCL_SOCKET_IFNAME", None,
                         "set in the guest: the host cannot know the guest's interface names"))
    items.append(EnvItem("NCCL_IB_TIMEOUT", IB_TIMEOUT, "against transient fabric jitter"))
    items.append(EnvItem("NCCL_IB_RETRY_CNT", IB_RETRY_CNT, "against transient fabric jitter"))
    return items
