"""The synthetic host generator: the tree is shaped like Linux's sysfs (links resolve textually, bus
numbers, groups and drivers agree), libvirt's test driver reads the node file, output is deterministic."""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nodeconsole.console.cpulist import parse_cpulist, parse_cpumask
from nodeconsole.console.demo.builders import gpu_functions, mig_instance, root_port
from nodeconsole.console.demo.generator import (
    GeneratedHost,
    GpuSpec,
    HostBridge,
    HostdevSpec,
    HostSpec,
    MdevSpec,
    PciDev,
    VmSpec,
    demo_spec,
    generate,
    large_spec,
    small_spec,
)
from nodeconsole.console.root import Root

libvirt = pytest.importorskip("libvirt")
libvirt.registerErrorHandler(lambda *a: None, None)

STATES = {libvirt.VIR_DOMAIN_RUNNING: "running", libvirt.VIR_DOMAIN_PAUSED: "paused",
          libvirt.VIR_DOMAIN_SHUTOFF: "shut off"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> GeneratedHost:
    return generate(demo_spec(), tmp_path_factory.mktemp("demo"))


def _links(base: Path):
    """Every symlink under base, without following any (captured trees have loops; ours must not)."""
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                yield os.path.relpath(p, base)


def test_every_link_resolves_textually(demo):
    root = Root(demo.root)
    links = list(_links(demo.root))
    assert len(links) > 300
    for rel in links:
        target = root.link_target(rel)
        assert target is not None and not target.startswith(".."), rel
        assert os.path.lexists(demo.root / target), f"{rel} -> {root.readlink(rel)} dangles"


def test_pci_devices_sit_in_a_real_pcie_tree(demo):
    root = Root(demo.root)
    addrs = root.listdir("sys/bus/pci/devices")
    assert len(addrs) > 40
    for addr in addrs:
        target = root.link_target(f"sys/bus/pci/devices/{addr}")
        assert target.startswith("sys/devices/pci") and target.endswith("/" + addr)
        parent = os.path.dirname(target)
        bus = int(addr.split(":")[1], 16)
        if re.fullmatch(r"sys/devices/pci[0-9a-f]{4}:[0-9a-f]{2}", parent):
            assert int(parent[-2:], 16) == bus, addr  # under its host bridge: same bus
        else:  # under a bridge whose secondary bus is ours (VFs sit beside their PF, same bus)
            bridge = os.path.basename(parent)
            assert root.read_int(f"{parent}/secondary_bus_number") == bus, addr
            assert root.read(f"{parent}/class") == "0x060400", bridge
            assert root.read_int(f"{parent}/subordinate_bus_number") >= bus
        # The driver link climbs exactly to sys/ and descends into bus/pci/drivers, like Linux's.
        drv = root.readlink(f"{target}/driver")
        if drv is not None:
            depth = target.count("/")  # components below sys/
            assert drv.startswith("../" * depth + "bus/pci/drivers/"), drv
            name = os.path.basename(drv)
            assert root.link_target(f"sys/bus/pci/drivers/{name}/{addr}") == target


def test_attributes_are_formatted_as_linux(demo):
    root = Root(demo.root)
    nodes = {n: parse_cpulist(root.read(f"sys/devices/system/node/node{n}/cpulist")) for n in (0, 1)}
    for addr in root.listdir("sys/bus/pci/devices"):
        d = root.link_target(f"sys/bus/pci/devices/{addr}")
        for f in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
            assert re.fullmatch(r"0x[0-9a-f]{4}", root.read(f"{d}/{f}")), (addr, f)
        assert re.fullmatch(r"0x[0-9a-f]{6}", root.read(f"{d}/class"))
        assert root.read(f"{d}/driver_override") in ("(null)", "vfio-pci")
        mask, cpulist = root.read(f"{d}/local_cpus"), root.read(f"{d}/local_cpulist")
        assert re.fullmatch(r"([0-9a-f]{8},)*[0-9a-f]{8}", mask)  # 128 possible CPUs: 4 full groups
        assert parse_cpumask(mask) == parse_cpulist(cpulist) == nodes[root.read_int(f"{d}/numa_node")]
        speed = root.read(f"{d}/current_link_speed")
        if speed is not None:
            assert re.fullmatch(r"\d+\.\d GT/s PCIe", speed)
            assert re.fullmatch(r"\d+\.\d GT/s PCIe", root.read(f"{d}/max_link_speed"))
            assert root.read_int(f"{d}/current_link_width") <= root.read_int(f"{d}/max_link_width")


def test_iommu_groups_match_device_links(demo):
    root = Root(demo.root)
    groups = root.listdir("sys/kernel/iommu_groups")
    assert groups and root.listdir("sys/class/iommu")
    seen = set()
    for g in groups:
        assert root.read(f"sys/kernel/iommu_groups/{g}/type") in ("identity", "DMA")
        for member in root.listdir(f"sys/kernel/iommu_groups/{g}/devices"):
            dev = root.link_target(f"sys/kernel/iommu_groups/{g}/devices/{member}")
            assert root.link_target(f"{dev}/iommu_group") == f"sys/kernel/iommu_groups/{g}"
            seen.add(member)
    pci = set(root.listdir("sys/bus/pci/devices"))
    assert pci <= seen  # with the IOMMU on, every PCI function is in a group
    assert seen - pci == set(root.listdir("sys/bus/mdev/devices"))


def test_cpu_and_node_topology(demo):
    root = Root(demo.root)
    online = parse_cpulist(root.read("sys/devices/system/cpu/online"))
    assert online == tuple(range(128))
    assert root.read("sys/devices/system/cpu/possible") == "0-127"
    node_cpus = [parse_cpulist(root.read(f"sys/devices/system/node/node{n}/cpulist")) for n in (0, 1)]
    assert sorted(node_cpus[0] + node_cpus[1]) == list(online)
    assert root.read("sys/devices/system/node/node0/distance") == "10 21"
    for cpu in online:
        t = f"sys/devices/system/cpu/cpu{cpu}/topology"
        sibs = parse_cpulist(root.read(f"{t}/thread_siblings_list"))
        assert cpu in sibs and len(sibs) == 2
        assert parse_cpumask(root.read(f"{t}/thread_siblings")) == sibs
        pkg = root.read_int(f"{t}/physical_package_id")
        assert cpu in node_cpus[pkg]
        for s in sibs:  # siblings agree on their core
            assert root.read_int(f"sys/devices/system/cpu/cpu{s}/topology/core_id") == \
                root.read_int(f"{t}/core_id")
    cpuinfo = root.read("proc/cpuinfo")
    assert cpuinfo.count("processor\t:") == 128 and "vmx" in cpuinfo
    assert root.read("sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages") == "144"
    assert "Node 0 MemTotal:" in root.read("sys/devices/system/node/node0/meminfo")
    assert "intel_iommu=on" in root.read("proc/cmdline").split()
    assert root.read("proc/sys/kernel/hostname") == "gpu-node-01"


def test_offline_cpus_have_no_topology(tmp_path):
    from dataclasses import replace
    spec = small_spec()
    spec = replace(spec, cpu=replace(spec.cpu, offline=(5, 21), extra_possible=8))
    root = Root(generate(spec, tmp_path).root)
    assert root.read("sys/devices/system/cpu/offline") == "5,21,32-39"
    assert root.read("sys/devices/system/cpu/cpu5/online") == "0"
    assert not root.exists("sys/devices/system/cpu/cpu5/topology")
    assert root.read("sys/devices/system/cpu/cpu21/online") == "0"
    assert root.read("sys/devices/system/node/node0/cpulist") == "0-4,6-20,22-31"
    assert root.read("sys/devices/system/cpu/cpu0/topology/thread_siblings") == "00,00010001"


def _domain_xml(dom) -> ET.Element:
    return ET.fromstring(dom.XMLDesc())


def test_libvirt_test_driver_reads_the_node_file(demo):
    spec = demo_spec()
    conn = libvirt.openReadOnly(demo.libvirt_uri)
    try:
        info = conn.getInfo()
        assert info[2] == 128 and info[4:] == [2, 1, 32, 2]
        doms = {d.name(): d for d in conn.listAllDomains()}
        assert set(doms) == {vm.name for vm in spec.vms}
        for vm in spec.vms:
            dom = doms[vm.name]
            assert STATES[dom.state()[0]] == vm.state, vm.name
            x = _domain_xml(dom)
            assert int(x.findtext("vcpu")) == vm.vcpus
            pins = {int(p.get("vcpu")): parse_cpulist(p.get("cpuset")) for p in x.iter("vcpupin")}
            assert pins == {i: tuple(sorted(c)) for i, c in enumerate(vm.pins)}
            emu = x.find("cputune/emulatorpin")
            assert (parse_cpulist(emu.get("cpuset")) if emu is not None else ()) == tuple(vm.emulator_pins)
            got = []
            for hd in x.iter("hostdev"):
                a = hd.find("source/address")
                got.append(a.get("uuid") if hd.get("type") == "mdev" else
                           f"{int(a.get('domain'), 16):04x}:{int(a.get('bus'), 16):02x}:"
                           f"{int(a.get('slot'), 16):02x}.{int(a.get('function'), 16)}")
            assert got == [h.mdev_uuid or h.address for h in vm.hostdevs], vm.name
            if vm.numatune:
                assert parse_cpulist(dom.numaParameters(0)["numa_nodeset"]) == vm.numatune[1]
    finally:
        conn.close()


def test_generation_is_deterministic(tmp_path):
    a, b = generate(demo_spec(), tmp_path / "a"), generate(demo_spec(), tmp_path / "b")

    def snapshot(base: Path) -> dict:
        out = {}
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            for name in dirnames + filenames:
                p = os.path.join(dirpath, name)
                rel = os.path.relpath(p, base)
                out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else \
                    ("dir",) if os.path.isdir(p) else ("file", Path(p).read_bytes())
        return out

    snap = snapshot(a.dest)
    assert snap == snapshot(b.dest)
    assert len(snap) > 3000
    generate(demo_spec(), tmp_path / "a")  # regenerating in place gives the same tree again
    assert snapshot(a.dest) == snap


def test_large_hosts_scale(tmp_path):
    # how fast generation is, is measured in benchmarks/, not asserted here
    host = generate(large_spec(gpus=16, cpus=256, vms=500), tmp_path / "large")
    conn = libvirt.openReadOnly(host.libvirt_uri)
    try:
        assert conn.getInfo()[2] == 256
        assert len(conn.listAllDomains()) == 500
    finally:
        conn.close()
    root = Root(host.root)
    gpus = [a for a in root.listdir("sys/bus/pci/devices")
            if root.read(f"sys/bus/pci/devices/{a}/class") == "0x030200"]
    assert len(gpus) == 16


def test_small_spec_without_iommu(tmp_path):
    host = generate(small_spec(gpus=2, iommu=False), tmp_path)
    root = Root(host.root)
    assert root.listdir("sys/kernel/iommu_groups") == [] and root.listdir("sys/class/iommu") == []
    assert not root.exists("sys/bus/pci/devices/0000:18:00.0/iommu_group")
    assert root.link_name("sys/bus/pci/devices/0000:19:00.0/driver") == "nvidia"
    assert "intel_iommu=on" not in root.read("proc/cmdline")


def _tiny(**kw) -> HostSpec:
    gpu = gpu_functions(GpuSpec(), label="g")
    return HostSpec(host_bridges=(HostBridge(0x17, 0, (root_port(1, 0x18, gpu),)),), **kw)


@pytest.mark.parametrize("spec, message", [
    (_tiny(vms=(VmSpec("a", hostdevs=(HostdevSpec("0000:99:00.0"),)),)), "not a PCI function"),
    (_tiny(vms=(VmSpec("a", hostdevs=(HostdevSpec(mdev_uuid="6b1c7e4e-0000-4000-8000-000000000001"),)),)),
     "does not exist"),
    (_tiny(vms=(VmSpec("a", vcpus=2, pins=((1,),)),)), "2 vCPUs"),
    (_tiny(vms=(VmSpec("a", vcpus=1, pins=((500,),)),)), "does not have"),
    (_tiny(vms=(VmSpec("a"), VmSpec("a"))), "twice"),
    (_tiny(vms=(VmSpec("a", state="sleeping"),)), "unknown state"),
    (HostSpec(host_bridges=(HostBridge(0, 0, (PciDev(1), PciDev(1))),)), "two PCI functions"),
    (HostSpec(host_bridges=(HostBridge(0, 0, gpu_functions(
        GpuSpec(mdevs=(MdevSpec("6b1c7e4e-0000-4000-8000-000000000001", 1100),)), driver=None)),)),
     "not bound to nvidia"),
])
def test_impossible_specs_are_rejected_before_writing(tmp_path, spec, message):
    with pytest.raises(ValueError, match=message):
        generate(spec, tmp_path / "h")
    assert not (tmp_path / "h").exists()


def test_mig_instances_are_checked_against_the_profile_table():
    assert mig_instance("H100-80GB-HBM3", "3g.40gb", 4, 2).size == 4
    with pytest.raises(ValueError, match="cannot start"):
        mig_instance("H100-80GB-HBM3", "3g.40gb", 2, 1)
    with pytest.raises(ValueError, match="no MIG profile"):
        mig_instance("H100-80GB-HBM3", "5g.50gb", 0, 1)
