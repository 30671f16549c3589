"""The simulated kernel reacts to sysfs writes as Linux does: driver_override + unbind + drivers_probe,
explicit bind/new_id, /dev/vfio nodes that follow group viability, mdev create/remove, SR-IOV vGPU types,
sriov_numvfs; it validates writes (ENODEV, EBUSY, EINVAL, read-only, missing files) and fails on demand."""
from __future__ import annotations

import errno
import os
import shutil

import pytest

from nodeconsole.console.demo.generator import demo_spec, generate
from nodeconsole.console.demo.kernel import SimulatedKernel
from nodeconsole.console.kernel_writer import Kernel
from nodeconsole.console.root import Root

IDLE, IDLE_AUDIO = "0000:9a:00.0", "0000:9a:00.1"  # host GPU on nvidia, idle, own group
UNBOUND = "0000:ba:00.0"  # no driver, in the group shared with an NVMe and a NIC
VGPU = "0000:3b:00.0"  # mdev parent with 2 instances of nvidia-1103
FREE_VF = "0000:3a:00.6"  # MIG-backed vGPU VF with no type
NIC = "0000:9c:00.0"  # ConnectX-7, 2 VFs enabled, 16 total


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return generate(demo_spec(), tmp_path_factory.mktemp("pristine"))


@pytest.fixture
def k(pristine, tmp_path) -> SimulatedKernel:
    """A fresh copy of the demo host per test (copying keeps links as links)."""
    shutil.copytree(pristine.dest, tmp_path / "h", symlinks=True)
    return SimulatedKernel(tmp_path / "h" / "root")


def _vfio(k: SimulatedKernel) -> set[str]:
    return set(os.listdir(k.base / "dev/vfio")) - {"vfio"}


def _group(k: SimulatedKernel, addr: str) -> str:
    return k.root.link_name(f"sys/bus/pci/devices/{addr}/iommu_group")


def _to_vfio(k: SimulatedKernel, addr: str) -> None:
    k.write(f"/sys/bus/pci/devices/{addr}/driver_override", "vfio-pci\n")
    if k.driver_of(addr):
        k.write(f"/sys/bus/pci/devices/{addr}/driver/unbind", addr)
    k.write("/sys/bus/pci/drivers_probe", addr)


def test_passthrough_binding_and_its_undo(k):
    group = _group(k, IDLE)
    assert k.driver_of(IDLE) == "nvidia" and group not in _vfio(k)
    _to_vfio(k, IDLE)
    assert k.driver_of(IDLE) == "vfio-pci"
    assert not k.root.exists(f"sys/bus/pci/drivers/nvidia/{IDLE}")
    assert k.root.link_target(f"sys/bus/pci/drivers/vfio-pci/{IDLE}") == \
        k.root.link_target(f"sys/bus/pci/devices/{IDLE}")
    assert "DRIVER=vfio-pci" in k.root.read(f"sys/bus/pci/devices/{IDLE}/uevent")
    assert group not in _vfio(k)  # the audio function still sits on snd_hda_intel: not viable
    _to_vfio(k, IDLE_AUDIO)
    assert k.driver_of(IDLE_AUDIO) == "vfio-pci" and group in _vfio(k)
    # Undo: clear the override, unbind, probe: the default drivers come back, the node goes.
    for addr in (IDLE, IDLE_AUDIO):
        k.write(f"/sys/bus/pci/devices/{addr}/driver_override", "\n")
        assert k.root.read(f"sys/bus/pci/devices/{addr}/driver_override") == "(null)"
        k.write(f"/sys/bus/pci/devices/{addr}/driver/unbind", addr)
        k.write("/sys/bus/pci/drivers_probe", addr)
    assert (k.driver_of(IDLE), k.driver_of(IDLE_AUDIO)) == ("nvidia", "snd_hda_intel")
    assert group not in _vfio(k)
    assert [p for p, _t in k.writes][:3] == [f"/sys/bus/pci/devices/{IDLE}/driver_override",
                                              f"/sys/bus/pci/devices/{IDLE}/driver/unbind",
                                              "/sys/bus/pci/drivers_probe"]


def test_an_unbound_device_in_a_non_viable_group_gets_no_vfio_node(k):
    _to_vfio(k, UNBOUND)
    assert k.driver_of(UNBOUND) == "vfio-pci"
    assert _group(k, UNBOUND) not in _vfio(k)  # the NVMe and the NIC in its group are on host drivers


