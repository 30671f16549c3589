"""read_sysfs on small synthetic trees laid out like Linux: topology corner cases, PCI attributes,
SR-IOV, vGPU (mdev and SR-IOV), malformed values, link loops, permissions and speed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeconsole.console import root as root_module
from nodeconsole.console.pciids import PciIds
from nodeconsole.console.root import Root
from nodeconsole.console.sources.sysfs import cpu_vendor, read_sysfs
from nodeconsole.console.sources.types import SourceError
from tests.console.sysfs_tree import FakeSys

BUILTIN = PciIds(paths=None)  # names from the built-in table: the same on every machine


def two_nodes(t: FakeSys) -> None:
    """2 packages × 2 cores × 2 threads; node 0 = CPUs 0-3, node 1 = CPUs 4-7."""
    t.host()
    t.cpu_lists(online="0-7", present="0-7", possible="0-63")
    for cpu in range(8):
        pkg, core = cpu // 4, (cpu % 4) // 2
        first = pkg * 4 + core * 2
        t.cpu(cpu, pkg, core, f"{first}-{first + 1}")
    t.node_online("0-1")
    t.node(0, "0-3", 16 << 20, "10 21", {2048: 512, 1048576: 2})
    t.node(1, "4-7", 16 << 20, "21 10")


def read(tmp_path: Path):
    return read_sysfs(Root(tmp_path), ids=BUILTIN)


# -- host, CPUs, NUMA -----------------------------------------------------------------------------

def test_host_info(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    two_nodes(t)
    data = read(tmp_path)
    assert data.host.hostname == "gpu-node-1"
    assert data.host.kernel == "6.8.0-45-generic"
    assert data.host.cmdline.startswith("BOOT_IMAGE=")
    assert data.host.cpu_vendor == "intel"


def test_host_info_fallbacks(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    t.write("etc/hostname", "from-etc\n")
    t.write("proc/version", "Linux version 5.15.0-rc1-dirty (root@ceph1) (gcc 9.3.1) #313 SMP")
    t.write("proc/cpuinfo", "processor\t: 0\nBogoMIPS\t: 200.00\nCPU implementer\t: 0x48\n")
    data = read(tmp_path)
    assert (data.host.hostname, data.host.kernel, data.host.cpu_vendor) == ("from-etc", "5.15.0-rc1-dirty", "arm")


@pytest.mark.parametrize("text, vendor", [
    ("vendor_id\t: GenuineIntel", "intel"), ("vendor_id\t: AuthenticAMD", "amd"),
    ("CPU implementer\t: 0x41", "arm"), ("model name\t: aarch64 thing", "arm"), ("", ""),
    ("vendor_id\t: SomethingElse", ""),
])
def test_cpu_vendor(text: str, vendor: str) -> None:
    assert cpu_vendor(text) == vendor


def test_cpus_packages_cores_and_nodes(tmp_path: Path) -> None:
    two_nodes(FakeSys(tmp_path))
    data = read(tmp_path)
    # possible (0-63) counts hotplug slots: only present CPUs are listed
    assert [c.id for c in data.cpus] == list(range(8))
    assert [(c.package, c.core, c.numa_node, c.siblings) for c in data.cpus[:4]] == [
        (0, 0, 0, (0, 1)), (0, 0, 0, (0, 1)), (0, 1, 0, (2, 3)), (0, 1, 0, (2, 3))]
    assert data.cpus[5].numa_node == 1
    n0, n1 = data.numa_nodes
    assert (n0.id, n0.cpus, n0.memory_kib, n0.distances, n0.online) == (0, (0, 1, 2, 3), 16 << 20, (10, 21), True)
    assert n0.hugepages == ((2048, 512), (1048576, 2))
    assert n1.distances == (21, 10)


def test_multi_die_core_numbers_are_unique_per_package(tmp_path: Path) -> None:
    """AMD-like: core_id restarts on every die of a package; a core is a sibling group."""
    t = FakeSys(tmp_path)
    t.cpu_lists(online="0-7", present="0-7")
    layout = {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}  # first thread of each core → (die, core_id)
    for first, (die, core_id) in layout.items():
        for cpu in (first, first + 4):  # SMT siblings n and n+4, as Linux numbers them
            t.cpu(cpu, 0, core_id, f"{first},{first + 4}", die=die)
    data = read(tmp_path)
    by_core = {}
    for c in data.cpus:
        by_core.setdefault(c.core, []).append(c.id)
    assert by_core == {0: [0, 4], 1: [1, 5], 2: [2, 6], 3: [3, 7]}  # (die, core_id) order, deterministic
    assert sorted({c.core_id for c in data.cpus}) == [0, 1]
    assert [c.die for c in data.cpus[:4]] == [0, 0, 1, 1]


def test_unique_core_ids_are_kept(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    t.cpu_lists(online="0-2", present="0-2")
    for cpu, core_id in enumerate((0, 4, 9)):  # Intel numbers cores sparsely
        t.cpu(cpu, 0, core_id, str(cpu))
    assert [c.core for c in read(tmp_path).cpus] == [0, 4, 9]


def test_offline_cpus(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    t.write("sys/devices/system/cpu/present", "0-3")
    t.cpu(0, 0, 0, "0")  # no online file: online unless listed offline
    t.cpu(1, 0, 1, "1")
    t.cpu(2, 0, 2, "2", online=False)
    t.cpu(3, 0, 3, "3", online=False)
    t.write("sys/devices/system/cpu/offline", "2-3")
    t.node(0, "0-3", 1024)
    data = read(tmp_path)
    assert [(c.id, c.online, c.package, c.core, c.numa_node) for c in data.cpus] == [
        (0, True, 0, 0, 0), (1, True, 0, 1, 0), (2, False, -1, -1, 0), (3, False, -1, -1, 0)]
    assert data.numa_nodes[0].cpus == (0, 1)  # what can be pinned


def test_sparse_and_cpuless_numa_nodes(tmp_path: Path) -> None:
    """Grace-Hopper-like: GPU memory as CPU-less nodes with high ids."""
    t = FakeSys(tmp_path)
    t.cpu_lists(online="0-1", present="0-1")
    t.cpu(0, 0, 0, "0")
    t.cpu(1, 0, 1, "1")
    t.node_online("0,1,33")
    t.node(0, "0-1", 1 << 20, "10 20 80")
    t.node(1, "", 2 << 20, "20 10 80")
    t.node(33, "", 3 << 20, "80 80 10")
    nodes = read(tmp_path).numa_nodes
    assert [(n.id, n.cpus, n.memory_kib, n.distances) for n in nodes] == [
        (0, (0, 1), 1 << 20, (10, 20, 80)), (1, (), 2 << 20, (20, 10, 80)), (33, (), 3 << 20, (80, 80, 10))]


def test_node_dir_not_online(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    t.node_online("1")
    t.node(0, "", 0, "10 21")
    t.node(1, "", 1024, "21 10")
    nodes = read(tmp_path).numa_nodes
    assert [(n.id, n.online) for n in nodes] == [(0, False), (1, True)]


# -- PCI ------------------------------------------------------------------------------------------

def gpu_host(t: FakeSys) -> None:
    two_nodes(t)
    t.pci("0000:00:00.0", 0x8086, 0x2020, 0x060000, local_cpus="0f")
    t.pci("0000:16:02.0", 0x8086, 0x347a, 0x060400, driver="pcieport", numa_node=0, local_cpus="0f",
          iommu_group=3)
    t.pci("0000:17:00.0", 0x10DE, 0x2330, 0x030200, parent="0000:16:02.0", driver="nvidia", numa_node=0,
          local_cpus="0f", iommu_group=14, extra={
              "current_link_speed": "32.0 GT/s PCIe", "current_link_width": "8",
              "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"})
    t.pci("0000:17:00.1", 0x10DE, 0x22A3, 0x040300, parent="0000:16:02.0", driver="vfio-pci",
          driver_override="vfio-pci", numa_node=0, local_cpus="0f", iommu_group=14)
    t.pci("0000:03:00.0", 0x1A03, 0x2000, 0x030000, driver="ast", local_cpus="ff",
          extra={"boot_vga": "1"})


def test_pci_attributes(tmp_path: Path) -> None:
    gpu_host(FakeSys(tmp_path))
    data = read(tmp_path)
    assert [d.address for d in data.pci_devices] == [
        "0000:00:00.0", "0000:03:00.0", "0000:16:02.0", "0000:17:00.0", "0000:17:00.1"]
    gpu = next(d for d in data.pci_devices if d.address == "0000:17:00.0")
    assert (gpu.vendor_id, gpu.device_id, gpu.class_id, gpu.driver) == (0x10DE, 0x2330, 0x030200, "nvidia")
    assert (gpu.iommu_group, gpu.parent, gpu.numa_node, gpu.local_cpus) == (14, "0000:16:02.0", 0, (0, 1, 2, 3))
    assert (gpu.subsystem_vendor_id, gpu.subsystem_device_id, gpu.driver_override) == (0x10DE, 0x1234, None)
    assert (gpu.link.current_width, gpu.link.max_width, gpu.link.downtrained) == (8, 16, True)
    assert gpu.link.current_speed == "32.0 GT/s PCIe"
    assert (gpu.vendor_name, gpu.device_name, gpu.class_name) == (
        "NVIDIA Corporation", "GH100 [H100 SXM5 80GB]", "3D controller")
    assert not gpu.is_bridge and not gpu.boot_vga
    audio = next(d for d in data.pci_devices if d.address == "0000:17:00.1")
    assert (audio.driver, audio.driver_override, audio.class_name) == ("vfio-pci", "vfio-pci", "Audio device")
    port = next(d for d in data.pci_devices if d.address == "0000:16:02.0")
    assert port.is_bridge and port.parent is None and port.class_name == "PCI bridge"
    vga = next(d for d in data.pci_devices if d.address == "0000:03:00.0")
    assert vga.boot_vga and vga.numa_node is None  # local_cpus = every CPU: no single node
    assert next(d for d in data.pci_devices if d.address == "0000:00:00.0").iommu_group is None


def test_domain_10000_behind_vmd(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    two_nodes(t)
    t.pci("0000:5d:05.5", 0x8086, 0x201D, 0x010400, driver="vmd", numa_node=0, local_cpus="0f")
    t.pci("10000:00:02.0", 0x8086, 0x2032, 0x060400, parent="0000:5d:05.5", segment="pci10000:00",
          driver="pcieport", numa_node=0, local_cpus="0f")
    t.pci("10000:01:00.0", 0x144D, 0xA80A, 0x010802, parent="10000:00:02.0", driver="nvme", numa_node=0,
          local_cpus="0f")
    devs = {d.address: d for d in read(tmp_path).pci_devices}
    assert list(devs) == ["0000:5d:05.5", "10000:00:02.0", "10000:01:00.0"]
    assert devs["10000:01:00.0"].parent == "10000:00:02.0"
    assert devs["10000:00:02.0"].parent == "0000:5d:05.5"
    assert devs["10000:01:00.0"].vendor_name == "Samsung Electronics Co Ltd"


@pytest.mark.parametrize("numa_node, local_cpus, local_cpulist, expected", [
    ("-1", "000000f0", None, 1),  # unknown node: derived from local_cpus
    ("-1", "000000ff", None, None),  # every CPU: no single node
    ("-1", "00000030", None, 1),  # a part of one node's CPUs
    ("1", "00000000", None, 1),  # empty mask says nothing: the numa_node file counts
    ("1", "000000ff", None, None),  # local_cpus wins, as for lstopo
    ("-1", "zz", "4-7", 1),  # unreadable mask: local_cpulist
    ("-1", "000000f0", "0-3", 1),  # both readable and disagreeing: local_cpus is trusted
    ("garbage", None, None, None),
    ("7", None, None, None),  # a node that does not exist
])
def test_pci_numa_locality(tmp_path: Path, numa_node, local_cpus, local_cpulist, expected) -> None:
    t = FakeSys(tmp_path)
    two_nodes(t)
    t.pci("0000:17:00.0", numa_node=numa_node, local_cpus=local_cpus,
          extra={"local_cpulist": local_cpulist} if local_cpulist else None)
    assert read(tmp_path).pci_devices[0].numa_node == expected


def test_sriov_pf_and_vfs(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    two_nodes(t)
    t.pci("0000:17:00.0", driver="nvidia", numa_node=0)
    vfs = [f"0000:17:{dev:02x}.{fn}" for dev, fn in [(0, 4), (0, 5), (0, 6), (0, 7), (1, 0), (1, 1), (1, 2),
                                                     (1, 3), (1, 4), (1, 5), (1, 6)]]
    for vf in vfs:
        t.pci(vf, driver="nvidia", numa_node=0)
    t.sriov("0000:17:00.0", vfs, total=16)
    devs = {d.address: d for d in read(tmp_path).pci_devices}
    pf = devs["0000:17:00.0"]
    assert (pf.sriov_totalvfs, pf.sriov_numvfs) == (16, 11)
    assert pf.vfs == tuple(vfs)  # virtfn0..virtfn10 in number order, not name order
    assert all(devs[vf].physfn == "0000:17:00.0" and devs[vf].sriov_totalvfs is None for vf in vfs)


def test_trimmed_chain_parent_is_nearest_listed_bridge(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    two_nodes(t)
    t.pci("0000:5d:02.0", 0x8086, 0x2032, 0x060400, driver="pcieport")
    t.pci("0000:5e:00.0", 0x10B5, 0x8747, 0x060400, parent="0000:5d:02.0", driver="pcieport")
    t.pci("0000:5f:03.0", 0x10B5, 0x8747, 0x060400, parent="0000:5e:00.0", driver="pcieport")
    t.pci("0000:60:00.0", parent="0000:5f:03.0", driver="nvidia")
    os.unlink(tmp_path / "sys/bus/pci/devices/0000:5f:03.0")  # a capture that lost this port
    devs = {d.address: d for d in read(tmp_path).pci_devices}
    assert devs["0000:60:00.0"].parent == "0000:5e:00.0"


# -- vGPU -----------------------------------------------------------------------------------------

UUID = "aa618089-8b16-4d01-a136-25a0f3c73123"


def test_mdev_types_and_instances(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    two_nodes(t)
    t.pci("0000:17:00.0", 0x10DE, 0x1EB8, 0x030200, driver="nvidia", numa_node=0)
    t.mdev_type("0000:17:00.0", "nvidia-222", "GRID T4-1B", 15,
                "num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, max_instance=16")
    t.mdev_type("0000:17:00.0", "nvidia-230", "GRID T4-16Q", 0, "num_heads=4, framebuffer=16384M, max_instance=1")
    t.mdev("0000:17:00.0", UUID, "nvidia-230")
    data = read(tmp_path)
    assert [(v.id, v.name, v.available, v.max_instances, v.framebuffer_mib, v.via, v.parent)
            for v in data.vgpu_types] == [
        ("nvidia-222", "GRID T4-1B", 15, 16, 1024, "mdev", "0000:17:00.0"),
        ("nvidia-230", "GRID T4-16Q", 0, 1, 16384, "mdev", "0000:17:00.0")]
    assert [(i.uuid, i.type_name, i.parent) for i in data.vgpu_instances] == [
        (UUID, "GRID T4-16Q", "0000:17:00.0")]


def test_sriov_vgpu_creatable_and_current(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    two_nodes(t)
    t.pci("0000:17:00.0", 0x10DE, 0x2335, driver="nvidia", numa_node=0)
    t.pci("0000:17:00.4", 0x10DE, 0x2335, driver="nvidia", numa_node=0)
    t.pci("0000:17:00.5", 0x10DE, 0x2335, driver="nvidia", numa_node=0)
    t.sriov("0000:17:00.0", ["0000:17:00.4", "0000:17:00.5"], total=16)
    t.vgpu_vf("0000:17:00.4", [(1414, "NVIDIA H200X-1-18C"), (1415, "NVIDIA H200X-2-35C")])
    t.vgpu_vf("0000:17:00.5", [], current=1415)  # a VF holding a vGPU lists nothing creatable
    data = read(tmp_path)
    assert [(v.id, v.name, v.via, v.parent) for v in data.vgpu_types] == [
        ("1414", "NVIDIA H200X-1-18C", "sriov", "0000:17:00.4"),
        ("1415", "NVIDIA H200X-2-35C", "sriov", "0000:17:00.4")]
    assert [(i.uuid, i.type_name, i.parent) for i in data.vgpu_instances] == [
        ("0000:17:00.5", "NVIDIA H200X-2-35C", "0000:17:00.5")]


# -- robustness -----------------------------------------------------------------------------------

def test_malformed_values_do_not_crash(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    t.cpu_lists(online="0-3,x", present="0-1")
    t.cpu(0, 0, 0, "0")
    t.cpu(1, 0, 1, "garbage")
    t.write("sys/devices/system/cpu/cpu1/topology/core_id", "zz")
    t.node(0, "0-1", 10, "10 20")
    t.node(1, "nonsense", 10)
    t.write("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal: lots")
    t.write("sys/devices/system/node/node1/distance", "10 x 20")
    t.write("sys/devices/system/node/node1/hugepages/hugepages-xkB/nr_hugepages", "3")
    t.pci("0000:17:00.0", cls=0, numa_node="garbage", local_cpus="not a mask", iommu_group=None)
    t.write("sys/bus/pci/devices/0000:17:00.0/class", "0xzzzz")
    t.write("sys/bus/pci/devices/0000:17:00.0/current_link_width", "wide")
    t.write("sys/bus/pci/devices/0000:17:00.0/sriov_totalvfs", "-")
    t.pci("0000:18:00.0")
    os.unlink(tmp_path / "sys/devices/pci0000:18/0000:18:00.0/vendor")  # partial: kept, vendor unknown
    t.write("sys/bus/pci/devices/0000:19:00.0/vendor", "0x10de")  # a plain dir without device id: kept
    (tmp_path / "sys/bus/pci/devices/not-an-address").mkdir()
    data = read(tmp_path)
    assert [c.id for c in data.cpus] == [0, 1]  # the online list is unreadable: per-CPU files decide
    assert data.cpus[1].siblings == (1,) and data.cpus[1].core_id == -1
    assert [(n.id, n.cpus, n.memory_kib, n.distances, n.hugepages) for n in data.numa_nodes] == [
        (0, (0, 1), 10, (10, 20), ((2048, 0),)), (1, (), 0, (), ((2048, 0),))]
    dev, partial, bare = data.pci_devices  # a partial tree is read for what it holds (as lstopo does)
    assert (dev.address, dev.class_id, dev.numa_node, dev.link.current_width, dev.sriov_totalvfs) == (
        "0000:17:00.0", 0, None, None, None)
    assert (partial.address, partial.vendor_id, partial.device_id) == ("0000:18:00.0", 0, 0x2330)
    assert (bare.address, bare.vendor_id, bare.device_id) == ("0000:19:00.0", 0x10DE, 0)


def test_dangling_links_and_loops(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    gpu_host(t)
    t.raw_link("sys/bus/pci/devices/0000:99:00.0", "0000:99:00.0")  # a link to itself
    t.raw_link("sys/bus/pci/devices/0000:98:00.0", "../../../devices/pci0000:98/0000:98:00.0")  # dangling
    t.raw_link("sys/bus/pci/devices/0000:97:00.0", "0000:96:00.0")  # a two-link loop
    t.raw_link("sys/bus/pci/devices/0000:96:00.0", "0000:97:00.0")
    gpu = t.paths["0000:17:00.0"]
    t.raw_link(f"{gpu}/subsystem", "../../../../bus/pci")  # loops back up to the bus, like Linux
    t.raw_link(f"{gpu}/firmware_node", "../../../../../LNXSYSTM:00/missing")
    t.raw_link(f"{gpu}/loop", "loop")
    t.raw_link("sys/kernel/iommu_groups/14/devices/0000:99:00.0", "0000:99:00.0")
    t.raw_link("sys/class/mdev_bus/0000:95:00.0", "../../devices/nowhere")
    t.raw_link("sys/devices/system/node/node5", "node5")
    t.raw_link("sys/devices/system/cpu/cpu9", "cpu9")
    data = read(tmp_path)  # terminates (the suite's timeout catches a loop); how fast is a benchmark
    assert [d.address for d in data.pci_devices] == [
        "0000:00:00.0", "0000:03:00.0", "0000:16:02.0", "0000:17:00.0", "0000:17:00.1"]
    group = next(g for g in data.iommu.groups if g.id == 14)
    assert "0000:99:00.0" in group.devices and not group.viable  # unreadable member: cannot be vouched for
    cpu9 = data.cpus[-1]  # a name only: not in the online list, nothing readable
    assert [c.id for c in data.cpus] == list(range(8)) + [9]
    assert (cpu9.online, cpu9.package, cpu9.core, cpu9.numa_node) == (False, -1, -1, None)
    assert [(n.id, n.online, n.cpus) for n in data.numa_nodes] == [
        (0, True, (0, 1, 2, 3)), (1, True, (4, 5, 6, 7)), (5, False, ())]


def test_permission_denied_is_a_source_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_host(FakeSys(tmp_path))
    denied = os.path.realpath(tmp_path / "sys/bus/pci/devices/0000:17:00.0/class")  # reads resolve links
    real_open = os.open

    def fake_open(path, flags, *args):
        if os.fspath(path) == denied:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(root_module.os, "open", fake_open)
    with pytest.raises(SourceError, match=r"permission denied reading .*0000:17:00\.0/class"):
        read(tmp_path)


def test_permission_denied_through_a_custom_root(tmp_path: Path) -> None:
    gpu_host(FakeSys(tmp_path))

    class Guarded(Root):
        def listdir(self, rel: str) -> list[str]:
            if rel == "sys/kernel/iommu_groups":
                raise PermissionError(13, "Permission denied", str(self.p(rel)))
            return super().listdir(rel)

    with pytest.raises(SourceError, match="permission denied reading .*sys/kernel/iommu_groups"):
        read_sysfs(Guarded(tmp_path), ids=BUILTIN)


def test_nul_padded_values(tmp_path: Path) -> None:
    """Captured files can end in a NUL byte after the newline."""
    t = FakeSys(tmp_path)
    t.cpu_lists(online="0-1", present="0-1")
    t.cpu(0, 0, 0, "0")
    t.cpu(1, 0, 1, "1")
    (tmp_path / "sys/devices/system/node/node0").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/node0/cpulist").write_bytes(b"0-1\n\x00")
    assert read(tmp_path).numa_nodes[0].cpus == (0, 1)


def test_500_functions_read(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    two_nodes(t)
    for bus in range(100):
        port = f"0000:{bus + 1:02x}:00.0"
        t.pci(f"0000:00:{bus % 32:02x}.{bus // 32}", 0x8086, 0x2030, 0x060400, driver="pcieport",
              local_cpus="0f" if bus < 50 else "f0", numa_node=-1)
        for fn in range(4):
            t.pci(port[:-1] + str(fn), 0x15B3, 0x101D, 0x020000, parent=f"0000:00:{bus % 32:02x}.{bus // 32}",
                  driver="mlx5_core", local_cpus="0f" if bus < 50 else "f0", iommu_group=bus)
    data = read(tmp_path)
    assert len(data.pci_devices) == 500
    assert {d.driver for d in data.pci_devices} == {"pcieport", "mlx5_core"}
