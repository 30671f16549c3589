"""The PCI part of a synthetic sysfs: the device tree (root port → switch upstream port → downstream
port → endpoint), bus and driver links, IOMMU groups, SR-IOV, mediated devices and /dev/vfio."""
from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.demo import sim_rdma
from nodeconsole.console.demo import sysfs_ops as ops
from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.gen_cpu import CpuLayout, format_cpumask
from nodeconsole.console.demo.spec import (
    NVIDIA,
    GpuSpec,
    HostSpec,
    Link,
    PciDev,
    SriovSpec,
    VfSpec,
    VgpuTypeSpec,
    vf_address,
    walk,
)

SPEEDS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
          5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}


@dataclass
class Func:
    """One PCI function as the generator lays it out (a spec device or one of its VFs)."""
    addr: str
    path: str  # its directory, root-relative (sys/devices/pci0000:15/...)
    dev: PciDev | None  # None for a VF
    numa_node: int
    vendor: int
    device: int
    class_id: int
    sub_vendor: int
    sub_device: int
    driver: str | None
    default_driver: str | None
    override: str | None
    link: Link | None = None
    subordinate: int | None = None
    physfn: str | None = None
    vfs: list[str] = field(default_factory=list)
    vf: VfSpec | None = None
    group: int | None = None

    @property
    def gpu(self) -> GpuSpec | None:
        return self.dev.gpu if self.dev else None

    @property
    def vf_vgpu_types(self) -> tuple[VgpuTypeSpec, ...]:
        """The vGPU types an SR-IOV vGPU VF offers; none for any other function."""
        return self.vf.vgpu_types if self.vf else ()


MdevEntry = tuple[str, int, int | None]  # (parent address, type id, iommu group)


@dataclass
class PciLayout:
    funcs: dict[str, Func]  # address → function, in tree order
    mdevs: dict[str, MdevEntry]  # uuid → (parent address, type id, iommu group)
    groups: dict[int, list[str]]  # group → member addresses (and mdev uuids)


def _subordinate(dev: PciDev) -> int:
    return max([dev.secondary_bus or 0] + [_subordinate(c) for c in dev.children if c.is_bridge])


def build_layout(spec: HostSpec) -> PciLayout:
    """Addresses, paths, drivers and IOMMU groups of every function; raises ValueError on a spec that
    cannot exist (two functions at one address, mdevs on a GPU without the nvidia driver)."""
    funcs: dict[str, Func] = {}
    for addr, dev, parent, hb in walk(spec):
        if addr in funcs:
            raise ValueError(f"two PCI functions at {addr}")
        base = funcs[parent].path if parent else f"sys/devices/pci{hb.domain:04x}:{hb.bus:02x}"
        f = Func(addr, f"{base}/{addr}", dev, hb.numa_node, dev.vendor, dev.device, dev.class_id,
                 dev.vendor if dev.subsystem_vendor is None else dev.subsystem_vendor,
                 dev.subsystem_device, dev.driver, dev.default_driver or dev.driver, dev.driver_override,
                 dev.link, _subordinate(dev) if dev.is_bridge else None)
        funcs[addr] = f
        if dev.gpu and dev.gpu.mdevs and dev.driver != "nvidia":
            raise ValueError(f"{addr} has mdev devices but is not bound to nvidia")
    for addr, f in list(funcs.items()):
        sriov = f.dev.sriov if f.dev else None
        if sriov is None:
            continue
        for i, vf in enumerate(sriov.vfs):
            va = vf_address(addr, sriov, i)
            if va in funcs:
                raise ValueError(f"VF {i} of {addr} lands on {va}, which is taken")
            funcs[va] = Func(va, f"{f.path.rsplit('/', 1)[0]}/{va}", None, f.numa_node, f.vendor,
                             sriov.vf_device, f.class_id, f.sub_vendor, f.sub_device, vf.driver,
                             vf.default_driver or vf.driver, vf.driver_override, physfn=addr, vf=vf)
            f.vfs.append(va)
    mdevs: dict[str, MdevEntry] = {}
    for addr, f in funcs.items():
        for m in (f.gpu.mdevs if f.gpu else ()):
            if m.uuid in mdevs:
                raise ValueError(f"mdev {m.uuid} is defined twice")
            str(uuidlib.UUID(m.uuid))  # raises ValueError on a malformed UUID
            mdevs[m.uuid] = (addr, m.type_id, None)
    groups: dict[int, list[str]] = {}
    if spec.iommu:
        _assign_groups(spec, funcs, mdevs, groups)
    return PciLayout(funcs, mdevs, groups)


