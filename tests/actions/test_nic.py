"""NICs on the demo host: `nic list`, `nic vfs` (with the simulated kernel's VFs), `nic passthrough`,
`passthrough --with-nic` with undo and release, the NCCL topology file and environment of a VM, the
Overview's NIC problems and the Topology screen's NIC rows. One demo host for the module: every test
that changes it puts it back (and checks that it did)."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.collector import Collector
from nodeconsole.console.seams import demo_host

PF0, PF1, PF2 = "0000:1a:00.0", "0000:3c:00.0", "0000:9c:00.0"  # NIC0 (4 VFs), NIC1 (none), NIC2 (2 VFs)
GPU4, FREE_VF2 = "0000:9a:00.0", "0000:9c:00.2"  # the idle GPU and the free VF on its switch


@pytest.fixture(scope="module")
def _demo(tmp_path_factory) -> Path:
    from nodeconsole.console.demo.state import ensure_demo

    d = tmp_path_factory.mktemp("nic") / "demo"
    ensure_demo(d)
    return d


@pytest.fixture
def demo(_demo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(_demo))
    return _demo


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([*argv, "--demo"])
    out, err = capsys.readouterr()
    return rc, out, err


def _snap():
    return Collector(demo_host()).collect()


def _tree(demo: Path) -> dict[str, str]:
    """What the kernel side of the demo holds: every entry below the PCI, IOMMU, class, /dev/vfio and udev
    trees with its link target or content, and the simulator's notes."""
    root = demo / "root"
    out = {}
    for top in ("sys/devices", "sys/bus/pci", "sys/kernel/iommu_groups", "sys/class", "dev/vfio", "etc/udev", ".sim"):
        for base, dirs, files in os.walk(root / top):
            if top == "sys/devices" and "/system" in base:
                continue
            for name in dirs + files:
                p = os.path.join(base, name)
                rel = os.path.relpath(p, root)
                if os.path.islink(p):
                    out[rel] = "-> " + os.readlink(p)
                elif os.path.isfile(p):
                    out[rel] = Path(p).read_bytes().decode("utf-8", "replace")
                else:
                    out[rel] = "dir"
    return out


# -- nic list -----------------------------------------------------------------------------------------