def test_probe_errors(k):
    with pytest.raises(OSError) as e:
        k.write("/sys/bus/pci/drivers_probe", "0000:ee:00.0")
    assert e.value.errno == errno.ENODEV
    k.write(f"/sys/bus/pci/devices/{IDLE}/driver_override", "vfio_pci")  # typo: no such driver
    k.write(f"/sys/bus/pci/devices/{IDLE}/driver/unbind", IDLE)
    with pytest.raises(OSError) as e:
        k.write("/sys/bus/pci/drivers_probe", IDLE)
    assert e.value.errno == errno.ENODEV and k.driver_of(IDLE) is None
    k.write(f"/sys/bus/pci/devices/{IDLE}/driver_override", "")
    k.write("/sys/bus/pci/drivers_probe", IDLE)  # default driver again
    assert k.driver_of(IDLE) == "nvidia"
    k.write("/sys/bus/pci/drivers_probe", IDLE)  # already bound: nothing happens
    assert k.driver_of(IDLE) == "nvidia"


def test_explicit_bind_unbind_and_new_id(k):
    with pytest.raises(OSError) as e:  # bound to nvidia, not vfio-pci
        k.write("/sys/bus/pci/drivers/vfio-pci/unbind", IDLE)
    assert e.value.errno == errno.ENODEV
    k.write("/sys/bus/pci/drivers/nvidia/unbind", IDLE)
    with pytest.raises(OSError) as e:  # vfio-pci has no id table: no match without override/new_id
        k.write("/sys/bus/pci/drivers/vfio-pci/bind", IDLE)
    assert e.value.errno == errno.ENODEV
    k.write("/sys/bus/pci/drivers/nvidia/bind", IDLE)
    with pytest.raises(OSError) as e:
        k.write("/sys/bus/pci/drivers/nvidia/bind", IDLE)
    assert e.value.errno == errno.EBUSY
    # new_id: vfio-pci claims every unbound device with that id (here the unbound H100).
    k.write("/sys/bus/pci/drivers/vfio-pci/new_id", "10de 2330")
    assert k.driver_of(UNBOUND) == "vfio-pci" and k.driver_of(IDLE) == "nvidia"
    with pytest.raises(OSError) as e:
        k.write("/sys/bus/pci/drivers/vfio-pci/new_id", "10de 2330")
    assert e.value.errno == errno.EEXIST
    k.write("/sys/bus/pci/drivers/vfio-pci/remove_id", "10de 2330")
    with pytest.raises(OSError) as e:
        k.write("/sys/bus/pci/drivers/vfio-pci/new_id", "nonsense")
    assert e.value.errno == errno.EINVAL


def test_write_validation(k):
    with pytest.raises(FileNotFoundError):
        k.write("/sys/bus/pci/devices/0000:ee:00.0/driver_override", "vfio-pci")
    with pytest.raises(FileNotFoundError):
        k.write(f"/sys/bus/pci/devices/{IDLE}/no_such_attribute", "1")
    assert not k.root.exists(f"sys/bus/pci/devices/{IDLE}/no_such_attribute")
    with pytest.raises(PermissionError):
        k.write(f"/sys/bus/pci/devices/{IDLE}/vendor", "0x8086")
    assert k.root.read(f"sys/bus/pci/devices/{IDLE}/vendor") == "0x10de"
    with pytest.raises(IsADirectoryError):
        k.write(f"/sys/bus/pci/devices/{IDLE}", "x")
    with pytest.raises(OSError) as e:
        k.write(f"/sys/bus/pci/devices/{IDLE}/reset", "2")
    assert e.value.errno == errno.EINVAL
    k.write(f"/sys/bus/pci/devices/{IDLE}/reset", "1")
    assert [r.error is None for r in k.log] == [False] * 5 + [True]