def _assign_groups(spec: HostSpec, funcs: dict[str, Func], mdevs: dict[str, MdevEntry],
                   groups: dict[int, list[str]]) -> None:
    """Linux-like grouping: functions of one slot share a group unless they have ACS; everything below
    a bridge without ACS shares one group; VFs and mdevs get their own (numbered after the rest, as
    they appear later at run time)."""
    counter = iter(range(1 << 30))
    below: dict[str, int] = {}  # bridge address → the group forced on everything below it
    slot_group: dict[tuple[str | None, str], int] = {}
    for addr, dev, parent, _hb in walk(spec):
        forced = below.get(parent) if parent else None
        slot_key = (parent, addr.rsplit(".", 1)[0])
        share_slot = not dev.is_bridge and dev.acs is not True
        if forced is not None:
            g = forced
        elif share_slot and slot_key in slot_group:
            g = slot_group[slot_key]
        else:
            g = next(counter)
        if share_slot:
            slot_group.setdefault(slot_key, g)
        funcs[addr].group = g
        if dev.is_bridge:
            if forced is not None:
                below[addr] = forced
            elif dev.acs is False:
                below[addr] = next(counter)
    for f in funcs.values():
        if f.physfn:
            parent = funcs[f.physfn].path.rsplit("/", 1)[0].rsplit("/", 1)[-1]
            forced = below.get(parent)
            f.group = forced if forced is not None else next(counter)
    mdev_groups = {u: next(counter) for u in mdevs}
    for u, g in mdev_groups.items():
        parent, tid, _g = mdevs[u]
        mdevs[u] = (parent, tid, g)
    for addr, f in funcs.items():
        assert f.group is not None  # every function was given one above
        groups.setdefault(f.group, []).append(addr)
    for u, g in mdev_groups.items():
        groups.setdefault(g, []).append(u)


def pci_drivers(spec: HostSpec, pci: PciLayout) -> set[str]:
    """The PCI drivers registered under sys/bus/pci/drivers: the ones loaded without a device (vfio-pci
    only while its module is loaded, nouveau while loaded), the drivers of every function and the
    drivers a probe would pick."""
    drivers = set(spec.drivers_loaded) - {"vfio-pci"}
    drivers.update(name for name, on in (("vfio-pci", spec.vfio_loaded), ("nouveau", spec.nouveau_loaded)) if on)
    for f in pci.funcs.values():
        drivers.update(x for x in (f.driver, f.default_driver) if x)
    return drivers


