"""The merge of source data into a snapshot: GPU union keyed by PCI address, ownership, hostdev
mapping, problems — and a collector that keeps going when a source raises."""
from __future__ import annotations

from dataclasses import replace

from nodeconsole.console.assembly import assemble
from nodeconsole.console.collector import Collector
from nodeconsole.console.model import (
    NA,
    Cpu,
    Hostdev,
    HostInfo,
    Iommu,
    IommuGroup,
    Load,
    Mig,
    MigInstance,
    NumaNode,
    PciDevice,
    PciLink,
    Sources,
    VcpuPin,
    VgpuInstance,
    Vm,
)
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams
from nodeconsole.console.sources.types import LibvirtData, NvmlData, NvmlGpu, SysfsData


def _gpu_dev(addr, driver, node, group, width=16):
    return PciDevice(address=addr, vendor_id=0x10DE, device_id=0x2330, class_id=0x030200, driver=driver,
                     numa_node=node, iommu_group=group, parent=None,
                     link=PciLink("32.0 GT/s PCIe", width, "32.0 GT/s PCIe", 16))


def _sysfs():
    cpus = tuple(Cpu(id=i, package=i // 4, core=i % 4, numa_node=i // 4, online=True) for i in range(8))
    nodes = (NumaNode(0, (0, 1, 2, 3), 1 << 20), NumaNode(1, (4, 5, 6, 7), 1 << 20))
    devs = (
        _gpu_dev("0000:17:00.0", "nvidia", 0, 10),
        PciDevice("0000:17:00.1", 0x10DE, 0x22A3, 0x040300, "vfio-pci", 0, 10, None),  # audio fn
        _gpu_dev("0000:31:00.0", "vfio-pci", 0, 11),
        _gpu_dev("0000:4b:00.0", "nvidia", 1, 12, width=8),
        PciDevice("0000:4c:00.0", 0x144D, 0xA824, 0x010802, "nvme", 1, 12, None,
                  class_name="Non-Volatile memory controller"),
        _gpu_dev("0000:ca:00.0", None, 1, 13),
        _gpu_dev("0000:cb:00.0", "nvidia", 1, 14),
    )
    groups = (IommuGroup(10, ("0000:17:00.0", "0000:17:00.1"), True),
              IommuGroup(11, ("0000:31:00.0",), True),
              IommuGroup(12, ("0000:4b:00.0", "0000:4c:00.0"), False,
                         "shares group 12 with 0000:4c:00.0 Non-Volatile memory controller bound to nvme"),
              IommuGroup(13, ("0000:ca:00.0",), True), IommuGroup(14, ("0000:cb:00.0",), True))
    inst = (VgpuInstance("aaaaaaaa-0000-0000-0000-000000000001", "NVIDIA H100-4C", "0000:cb:00.0"),)
    return SysfsData(HostInfo("h", "6.1", "intel_iommu=on"), cpus, nodes, devs, Iommu(True, groups),
                     vgpu_instances=inst)


def _nvml():
    mig = Mig("enabled", "enabled", (MigInstance("3g.40gb", 0, 4, "MIG-1", vm="vm-uuid-2"),), 8)
    return NvmlData("550.90", (
        NvmlGpu("0000:17:00.0", 0, "NVIDIA H100", "GPU-a", utilization_gpu=40, power_w=NA),
        NvmlGpu("0000:4b:00.0", 1, "NVIDIA H100", "GPU-b", mig=mig),
        NvmlGpu("0000:cb:00.0", 2, "NVIDIA H100", "GPU-c"),
    ))


def _libvirt():
    return LibvirtData((
        Vm("train", "running", 4, pins=tuple(VcpuPin(i, (4 + i,)) for i in range(4)),
           hostdevs=(Hostdev("pci", "0000:31:00.0"),), uuid="vm-uuid-1"),
        Vm("infer", "running", 2, uuid="vm-uuid-2"),
        Vm("desk", "shut off", 2, hostdevs=(Hostdev("mdev", uuid="aaaaaaaa-0000-0000-0000-000000000001"),),
           uuid="vm-uuid-3"),
    ))


def test_assemble_ownership_and_union():
    snap = assemble(_sysfs(), _nvml(), _libvirt(), Load(), Sources())
    kinds = {g.address: (g.owner.kind, g.owner.vms) for g in snap.gpus}
    assert kinds == {
        "0000:17:00.0": ("host", ()),
        "0000:31:00.0": ("vfio", ("train",)),
        "0000:4b:00.0": ("mig", ("infer",)),  # MIG instance's VM uuid mapped to its name
        "0000:ca:00.0": ("unbound", ()),
        "0000:cb:00.0": ("vgpu", ("desk",)),
    }
    # the audio function is not a GPU; indices follow PCI order
    assert [g.index for g in snap.gpus] == [0, 1, 2, 3, 4]
    vfio = snap.gpu("0000:31:00.0")
    assert vfio.nvml_index is None and vfio.utilization_gpu is None and vfio.numa_node == 0
    assert snap.gpu("0000:17:00.0").power_w == NA  # NOT_SUPPORTED stays N/A
    assert snap.vm("train").hostdevs[0].gpu == "0000:31:00.0"
    assert snap.vm("desk").hostdevs[0].gpu == "0000:cb:00.0"


def test_problems_name_what_is_wrong():
    snap = assemble(_sysfs(), _nvml(), _libvirt(), Load(), Sources())
    msgs = [p.message for p in snap.problems]
    assert any("x8 of x16" in m for m in msgs)
    assert any("cannot be passed through" in m and "nvme" in m for m in msgs)
    assert any(m.startswith("VM train: vCPUs on node(s) 1") and "GPU on node(s) 0" in m for m in msgs)


def test_json_shape_uses_numbers_and_lists():
    snap = assemble(_sysfs(), _nvml(), _libvirt(), Load(), Sources())
    d = snap.to_dict()
    assert d["schema"] == 1
    for key in ("host", "cpus", "numa_nodes", "pci_devices", "iommu", "gpus", "vms", "sources"):
        assert key in d
    assert d["numa_nodes"][0]["cpus"] == [0, 1, 2, 3]
    assert d["iommu"]["groups"][2]["viable"] is False
    g = d["gpus"][2]
    assert g["owner"] == {"kind": "mig", "vms": ["infer"]}
    assert g["mig"]["instances"][0] == {**g["mig"]["instances"][0], "profile": "3g.40gb", "start": 0, "size": 4}
    assert d["vms"][0]["pins"][0] == {"vcpu": 0, "cpus": [4]}
    assert set(d["sources"]) == {"sysfs", "nvml", "libvirt", "psutil"}


def test_every_source_failing_still_gives_a_snapshot(tmp_path):
    class Boom(Collector):
        def _read_sysfs(self):
            raise PermissionError(13, "Permission denied", "/sys/bus/pci/devices")

        def _read_nvml(self):
            raise RuntimeError("GPU is lost")

        def _read_libvirt(self):
            raise ConnectionError("connection closed")

        def _read_load(self):
            raise OSError("psutil broke")

    snap = Boom(Seams(root=Root(tmp_path), libvirt_uri="test:///default")).collect()
    assert snap.sources.sysfs.startswith("unavailable: permission denied")
    assert snap.sources.nvml == "unavailable: RuntimeError: GPU is lost"
    assert snap.sources.libvirt.startswith("unavailable: ConnectionError")
    assert snap.sources.psutil.startswith("unavailable:")
    assert snap.gpus == () and snap.vms == ()
    assert {p.subject for p in snap.problems} >= {"sysfs", "nvml", "libvirt", "psutil"}


def test_a_pin_to_every_cpu_is_no_pin():
    """libvirt writes the full CPU map when a pin is removed live; that is not cross-NUMA."""
    libvirt = _libvirt()
    everything = tuple(range(8))
    vms = (replace(libvirt.vms[0], pins=tuple(VcpuPin(i, everything) for i in range(4))),) + libvirt.vms[1:]
    snap = assemble(_sysfs(), _nvml(), LibvirtData(vms), Load(), Sources())
    from nodeconsole.console.checks import vm_alignment

    assert vm_alignment(snap, snap.vm("train")) == "unpinned"
    assert not any(p.subject == "train" and "node(s)" in p.message for p in snap.problems)


def test_with_is_dataclasses_replace_without_init(state_ro) -> None:
    """The collector's fast replace gives the same value (equal, same hash, same fields) as
    dataclasses.replace on the model's frozen dataclasses."""
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml
    from nodeconsole.console.demo.state import ensure_demo
    from nodeconsole.console.gpu_merge import with_fields as _with

    host = ensure_demo(state_ro)
    root = Root(host.root)
    lib = SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True)
    snap = Collector(Seams(root=root, libvirt_uri=host.libvirt_uri, nvml_lib=lib)).collect()
    vm = snap.vms[0]
    a, b = _with(vm, steal_percent=3.5), replace(vm, steal_percent=3.5)
    assert a == b and hash(a) == hash(b) and a is not vm and vm.steal_percent != 3.5
    assert _with(snap.gpus[0], name="x") == replace(snap.gpus[0], name="x")


def test_sysfs_is_read_again_when_a_sign_moves(tmp_path) -> None:
    """Between whole sysfs reads (every 30 s) the collector checks cheap signs every sysfs_ttl: a
    driver_override set by someone else, a function removed, show in the next poll; without a sign the
    cached tree is kept."""
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml
    from nodeconsole.console.demo.state import ensure_demo

    host = ensure_demo(tmp_path / "demo")
    root = Root(host.root)
    lib = SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True)
    c = Collector(Seams(root=root, libvirt_uri=host.libvirt_uri, nvml_lib=lib), sysfs_ttl=0.0, sysfs_full=1e9)
    first = c.collect()
    gpu = next(d for d in first.pci_devices if d.address.endswith(":ba:00.0"))
    assert gpu.driver_override in (None, "")
    assert c.collect().pci_devices is first.pci_devices  # nothing moved: the cached tree
    override = root.p(f"sys/bus/pci/devices/{gpu.address}/driver_override")
    override.write_text("vfio-pci\n")
    again = c.collect()
    assert next(d for d in again.pci_devices if d.address == gpu.address).driver_override == "vfio-pci"