def test_mdev_create_and_remove(k):
    types = f"sys/class/mdev_bus/{VGPU}/mdev_supported_types"
    avail = lambda t: k.root.read_int(f"{types}/{t}/available_instances")  # noqa: E731
    assert avail("nvidia-1103") == 6 and avail("nvidia-1100") == 0  # homogeneous: 2 of 8 in use
    before = set(k.root.listdir("sys/kernel/iommu_groups"))
    uuid = "6b1c7e4e-1111-4222-8333-444455556666"
    k.write(f"/{types}/nvidia-1103/create", uuid.upper())
    assert avail("nvidia-1103") == 5
    mdev = k.root.link_target(f"sys/bus/mdev/devices/{uuid}")
    assert mdev == k.root.link_target(f"sys/bus/pci/devices/{VGPU}") + "/" + uuid
    assert k.root.link_name(f"{mdev}/mdev_type") == "nvidia-1103"
    assert k.root.exists(f"{types}/nvidia-1103/devices/{uuid}")
    (group,) = set(k.root.listdir("sys/kernel/iommu_groups")) - before
    assert group in _vfio(k) and k.root.listdir(f"sys/kernel/iommu_groups/{group}/devices") == [uuid]
    for bad, code in (("not-a-uuid", errno.EINVAL), (uuid, errno.EEXIST)):
        with pytest.raises(OSError) as e:
            k.write(f"/{types}/nvidia-1103/create", bad)
        assert e.value.errno == code
    with pytest.raises(OSError) as e:  # another type while one is in use: nothing left
        k.write(f"/{types}/nvidia-1100/create", "6b1c7e4e-1111-4222-8333-444455550000")
    assert e.value.errno == errno.EUSERS
    k.write(f"/sys/bus/mdev/devices/{uuid}/remove", "1")
    assert avail("nvidia-1103") == 6 and not k.root.exists(f"sys/bus/mdev/devices/{uuid}")
    assert group not in _vfio(k) and not k.root.exists(f"sys/kernel/iommu_groups/{group}")


def test_nvidia_keeps_a_gpu_with_mdevs_then_lets_go(k):
    with pytest.raises(OSError) as e:
        k.write(f"/sys/bus/pci/devices/{VGPU}/driver/unbind", VGPU)
    assert e.value.errno == errno.EBUSY and k.driver_of(VGPU) == "nvidia"
    for uuid in k.root.listdir("sys/bus/mdev/devices"):
        k.write(f"/sys/bus/mdev/devices/{uuid}/remove", "1")
    types = f"sys/bus/pci/devices/{VGPU}/mdev_supported_types"
    assert all(k.root.read_int(f"{types}/{t}/available_instances") > 0 for t in k.root.listdir(types))
    k.write(f"/sys/bus/pci/devices/{VGPU}/driver/unbind", VGPU)
    assert not k.root.exists(types) and k.root.listdir("sys/class/mdev_bus") == []
    k.write("/sys/bus/pci/drivers_probe", VGPU)
    assert k.driver_of(VGPU) == "nvidia" and k.root.listdir("sys/class/mdev_bus") == [VGPU]
    assert k.root.read_int(f"{types}/nvidia-1107/available_instances") == 1


def test_sriov_vgpu_type(k):
    f = f"/sys/bus/pci/devices/{FREE_VF}/nvidia/current_vgpu_type"
    with pytest.raises(OSError) as e:
        k.write(f, "1100")  # a time-sliced type is not creatable on a MIG-backed VF
    assert e.value.errno == errno.EINVAL
    k.write(f, "1110")
    assert k.root.read_int(f) == 1110
    assert "1110" not in k.root.read(f"sys/bus/pci/devices/{FREE_VF}/nvidia/creatable_vgpu_types")
    with pytest.raises(OSError) as e:
        k.write(f, "1111")
    assert e.value.errno == errno.EBUSY
    with pytest.raises(OSError) as e:  # nvidia will not let go of a VF holding a vGPU
        k.write(f"/sys/bus/pci/devices/{FREE_VF}/driver/unbind", FREE_VF)
    assert e.value.errno == errno.EBUSY
    k.write(f, "0")
    assert k.root.read_int(f) == 0
    assert "1110  : NVIDIA H100XM-1-10C" in k.root.read(f"sys/bus/pci/devices/{FREE_VF}/nvidia/creatable_vgpu_types")


