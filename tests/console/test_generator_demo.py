"""The demo host has what the console is meant to show: 8 H100 SXM5 in every ownership state, a non-viable
IOMMU group, a downtrained link, about a dozen VMs pinned well, badly and not at all, and a free pair of
H100 PCIe cards on NVLink bridges with free VFs beside them for a shut-off VM without devices. Read back
from the generated files (sysfs tree, nvml.json, libvirt node file), not from the spec."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from nodeconsole.console.cpulist import parse_cpulist
from nodeconsole.console.demo.generator import demo_spec, generate
from nodeconsole.console.root import Root

VFIO_OK = (None, "vfio-pci", "pci-stub")


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    return generate(demo_spec(), tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def root(host) -> Root:
    return Root(host.root)


@pytest.fixture(scope="module")
def gpus(root) -> dict[str, str | None]:
    """GPU physical functions → driver."""
    out = {}
    for a in root.listdir("sys/bus/pci/devices"):
        d = f"sys/bus/pci/devices/{a}"
        if root.read(f"{d}/vendor") == "0x10de" and root.read(f"{d}/class") == "0x030200" \
                and not root.exists(f"{d}/physfn"):
            out[a] = root.link_name(f"{d}/driver")
    return out


@pytest.fixture(scope="module")
def nvml(host) -> dict:
    return json.loads(host.nvml_state.read_text())


@pytest.fixture(scope="module")
def domains(host) -> dict[str, ET.Element]:
    x = ET.parse(host.libvirt_xml).getroot()
    return {d.findtext("name"): d for d in x.findall("domain")}


def _node_of_cpu(root: Root) -> dict[int, int]:
    out = {}
    for n in (0, 1):
        for c in parse_cpulist(root.read(f"sys/devices/system/node/node{n}/cpulist")):
            out[c] = n
    return out


def _hostdev_addrs(dom: ET.Element) -> list[str]:
    out = []
    for hd in dom.iter("hostdev"):
        a = hd.find("source/address")
        if hd.get("type") == "pci":
            out.append(f"{int(a.get('domain'), 16):04x}:{int(a.get('bus'), 16):02x}:"
                       f"{int(a.get('slot'), 16):02x}.{int(a.get('function'), 16)}")
        else:
            out.append(a.get("uuid"))
    return out


PAIR = ("0000:da:00.0", "0000:db:00.0")  # the H100 PCIe cards on NVLink bridges
PAIR_VFS = ("0000:dc:00.1", "0000:dc:00.2")


def test_eight_h100_in_every_ownership_state(root, gpus, nvml):
    assert len(gpus) == 10
    assert sorted(gpus)[8:] == list(PAIR)  # after the 8 SXM5: GPU indices 8 and 9, the others unchanged
    gpus = {a: d for a, d in gpus.items() if a not in PAIR}
    drivers = sorted(str(d) for d in gpus.values())
    assert drivers.count("nvidia") == 5  # 2 host (busy, idle) + MIG + vGPU + the downtrained one
    assert drivers.count("vfio-pci") == 2 and drivers.count("None") == 1
    by_addr = {g["address"]: g for g in nvml["gpus"]}
    assert set(by_addr) == set(gpus) | set(PAIR)  # nvml.json lists them all; the library hides non-nvidia ones
    assert {by_addr[a]["name"] for a in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {by_addr[a]["model"] for a in gpus} == {"H100-80GB-HBM3"}
    mig = [g for g in nvml["gpus"] if g["mig"]["current"] == 1]
    assert len(mig) == 1 and gpus[mig[0]["address"]] == "nvidia"
    layout = sorted((i["profile_id"], i["start"], i["size"]) for i in mig[0]["mig"]["instances"])
    assert layout == [(9, 0, 4), (14, 4, 2), (19, 6, 1)]  # 3g.40gb@0, 2g.20gb@4, 1g.10gb@6
    mdev_parents = root.listdir("sys/class/mdev_bus")
    assert len(mdev_parents) == 1 and gpus[mdev_parents[0]] == "nvidia"
    assert len(root.listdir("sys/bus/mdev/devices")) == 2
    host_gpus = [a for a, d in gpus.items() if d == "nvidia" and a not in mdev_parents
                 and a != mig[0]["address"]]
    busy = [a for a in host_gpus if by_addr[a]["processes"]]
    idle = [a for a in host_gpus if not by_addr[a]["processes"]]
    assert busy and len(idle) == 1


def _group_of(root: Root, addr: str) -> str:
    return root.link_name(f"sys/bus/pci/devices/{addr}/iommu_group")


def test_a_free_nvlink_pair_with_free_vfs_for_a_training_vm(root, gpus, nvml, domains):
    by_addr = {g["address"]: g for g in nvml["gpus"]}
    held = {a for d in domains.values() for a in _hostdev_addrs(d)}
    for a, peer in (PAIR, PAIR[::-1]):
        g = by_addr[a]
        assert gpus[a] == "nvidia" and (g["name"], g["model"]) == ("NVIDIA H100 PCIe", "H100-PCIe")
        assert root.read(f"sys/bus/pci/devices/{a}/device") == "0x2331" and g["pci_device_id"] == 0x233110DE
        assert not g["processes"] and not g["mig"]["current"] and not g["vgpu"]["active"]
        assert not g["vgpu"]["supported_type_ids"] and not root.exists(f"sys/bus/pci/devices/{a}/mdev_supported_types")
        assert not {a, a[:-1] + "1"} & held  # in no VM's definition, nor its audio function
        # its own group: the GPU and its audio function only
        assert sorted(root.listdir(f"sys/kernel/iommu_groups/{_group_of(root, a)}/devices")) == [a, a[:-1] + "1"]
        assert root.read_int(f"sys/bus/pci/devices/{a}/numa_node") == 1
        nv = g["nvlink"]  # the bridges: every link to the other card, a GPU, no NVSwitch fabric
        assert (nv["remote_type"], nv["remotes"], nv["down"]) == ("gpu", [peer] * 12, [])
        assert nv["remote_device_id"] == 0x233110DE and "fabric" not in g
    sxm = [g for g in nvml["gpus"] if g["address"] not in PAIR]
    assert {g["nvlink"]["remote_type"] for g in sxm} == {"switch"}
    # the ConnectX-7 on the pair's switch: 2 VFs on mlx5_core, each in its own group, in no VM
    pf = "0000:dc:00.0"
    assert root.read(f"sys/bus/pci/devices/{pf}/device") == "0x1021"
    assert root.read_int(f"sys/bus/pci/devices/{pf}/sriov_numvfs") == 2
    for vf in PAIR_VFS:
        assert root.link_name(f"sys/bus/pci/devices/{vf}/physfn") == pf and vf not in held
        assert root.link_name(f"sys/bus/pci/devices/{vf}/driver") == "mlx5_core"
        assert root.listdir(f"sys/kernel/iommu_groups/{_group_of(root, vf)}/devices") == [vf]
        assert root.listdir(f"sys/bus/pci/devices/{vf}/infiniband")
    # the same switch: the GPUs' and the NIC's downstream ports share one upstream port
    usp = {str(root.resolve(f"sys/bus/pci/devices/{a}")).split("/")[-3] for a in PAIR + (pf,)}
    assert usp == {"0000:d8:00.0"}


def test_the_training_vm_is_shut_off_without_devices_and_node1_can_back_it(root, domains):
    d = domains["train-d"]
    assert d.findtext("{http://libvirt.org/schemas/domain/test/1.0}runstate") == "5"  # shut off
    assert not list(d.iter("hostdev")) and not list(d.iter("vcpupin")) and d.find("numatune") is None
    assert d.findtext("vcpu") == "8" and int(d.findtext("memory")) == 16 * 1024 * 1024
    assert domains["build-1"].findtext("{http://libvirt.org/schemas/domain/test/1.0}runstate") == "5"
    # memory twice the pair's VRAM fits on node 1: its free 1 GiB pages plus its free memory
    node = "sys/devices/system/node/node1"
    free_pages = root.read_int(f"{node}/hugepages/hugepages-1048576kB/free_hugepages")
    mem_free_kib = next(int(ln.split()[3]) for ln in root.read(f"{node}/meminfo").splitlines() if "MemFree:" in ln)
    want_kib = 2 * 2 * 81559 * 1024
    assert free_pages * 1024 * 1024 + mem_free_kib >= want_kib


def test_vgpu_instances_belong_to_vms(root, nvml, domains):
    held = {u: name for name, d in domains.items() for u in _hostdev_addrs(d)}
    mdevs = root.listdir("sys/bus/mdev/devices")
    assert all(u in held for u in mdevs)
    # MIG-backed vGPU on SR-IOV VFs: the VFs carry a type and are given to VMs as PCI hostdevs.
    vfs = [a for a in root.listdir("sys/bus/pci/devices")
           if (root.read_int(f"sys/bus/pci/devices/{a}/nvidia/current_vgpu_type") or 0) != 0]
    assert len(vfs) == 2 and all(v in held for v in vfs)
    active = [v for g in nvml["gpus"] for v in g["vgpu"]["active"]]
    live = {n for n, d in domains.items() if d.findtext("{http://libvirt.org/schemas/domain/test/1.0}"
                                                         "runstate") in ("1", "3")}
    assert {v["vm_id"] for v in active} <= live
    assert any(v["gi_id"] is not None for v in active) and any(v["mdev_uuid"] for v in active)
    assert set(str(v["type_id"]) for v in active) <= set(nvml["vgpu_types"])


def test_one_gpu_group_is_not_viable(root, gpus):
    bad = []
    for g in root.listdir("sys/kernel/iommu_groups"):
        members = root.listdir(f"sys/kernel/iommu_groups/{g}/devices")
        if not set(members) & set(gpus):
            continue
        blockers = [m for m in members
                    if root.read(f"sys/kernel/iommu_groups/{g}/devices/{m}/class") != "0x060400"
                    and root.link_name(f"sys/kernel/iommu_groups/{g}/devices/{m}/driver") not in VFIO_OK
                    and m.rsplit(".", 1)[0] + ".0" not in gpus]  # not a GPU or its companion
        if blockers:
            bad.append((g, blockers, [m for m in members if m in gpus]))
    assert len(bad) == 1
    _g, blockers, its_gpus = bad[0]
    drivers = {root.link_name(f"sys/bus/pci/devices/{m}/driver") for m in blockers}
    assert drivers == {"nvme", "mlx5_core"}
    assert None in {gpus[a] for a in its_gpus}  # the unbound GPU cannot be passed through


def test_downtrained_link_and_idle_speed(root, gpus):
    widths = {a: (root.read_int(f"sys/bus/pci/devices/{a}/current_link_width"),
                  root.read_int(f"sys/bus/pci/devices/{a}/max_link_width")) for a in gpus}
    assert [w for w in widths.values() if w[0] < w[1]] == [(8, 16)]
    slow = [a for a in gpus if root.read(f"sys/bus/pci/devices/{a}/current_link_speed") == "2.5 GT/s PCIe"]
    assert len(slow) == 1 and widths[slow[0]] == (16, 16)  # idle GPU: speed down, width full


def test_vms_cover_every_state_and_pinning(root, gpus, domains):
    assert 10 <= len(domains) <= 14
    ns = "{http://libvirt.org/schemas/domain/test/1.0}runstate"
    assert {d.findtext(ns) for d in domains.values()} == {"1", "3", "5"}
    node = _node_of_cpu(root)
    pinned_same, pinned_across, unpinned = [], [], []
    for name, d in domains.items():
        cpus = [c for p in d.iter("vcpupin") for c in parse_cpulist(p.get("cpuset"))]
        if not cpus:
            unpinned.append(name)
            continue
        nodes = {node[c] for c in cpus}
        gpu_nodes = {root.read_int(f"sys/bus/pci/devices/{a}/numa_node") for a in _hostdev_addrs(d) if a in gpus}
        if gpu_nodes and nodes == gpu_nodes:
            pinned_same.append(name)
        elif gpu_nodes or len(nodes) > 1:
            pinned_across.append(name)
    assert pinned_same and pinned_across and unpinned
    nic_vf_vms = [n for n, d in domains.items() for a in _hostdev_addrs(d)
                  if root.exists(f"sys/bus/pci/devices/{a}/physfn")
                  and root.link_name(f"sys/bus/pci/devices/{a}/physfn/driver") == "mlx5_core"]
    # net-fw's VF, the training VMs' VFs beside their GPUs, train-c's across the sockets
    assert sorted(nic_vf_vms) == ["net-fw", "train-a", "train-b", "train-c"]
    for name in nic_vf_vms:  # the running VMs' VFs are on vfio-pci; shut-off train-c's waits on the host driver
        vf = [a for a in _hostdev_addrs(domains[name]) if root.exists(f"sys/bus/pci/devices/{a}/physfn")][0]
        want = "mlx5_core" if name == "train-c" else "vfio-pci"
        assert root.link_name(f"sys/bus/pci/devices/{vf}/driver") == want


def test_platform_devices_and_iommu(root):
    vga = [a for a in root.listdir("sys/bus/pci/devices")
           if root.read(f"sys/bus/pci/devices/{a}/boot_vga") == "1"]
    assert len(vga) == 1 and root.link_name(f"sys/bus/pci/devices/{vga[0]}/driver") == "ast"
    drivers = {root.link_name(f"sys/bus/pci/devices/{a}/driver") for a in root.listdir("sys/bus/pci/devices")}
    assert {"xhci_hcd", "ahci", "snd_hda_intel", "nvme", "mlx5_core", "pcieport"} <= drivers
    nics = [a for a in root.listdir("sys/bus/pci/devices") if root.read(f"sys/bus/pci/devices/{a}/device") == "0x1021"]
    assert len(nics) == 5 and all(root.read_int(f"sys/bus/pci/devices/{a}/sriov_totalvfs") for a in nics)
    assert sum(root.read_int(f"sys/bus/pci/devices/{a}/sriov_numvfs") for a in nics) > 0
    cmdline = root.read("proc/cmdline").split()
    assert "intel_iommu=on" in cmdline and "iommu=pt" in cmdline
    assert root.listdir("sys/class/iommu")
    # /dev/vfio holds exactly the groups a VM can open: both vfio GPUs, the 3 NIC VFs on vfio-pci and the
    # 2 mdevs.
    assert len([n for n in root.listdir("dev/vfio") if n != "vfio"]) == 7