def test_static_facts_are_read_again_after_a_reboot(tmp_path) -> None:
    """The cached sysfs facts (command line, IOMMU, modules) belong to one boot: a console left open
    across a reboot reads them again at its next poll, however long before the cache would expire."""
    from nodeconsole.console.demo.state import ensure_demo

    host = ensure_demo(tmp_path / "demo")
    root = Root(host.root)
    c = Collector(Seams(root=root, libvirt_uri=None), sysfs_ttl=1e9, sysfs_full=1e9, sysfs_refresh=1e9)
    first = c.collect(partial=True)
    assert first.iommu.enabled and "intel_iommu=on" in first.host.cmdline
    cmdline = root.p("proc/cmdline")
    cmdline.write_text(cmdline.read_text().replace("intel_iommu=on", "intel_iommu=off"))
    for group in root.listdir("sys/kernel/iommu_groups"):  # the next boot has no IOMMU
        root.p(f"sys/kernel/iommu_groups/{group}").rename(tmp_path / f"group{group}")
    for unit in root.listdir("sys/class/iommu"):
        root.p(f"sys/class/iommu/{unit}").unlink()
    same_boot = c.collect(partial=True)
    assert same_boot.host is first.host and same_boot.iommu is first.iommu  # cached: nothing says it moved
    root.p("proc/sys/kernel/random/boot_id").write_text("00000000-0000-4000-8000-000000000001\n")
    rebooted = c.collect(partial=True)
    assert "intel_iommu=off" in rebooted.host.cmdline and not rebooted.iommu.enabled
    assert c.collect(partial=True).host is rebooted.host  # and cached again for the new boot