def test_sriov_numvfs(k):
    n = f"/sys/bus/pci/devices/{NIC}/sriov_numvfs"
    for value, code in (("4", errno.EBUSY), ("17", errno.ERANGE), ("x", errno.EINVAL)):
        with pytest.raises(OSError) as e:
            k.write(n, value)
        assert e.value.errno == code
    k.write(n, "0")
    assert not k.root.exists("sys/bus/pci/devices/0000:9c:00.1") and k.root.read_int(n) == 0
    k.write(n, "3")
    vfs = [k.root.link_name(f"sys/bus/pci/devices/{NIC}/virtfn{i}") for i in range(3)]
    assert vfs == ["0000:9c:00.1", "0000:9c:00.2", "0000:9c:00.3"]
    for vf in vfs:
        d = k.root.link_target(f"sys/bus/pci/devices/{vf}")
        assert d.rsplit("/", 1)[0] == k.root.link_target(f"sys/bus/pci/devices/{NIC}").rsplit("/", 1)[0]
        assert k.driver_of(vf) == "mlx5_core" and k.root.read(f"{d}/device") == "0x101e"
        assert k.root.link_target(f"{d}/physfn") == k.root.link_target(f"sys/bus/pci/devices/{NIC}")
        assert k.root.listdir(f"sys/kernel/iommu_groups/{_group(k, vf)}/devices") == [vf]


def test_load_module_binds_what_it_matches(k):
    k.write(f"/sys/bus/pci/devices/{UNBOUND}/driver_override", "vfio-pci")
    shutil.rmtree(k.base / "sys/bus/pci/drivers/vfio-pci")  # as if the module were not loaded yet
    with pytest.raises(OSError) as e:
        k.write("/sys/bus/pci/drivers_probe", UNBOUND)
    assert e.value.errno == errno.ENODEV
    k.load_module("vfio-pci")
    assert k.root.isdir("sys/bus/pci/drivers/vfio-pci") and k.driver_of(UNBOUND) == "vfio-pci"
    assert k.driver_of(IDLE) == "nvidia"  # devices on other drivers are left alone
    with pytest.raises(OSError):
        k.load_module("../evil")


def test_vhost_net_makes_its_device_node_and_takes_it_away(k):
    assert k.root.exists("dev/vhost-net") and k.root.exists("dev/net/tun")  # the preset: set up, tun built in
    k.unload_module("vhost_net")
    assert not k.root.exists("dev/vhost-net") and not k.root.isdir("sys/module/vhost_net")
    assert k.root.isdir("sys/module/vhost")  # what it pulled in stays, as with modprobe -r of one module
    k.load_module("vhost_net")
    assert k.root.exists("dev/vhost-net") and k.root.isdir("sys/module/vhost_net")
    assert not k.root.isdir("sys/bus/pci/drivers/vhost_net")  # no PCI driver


def test_hugepages(k):
    p = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
    k.write(p, "512")
    assert k.root.read_int(p) == 512
    assert k.root.read_int("sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages") == 512
    with pytest.raises(OSError):
        k.write(p, "-1")


def test_failure_injection(k):
    rule = k.fail_on("drivers_probe", after=1)
    _to_vfio(k, IDLE)  # the first probe passes
    k.write(f"/sys/bus/pci/devices/{IDLE_AUDIO}/driver_override", "vfio-pci")
    k.write(f"/sys/bus/pci/devices/{IDLE_AUDIO}/driver/unbind", IDLE_AUDIO)
    with pytest.raises(OSError) as e:
        k.write("/sys/bus/pci/drivers_probe", IDLE_AUDIO)
    assert e.value.errno == errno.EIO and k.driver_of(IDLE_AUDIO) is None  # nothing applied
    assert rule.fired == 1 and k.log[-1].error is not None
    k.write("/sys/bus/pci/drivers_probe", IDLE_AUDIO)  # times=1: the rule is spent
    assert k.driver_of(IDLE_AUDIO) == "vfio-pci"
    # A predicate and a custom error; matching through the resolved path (driver/unbind → drivers/X/unbind).
    k.fail_on(lambda path, text: text.strip() == IDLE, PermissionError(errno.EPERM, "nope"), times=None)
    for _ in range(2):
        with pytest.raises(PermissionError):
            k.write(f"/sys/bus/pci/devices/{IDLE}/driver/unbind", IDLE)
    k.clear_failures()
    k.fail_on("drivers/vfio-pci/unbind")
    with pytest.raises(OSError):
        k.write(f"/sys/bus/pci/devices/{IDLE}/driver/unbind", IDLE)
    assert k.driver_of(IDLE) == "vfio-pci"


def test_real_kernel_writes_existing_files_only(tmp_path):
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys/attr").write_text("old-longer-value\n")
    kernel = Kernel(Root(tmp_path))
    kernel.write("/sys/attr", "new\n")
    assert kernel.read("sys/attr") == "new"
    with pytest.raises(FileNotFoundError):
        kernel.write("sys/missing", "1")
    assert not (tmp_path / "sys/missing").exists()