def test_nic_list_json_fields(demo, capsys):
    rc, out, _ = _cli(capsys, "nic", "list", "--json")
    assert rc == 0
    nics = {n["address"]: n for n in json.loads(out)}
    assert list(nics) == [PF0, PF1, "0000:9c:00.0", "0000:bc:00.0", "0000:dc:00.0"]
    n0 = nics[PF0]
    assert (n0["label"], n0["driver"], n0["numa_node"], n0["link_layer"]) == ("NIC0", "mlx5_core", 0, "InfiniBand")
    assert n0["rdma"] == ["mlx5_0"] and n0["netdevs"] == ["ibp26s0"]
    assert n0["ports"] == [{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp",
                            "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400.0, "link_layer": "InfiniBand"}]
    assert (n0["sriov_totalvfs"], n0["sriov_numvfs"], n0["sriov_drivers_autoprobe"]) == (16, 4, True)
    assert [(v["address"], v["driver"], v["vm"]) for v in n0["vfs"]] == [
        ("0000:1a:00.1", "vfio-pci", "net-fw"), ("0000:1a:00.2", "vfio-pci", "train-a"),
        ("0000:1a:00.3", "mlx5_core", "train-c"), ("0000:1a:00.4", "mlx5_core", None)]
    assert n0["vfs"][2]["rdma"] == ["mlx5_5"] and n0["vfs"][2]["vm_state"] == "shut off"
    assert n0["vfs"][1]["rdma"] == []  # on vfio-pci the host has no RDMA device for it
    # every GPU by distance: its switch's GPUs first, the other socket's last
    assert [(g["index"], g["distance"]) for g in n0["gpus"][:2]] == [(0, "PIX"), (1, "PIX")]
    assert {g["distance"] for g in n0["gpus"][4:]} == {"SYS"}
    assert nics[PF1]["vfs"] == [] and nics[PF1]["sriov_numvfs"] == 0
    rc, out, _ = _cli(capsys, "nic", "list")
    assert rc == 0 and "VF1   0000:1a:00.2  vfio-pci   → VM train-a (running)" in out
    assert "closest GPUs: 4, 5 (PIX)" in out


# -- nic vfs --------------------------------------------------------------------------------------------

def test_nic_vfs_create_then_remove_round_trips(demo, capsys):
    before = _tree(demo)
    rc, out, _ = _cli(capsys, "nic", "vfs", PF1, "3", "--persist", "--apply", "--yes")
    assert rc == 0, out
    assert "sriov_drivers_autoprobe=0" in out and "udev rule" in out
    root = demo / "root"
    dev = root / "sys/bus/pci/devices"
    vfs = ["0000:3c:00.1", "0000:3c:00.2", "0000:3c:00.3"]
    assert (dev / PF1 / "sriov_numvfs").read_text().strip() == "3"
    assert (dev / PF1 / "sriov_drivers_autoprobe").read_text().strip() == "0"
    for i, vf in enumerate(vfs):  # the kernel's VFs: virtfn and physfn links, an IOMMU group, no driver
        assert os.readlink(dev / PF1 / f"virtfn{i}").endswith(vf)
        assert os.readlink(dev / vf / "physfn").endswith(PF1)
        assert os.path.islink(dev / vf / "iommu_group") and not os.path.lexists(dev / vf / "driver")
    rule = (root / "etc/udev/rules.d/70-nodeconsole-sriov.rules").read_text()
    assert f'KERNEL=="{PF1}", ATTR{{sriov_drivers_autoprobe}}="0", ATTR{{sriov_numvfs}}="3"' in rule
    snap = _snap()
    assert [v.address for v in snap.nic(PF1).vfs] == vfs and snap.nic(PF1).sriov_drivers_autoprobe is False

    rc, out, _ = _cli(capsys, "nic", "vfs", PF1, "0", "--persist", "--apply", "--yes")
    assert rc == 0, out
    assert (dev / PF1 / "sriov_numvfs").read_text().strip() == "0"
    assert not any(os.path.lexists(dev / vf) for vf in vfs)
    assert not (root / "etc/udev/rules.d/70-nodeconsole-sriov.rules").exists()
    # undo twice: the VFs come back, then go with the autoprobe setting and the rule file as they were
    for _ in range(2):
        rc, out, _ = _cli(capsys, "undo", "--apply", "--yes")
        assert rc == 0, out
    assert _tree(demo) == before


def test_undoing_vfs_a_vm_took_since_is_refused(demo, capsys):
    before = _tree(demo)
    ids = []
    for argv in (("nic", "vfs", PF1, "2"), ("nic", "passthrough", "0000:3c:00.1", "--vm", "web-1")):
        rc, out, _ = _cli(capsys, *argv, "--apply", "--yes")
        assert rc == 0, out
        ids.append(re.search(r"undo with `nodeconsole undo (\S+) --apply`", out).group(1))
    rc, out, err = _cli(capsys, "undo", ids[0], "--apply", "--yes")  # the VFs, while web-1 holds one
    assert rc == 1 and "0000:3c:00.1 in VM web-1's definition" in out + err
    assert (demo / "root/sys/bus/pci/devices" / PF1 / "sriov_numvfs").read_text().strip() == "2"
    for record in reversed(ids):
        rc, out, _ = _cli(capsys, "undo", record, "--apply", "--yes")
        assert rc == 0, out
    assert _tree(demo) == before


def test_removing_vfs_a_vm_holds_is_refused(demo, capsys):
    before = _tree(demo)
    rc, out, _ = _cli(capsys, "nic", "vfs", PF0, "0", "--apply", "--yes")
    assert rc == 1
    assert "Refused" in out and "net-fw" in out and "train-a" in out and "train-c" in out
    # a larger count removes every VF first, so it is refused as well
    rc, out, _ = _cli(capsys, "nic", "vfs", PF2, "4", "--apply", "--yes")
    assert rc == 1 and "0000:9c:00.1 in VM train-b's definition" in out
    assert _tree(demo) == before


@pytest.mark.parametrize("argv, words", [
    (("nic", "vfs", "zz", "2"), "is not a PCI address"),
    (("nic", "vfs", "0000:1a:00.1", "2"), "give the physical function"),
    (("nic", "vfs", "0000:00:14.0", "2"), "is not a network controller"),
    (("nic", "vfs", "0000:77:00.0", "2"), "no PCI device"),
    (("nic", "vfs", PF1, "17"), "at most 16 VFs"),
    (("nic", "vfs", PF1, "-1"), "VF count"),
    (("nic", "passthrough", PF0, "--vm", "web-1"), "physical function"),
    (("nic", "passthrough", "0000:1a:00.4", "--vm", "no-such-vm"), "unknown VM"),
    (("passthrough", "4", "--with-nic"), "--vm"),
    (("nccl", "topo", "--vm", "web-1"), "no whole GPU"),
])
def test_bad_requests_are_usage_errors(demo, capsys, argv, words):
    rc, out, err = _cli(capsys, *argv)
    assert rc == 2 and out == "" and words in err and err.count("\n") == 1


# -- passthrough --with-nic -----------------------------------------------------------------------------

def test_passthrough_with_nic_gives_the_vf_beside_the_gpu_and_undo_restores(demo, capsys):
    before = _tree(demo)
    domains = (demo / "libvirt.xml").read_bytes()
    rc, out, _ = _cli(capsys, "passthrough", GPU4, "--vm", "build-1", "--with-nic", "--apply", "--yes")
    assert rc == 0, out
    assert f"a free NIC VF near GPU 4: {FREE_VF2} of NIC2" in out and "PIX" in out
    assert "ACS redirect is on at the switch port(s) between them" in out  # the demo's ports have RR/CR on
    snap = _snap()
    vm = snap.vm("build-1")
    held = {h.address: h for h in vm.hostdevs}
    assert {GPU4, FREE_VF2} <= set(held)
    assert snap.nic(FREE_VF2).address == PF2
    from nodeconsole.console.topology import relation
    assert relation(snap, GPU4, FREE_VF2) == "PIX"  # on the GPU's own switch
    assert snap.pci(GPU4).driver == "vfio-pci" and snap.pci(FREE_VF2).driver == "vfio-pci"
    assert all(h.guest_address for h in vm.hostdevs)  # the definition gives each a guest address
    # the guest's view of it: the NCCL topology names the guest's bus ids
    rc, out, _ = _cli(capsys, "nccl", "topo", "--vm", "build-1")
    assert rc == 0
    busids = {p.get("busid") for p in ET.fromstring(out).iter("pci")}
    assert {held[GPU4].guest_address, held[FREE_VF2].guest_address} <= busids
    rc, out, _ = _cli(capsys, "undo", "--apply", "--yes")
    assert rc == 0, out
    assert (demo / "libvirt.xml").read_bytes() == domains
    assert _tree(demo) == before  # drivers, the VF's RDMA device and netdev back as they were


def test_with_nic_takes_no_far_vf_unless_allowed_and_release_removes_a_created_vf(demo, capsys):
    before = _tree(demo)
    domains = (demo / "libvirt.xml").read_bytes()
    # the free VFs near GPU 4 (NIC2's beside it, NIC4's on its node) go to other VMs: what is left is
    # across the sockets. Given in the reverse order of their RDMA names, so the undos (last first) hand
    # mlx5_core each VF back in name order and every VF gets its own lowest free mlx5_N again.
    given = []
    for vf, vm in (("0000:dc:00.2", "web-2"), ("0000:dc:00.1", "web-1"), (FREE_VF2, "web-1"),
                   ("0000:1a:00.4", "web-2")):
        rc, out, _ = _cli(capsys, "nic", "passthrough", vf, "--vm", vm, "--apply", "--yes")
        assert rc == 0, out
        given.append(re.search(r"undo with `nodeconsole undo (\S+) --apply`", out).group(1))
    rc, out, _ = _cli(capsys, "passthrough", GPU4, "--vm", "build-1", "--with-nic")
    assert rc == 1 and "across the sockets (SYS)" in out and "--allow-far-nic" in out
    rc, out, _ = _cli(capsys, "passthrough", GPU4, "--vm", "build-1", "--with-nic", "--allow-far-nic",
                      "--apply", "--yes")
    assert rc == 0, out
    assert f"Create 1 VF(s) on {PF1}" in out  # NIC1 has none yet: one is made, off the host driver
    snap = _snap()
    assert "0000:3c:00.1" in {h.address for h in snap.vm("build-1").hostdevs}
    assert snap.pci("0000:3c:00.1").driver == "vfio-pci"
    rc, out, _ = _cli(capsys, "release", GPU4, "--apply", "--yes")
    assert rc == 0, out
    assert f"Remove the 1 VFs of {PF1}" in out
    for record in reversed(given):  # the nic passthroughs (a plain undo would undo the release)
        rc, out, _ = _cli(capsys, "undo", record, "--apply", "--yes")
        assert rc == 0, out
    assert (demo / "libvirt.xml").read_bytes() == domains
    assert _tree(demo) == before


# -- NCCL ------------------------------------------------------------------------------------------------

def _guest_addresses(demo: Path, vm: str) -> dict[str, str]:
    """host PCI address → guest PCI address of the VM's hostdevs, read from the node file itself."""
    root = ET.parse(demo / "libvirt.xml").getroot()
    dom = next(d for d in root.iter("domain") if d.findtext("name") == vm)
    out = {}
    for h in dom.iter("hostdev"):
        src, guest = h.find("source/address"), h.find("address")
        host = f"{int(src.get('domain'), 16):04x}:{int(src.get('bus'), 16):02x}:{int(src.get('slot'), 16):02x}." \
               f"{int(src.get('function'), 16)}"
        out[host] = f"0000:{int(guest.get('bus'), 16):02x}:{int(guest.get('slot'), 16):02x}.{int(guest.get('function'), 16)}"
    return out


def test_nccl_topo_is_the_hosts_tree_at_the_guests_bus_ids(demo, capsys, tmp_path):
    target = tmp_path / "topo.xml"
    rc, _out, err = _cli(capsys, "nccl", "topo", "--vm", "train-a", "-o", str(target))
    assert rc == 0 and "wrote" in err
    assert os.stat(target).st_mode & 0o777 == 0o644
    system = ET.parse(target).getroot()
    assert system.tag == "system" and system.get("version") == "1"
    cpus = system.findall("cpu")
    assert len(cpus) == 1 and cpus[0].get("numaid") == "0" and cpus[0].get("affinity") == "0000ffff"  # 16 vCPUs
    for pci in system.iter("pci"):
        assert {"busid", "class", "link_speed", "link_width"} <= set(pci.attrib), pci.attrib
    guest = _guest_addresses(demo, "train-a")
    (gpu_pci,) = [p for p in system.iter("pci") if p.find("gpu") is not None]
    (nic_pci,) = [p for p in system.iter("pci") if p.find("nic") is not None]
    assert gpu_pci.get("busid") == guest["0000:19:00.0"] and nic_pci.get("busid") == guest["0000:1a:00.2"]
    gpu = gpu_pci.find("gpu")
    assert (gpu.get("dev"), gpu.get("sm"), gpu.get("rank"), gpu.get("gdr")) == ("0", "90", "0", "1")
    net = nic_pci.find("nic/net")
    assert {k: net.get(k) for k in ("name", "dev", "speed", "port", "gdr")} == {
        "name": "mlx5_0", "dev": "0", "speed": "400000", "port": "1", "gdr": "1"}
    # both hang off the host's switch (its upstream port 16:00.0), each under its own downstream port
    parents = {c: p for p in system.iter() for c in p}
    assert parents[parents[gpu_pci]].get("busid") == parents[parents[nic_pci]].get("busid") == "0000:16:00.0"
    # a symlink is not written through
    link = tmp_path / "link.xml"
    link.symlink_to(tmp_path / "elsewhere.xml")
    rc, _out, err = _cli(capsys, "nccl", "topo", "--vm", "train-a", "-o", str(link))
    assert rc == 2 and "symbolic link" in err and not (tmp_path / "elsewhere.xml").exists()


def test_nccl_topo_nvlink_and_several_numa_nodes(demo):
    from nodeconsole.actions.nccl.topo_xml import vm_topology
    from nodeconsole.console.model import Hostdev

    snap = _snap()
    vm = snap.vm("train-a")
    two = dataclasses.replace(vm, hostdevs=vm.hostdevs + (Hostdev("pci", "0000:9b:00.0", gpu="0000:9b:00.0",
                                                                  guest_address="0000:0a:00.0"),))
    snap = dataclasses.replace(snap, vms=(two,))
    topo = vm_topology(snap, "train-a", nvlinks={"0000:19:00.0": [("0000:9b:00.0", 18), ("0000:05:00.0", 4)],
                                                 "0000:9b:00.0": [("0000:19:00.0", 18), ("0000:18:00.0", 2)]})
    system = ET.fromstring(topo.xml)
    assert [c.get("numaid") for c in system.findall("cpu")] == ["0", "1"]  # a GPU on each host node
    links = {(g.get("dev"), n.get("target"), n.get("count")) for g in system.iter("gpu") for n in g.findall("nvlink")}
    assert links == {("0", "0000:0a:00.0", "18"), ("0", "fffffff:ffff:ff", "4"), ("1", "0000:07:00.0", "18")}
    assert any("left out" in n for n in topo.notes)  # the link to a GPU outside the VM
    # without a mapping, the snapshot's NVLink state: active links counted per remote end
    from nodeconsole.console.model import NvLink

    gpu = snap.gpu("0000:19:00.0")
    links = tuple(NvLink(i, active=i != 3, remote=f"0000:0{5 + i % 2}:00.0", remote_type="switch") for i in range(4))
    snap = dataclasses.replace(snap, gpus=tuple(dataclasses.replace(g, nvlinks=links) if g is gpu else g
                                                for g in snap.gpus))
    system = ET.fromstring(vm_topology(snap, "train-a").xml)
    nvl = [(n.get("target"), n.get("count")) for g in system.iter("gpu") if g.get("dev") == "0"
           for n in g.findall("nvlink")]
    assert nvl == [("fffffff:ffff:ff", "3")]  # links 0-2 to the NVSwitches, as one element; link 3 is down


def test_nccl_command_vm_prints_the_guest_environment(demo, capsys):
    rc, out, _ = _cli(capsys, "nccl", "command", "--vm", "train-b")
    assert rc == 0
    lines = [ln for ln in out.splitlines() if not ln.startswith("# note")]
    assert "export NCCL_TOPO_FILE=/etc/nccl/topo.xml" in out
    hca = next(ln for ln in lines if ln.startswith("export NCCL_IB_HCA="))
    assert hca.startswith("export NCCL_IB_HCA=mlx5_0  #") and "may differ" in hca and "0000:9c:00.1" in hca
    assert any(ln.startswith("# export NCCL_SOCKET_IFNAME=") and "host cannot know" in ln for ln in lines)
    assert "export NCCL_IB_TIMEOUT=22" in out and "export NCCL_IB_RETRY_CNT=7" in out
    rc, out, _ = _cli(capsys, "nccl", "command", "--vm", "train-b", "--json")
    data = json.loads(out)
    assert data["env"]["NCCL_IB_HCA"] == "mlx5_0" and "NCCL_SOCKET_IFNAME" in data["unknown"]
    rc, _out, err = _cli(capsys, "nccl", "command", "--vm", "train-b", "--gpus-per-host", "2")
    assert rc == 2 and "--hosts" in err


def test_nccl_command_hosts_with_vm_carries_the_guest_environment(demo, capsys):
    """`--hosts` with `--vm`: every rank gets the VM's NCCL environment; GPUs per host default to the VM's."""
    rc, out, err = _cli(capsys, "nccl", "command", "--vm", "train-b", "--hosts", "a,b", "--json")
    assert rc == 0, err
    (cmd,) = json.loads(out)["commands"]
    argv = cmd["argv"]
    exported = {argv[i + 1].split("=", 1)[0]: argv[i + 1].split("=", 1)[1] for i, a in enumerate(argv) if a == "-x"}
    assert exported["NCCL_TOPO_FILE"] == "/etc/nccl/topo.xml" and exported["NCCL_IB_HCA"] == "mlx5_0"
    assert exported["NCCL_SOCKET_IFNAME"] == "^lo,docker"  # the guest's names are unknown: exclude, don't guess
    assert argv[argv.index("-H") + 1] == "a:1,b:1" and argv[argv.index("-np") + 1] == "2"  # train-b has 1 GPU
    rc, out, _ = _cli(capsys, "nccl", "command", "--vm", "train-b", "--hosts", "a,b", "--gpus-per-host", "4",
                      "--launcher", "torchrun", "--env", "NCCL_SOCKET_IFNAME=ens3", "--json")
    cmds = json.loads(out)["commands"]
    assert rc == 0 and all(c["env"]["NCCL_SOCKET_IFNAME"] == "ens3" and c["env"]["NCCL_IB_HCA"] == "mlx5_0"
                           for c in cmds)
    assert all("--nproc_per_node=4" in c["argv"] for c in cmds)
    rc, out, err = _cli(capsys, "nccl", "command", "--vm", "no-such-vm", "--hosts", "a,b")
    assert rc == 2 and out == "" and "no-such-vm" in err


# -- Overview and Topology screen --------------------------------------------------------------------------

def test_overview_problems_far_nic_and_no_nic(demo):
    from nodeconsole.console.checks import find_problems

    snap = _snap()
    (far,) = [p for p in snap.problems if p.subject == "train-c"]
    assert far.severity == "warning" and "0000:1a:00.3" in far.message and "SYS" in far.message
    assert f"nic passthrough {FREE_VF2} --vm train-c" in far.fix and far.check == ""
    assert not [p for p in snap.problems if p.subject in ("train-a", "train-b") and "NIC" in p.message]
    # train-a without its VF: a GPU VM with no NIC
    vm = snap.vm("train-a")
    bare = dataclasses.replace(vm, hostdevs=tuple(h for h in vm.hostdevs if h.address != "0000:1a:00.2"))
    snap = dataclasses.replace(snap, vms=tuple(bare if v.name == "train-a" else v for v in snap.vms))
    (none,) = [p for p in find_problems(snap) if p.subject == "train-a" and "no NIC VF" in p.message]
    assert none.severity == "info" and "nic passthrough" in none.fix


def test_topology_screen_nic_rows(demo):
    from nodeconsole.screens.topology import nics_text

    text = nics_text(_snap()).plain.splitlines()
    assert text[0].split() == ["NIC0", PF0, "InfiniBand", "mlx5_0", "ACTIVE", "400", "Gb/s", "NUMA", "0"]
    assert text[1].strip() == "VFs 4 of 16, closest GPU0, GPU1 (PIX)"
    assert any(ln.split()[:2] == ["VF", "0000:1a:00.3"] and ln.endswith("train-c  SYS from its GPU") for ln in text)
    assert any(ln.split()[:2] == ["VF", "0000:9c:00.1"] and ln.endswith("train-b  PIX from its GPU") for ln in text)