def write_pci(w: TreeWriter, spec: HostSpec, lay: CpuLayout, pci: PciLayout) -> None:
    nbits = lay.nr_possible
    group_type = "identity" if "iommu=pt" in spec.cmdline.split() else "DMA"
    for hb in spec.host_bridges:
        w.attr(f"sys/devices/pci{hb.domain:04x}:{hb.bus:02x}/uevent", "")
    drivers = pci_drivers(spec, pci)
    default_drivers: dict[str, str | None] = {}
    for addr, f in pci.funcs.items():
        d = f.path
        _write_function_attrs(w, lay, nbits, f)
        w.link(f"{d}/subsystem", "sys/bus/pci")
        w.link(f"{ops.PCI_DEVICES}/{addr}", d)
        ops.write_uevent(w, d, addr, f.vendor, f.device, f.class_id, f.sub_vendor, f.sub_device, f.driver)
        if f.link:
            _write_link(w, d, f.link)
        _write_function_kind(w, pci, f)
        if f.driver:
            ops.bind_links(w, d, addr, f.driver)
        default_drivers[addr] = f.default_driver
        if f.group is not None:
            ops.join_group(w, d, addr, f.group, group_type)
    for name in sorted(drivers):
        ops.write_driver_dir(w, name)
    _write_rdma(w, pci)
    w.raw("sys/bus/pci/drivers_probe", "")
    w.attr("sys/bus/pci/drivers_autoprobe", 1)
    w.mkdir(ops.GROUPS)
    _write_vgpu(w, pci, group_type)
    ops.save_sim(w.base, "default_drivers.json", default_drivers)
    for g in sorted(pci.groups):
        ops.refresh_vfio(w.base, g)


def _write_rdma(w: TreeWriter, pci: PciLayout) -> None:
    """RDMA devices and netdevs of the NIC functions on an RDMA driver: PFs first (they probe at boot),
    then VFs, each in address order; the link layer of each NIC noted for the simulated kernel."""
    layers = {a: f.dev.rdma_link_layer for a, f in pci.funcs.items() if f.dev is not None and f.dev.rdma_link_layer}
    ops.save_sim(w.base, sim_rdma.LINKS, layers)
    funcs = [f for f in pci.funcs.values() if f.driver in sim_rdma.RDMA_DRIVERS]
    for f in sorted(funcs, key=lambda f: (f.physfn is not None, f.addr)):
        layer = layers.get(f.addr) or (layers.get(f.physfn) if f.physfn else None)
        if layer:
            sim_rdma.add(w, f.path, f.addr, layer)


def _write_function_attrs(w: TreeWriter, lay: CpuLayout, nbits: int, f: Func) -> None:
    """A function's identity and NUMA attributes (vendor, device, class, local CPUs, modalias, ...)."""
    d = f.path
    cpus = lay.node_online(f.numa_node) if f.numa_node >= 0 else lay.online
    for name, value in (("vendor", f"0x{f.vendor:04x}"), ("device", f"0x{f.device:04x}"),
                        ("subsystem_vendor", f"0x{f.sub_vendor:04x}"),
                        ("subsystem_device", f"0x{f.sub_device:04x}"), ("class", f"0x{f.class_id:06x}"),
                        ("numa_node", f.numa_node), ("local_cpus", format_cpumask(cpus, nbits)),
                        ("local_cpulist", format_cpulist(cpus)),
                        ("driver_override", f.override or "(null)"), ("enable", 1),
                        ("modalias", ops.modalias(f.vendor, f.device, f.class_id, f.sub_vendor,
                                                  f.sub_device))):
        w.attr(f"{d}/{name}", value)
    w.raw(f"{d}/remove", "")


def _write_function_kind(w: TreeWriter, pci: PciLayout, f: Func) -> None:
    """What depends on the kind of function: reset, boot VGA, bridge bus numbers and SR-IOV for a
    device from the spec; FLR reset and the physfn link for a VF."""
    d = f.path
    dev = f.dev
    if dev is not None:
        if dev.reset_method and not dev.is_bridge:
            w.attr(f"{d}/reset_method", dev.reset_method)
            w.raw(f"{d}/reset", "")
        if f.class_id >> 8 == 0x0300:
            w.attr(f"{d}/boot_vga", 1 if dev.boot_vga else 0)
        if dev.is_bridge:
            w.attr(f"{d}/secondary_bus_number", dev.secondary_bus)
            w.attr(f"{d}/subordinate_bus_number", f.subordinate)
        if dev.sriov:
            _write_sriov(w, d, dev.sriov, f)
    else:  # a VF
        assert f.physfn is not None  # build_layout gives every VF its physical function
        w.attr(f"{d}/reset_method", "flr")
        w.raw(f"{d}/reset", "")
        w.link(f"{d}/physfn", pci.funcs[f.physfn].path)


def _write_link(w: TreeWriter, d: str, link: Link) -> None:
    w.attr(f"{d}/current_link_speed", SPEEDS[link.gen])
    w.attr(f"{d}/current_link_width", link.width)
    w.attr(f"{d}/max_link_speed", SPEEDS[link.max_gen or link.gen])
    w.attr(f"{d}/max_link_width", link.max_width or link.width)


def _write_sriov(w: TreeWriter, d: str, sriov: SriovSpec, f: Func) -> None:
    w.attr(f"{d}/sriov_totalvfs", sriov.totalvfs)
    w.attr(f"{d}/sriov_numvfs", len(sriov.vfs))
    w.attr(f"{d}/sriov_offset", sriov.offset)
    w.attr(f"{d}/sriov_stride", sriov.stride)
    w.attr(f"{d}/sriov_vf_device", f"{sriov.vf_device:x}")
    w.attr(f"{d}/sriov_drivers_autoprobe", 1)
    for i, va in enumerate(f.vfs):
        w.link(f"{d}/virtfn{i}", f"{d.rsplit('/', 1)[0]}/{va}")


def _write_vgpu(w: TreeWriter, pci: PciLayout, group_type: str) -> None:
    """mdev parents and their devices; SR-IOV vGPU files on VFs bound to nvidia."""
    templates: dict[str, dict] = {}
    vf_templates: dict[str, str] = {}
    for addr, f in pci.funcs.items():
        gpu = f.gpu
        if gpu and gpu.vgpu_types and f.vendor == NVIDIA:
            types = {f"nvidia-{t.type_id}": {"name": t.name, "max": t.max_instances,
                                             "description": ops.mdev_description(t.framebuffer_mib,
                                                                                 t.max_instances)}
                     for t in gpu.vgpu_types}
            maxes = {f"nvidia-{t.type_id}": t.max_instances for t in gpu.vgpu_types}
            templates[addr] = types
            if f.driver == "nvidia":
                used: dict[str, int] = {}
                for m in gpu.mdevs:
                    used[f"nvidia-{m.type_id}"] = used.get(f"nvidia-{m.type_id}", 0) + 1
                # Time-sliced vGPU is homogeneous: once one type is in use the others offer nothing.
                avail = {n: (m - used.get(n, 0) if n in used else 0) if used else m for n, m in maxes.items()}
                ops.write_mdev_types(w, f.path, addr, types, avail)
        if f.vf and f.vf.vgpu_types:
            text = ops.creatable_text([(t.type_id, t.name) for t in f.vf.vgpu_types])
            vf_templates[addr] = text
            if f.driver == "nvidia":
                ops.write_vgpu_vf(w, f.path, text, f.vf.vgpu_type)
    for u, (parent, tid, g) in sorted(pci.mdevs.items(), key=lambda kv: kv[1][2] or 0):
        ops.write_mdev(w, pci.funcs[parent].path, f"nvidia-{tid}", u, g)
    w.mkdir(ops.MDEV_DEVICES)
    w.mkdir("sys/class/mdev_bus")
    ops.save_sim(w.base, "mdev_types.json", templates)
    ops.save_sim(w.base, "vgpu_vfs.json", vf_templates)
    sriov = {}
    for addr, f in pci.funcs.items():
        s = f.dev.sriov if f.dev else None
        if s:
            first = pci.funcs[f.vfs[0]] if f.vfs else None
            vf_types = {t.type_id: t.name for va in f.vfs for t in pci.funcs[va].vf_vgpu_types}
            sriov[addr] = {"vf_device": s.vf_device, "offset": s.offset, "stride": s.stride,
                           "totalvfs": s.totalvfs,
                           "vf_driver": s.vf_driver or (first.default_driver if first else None),
                           "vgpu_creatable": ops.creatable_text(sorted(vf_types.items())) if vf_types else None}
    ops.save_sim(w.base, "sriov.json", sriov)
