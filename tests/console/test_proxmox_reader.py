"""Proxmox VE VMs read from a tree (etc/pve/qemu-server, pci.cfg, pid files, /proc) into the VM model:
the reader, the backend's reads, the seam's choice and `snapshot --root`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeconsole.console.cli import main
from nodeconsole.console.collector import Collector
from nodeconsole.console.root import Root
from nodeconsole.console.seams import real_host
from nodeconsole.console.vms.backend import VmConfigError, VmPins
from nodeconsole.console.vms.proxmox import ProxmoxReader, mdev_uuid
from nodeconsole.console.vms.proxmox_backend import ProxmoxVms
from tests.console.sysfs_tree import FakeSys

GPU_A, GPU_B, GPU_C = "0000:41:00.0", "0000:42:00.0", "0000:43:00.0"


def qemu_cmdline(vmid: int) -> bytes:
    return b"\0".join([b"/usr/bin/kvm", b"-id", str(vmid).encode(), b"-name", b"x", b"-pidfile",
                       f"/var/run/qemu-server/{vmid}.pid".encode(), b"-daemonize", b""])


def pve_tree(tmp_path: Path) -> FakeSys:
    fs = FakeSys(tmp_path)
    fs.host(hostname="pve1")
    for n, cpus in enumerate(("0-7", "8-15")):
        fs.node(n, cpus, 64 << 20)
    fs.pci(GPU_A, iommu_group=41, driver="vfio-pci", numa_node=0)
    fs.pci("0000:41:00.1", device=0x22A3, cls=0x040300, iommu_group=41, driver="vfio-pci", numa_node=0)
    fs.pci(GPU_B, iommu_group=42, driver="vfio-pci", numa_node=1)
    fs.pci(GPU_C, iommu_group=43, driver="nvidia", numa_node=1)
    fs.write("etc/pve/mapping/pci.cfg", "h100\n\tmap node=pve1,path=0000:42:00.0,id=10de:2330,iommugroup=42\n"
             "stale\n\tmap node=pve1,path=0000:42:00.0,id=10de:20b5\n")
    confs = {
        100: "#training box\nname: train-a\ncores: 8\nsockets: 2\nmemory: 65536\nnuma: 1\nhugepages: 1024\n"
             "numa0: cpus=0-15,hostnodes=0,memory=65536,policy=bind\naffinity: 0-7\n"
             "hostpci0: 41:00,pcie=1,x-vga=1\nsmbios1: uuid=6F0A1C2D-0000-4000-8000-000000000100\n"
             "\n[PENDING]\naffinity: 0-3\ndelete: hostpci0\n\n[pre-upgrade]\ncores: 4\nsnaptime: 1700000000\n",
        101: "name: infer-b\ncores: 4\nmemory: current=16384\nhostpci0: mapping=h100\nlock: backup\n",
        102: "cores: 2\nmemory: 2048\nhostpci1: 0000:43:00.0,mdev=nvidia-660\nthis line is broken\n",
        103: "name: golden\ntemplate: 1\ncores: 4\nhostpci0: 41:00.0\n",
        104: "name: stale-map\nhostpci0: mapping=stale\nhostpci1: mapping=nope\n",
    }
    for vmid, text in confs.items():
        fs.write(f"etc/pve/qemu-server/{vmid}.conf", text.rstrip("\n"))
    fs.write("etc/pve/qemu-server/notes.txt", "not a VM")
    # 100 runs (its pid file and a QEMU process with that -pidfile); 101's pid file is stale (another program)
    fs.write("run/qemu-server/100.pid", "4242")
    (tmp_path / "proc/4242").mkdir(parents=True)
    (tmp_path / "proc/4242/cmdline").write_bytes(qemu_cmdline(100))
    fs.write("proc/4242/stat", "4242 (kvm) S 1 4242 4242 0 -1 4194560 0 0 0 0 1000 500 0 0 20 0 33 0 100 0 0")
    fs.write("proc/4242/status", "Name:\tkvm\nVmRSS:\t  8388608 kB\n")
    fs.write("run/qemu-server/101.pid", "777")
    (tmp_path / "proc/777").mkdir(parents=True)
    (tmp_path / "proc/777/cmdline").write_bytes(b"/usr/bin/sleep\0" + b"-pidfile\0/var/run/qemu-server/101.pid\0")
    (tmp_path / "var").mkdir()
    (tmp_path / "var/run").symlink_to("../run")
    return fs


def read(tmp_path: Path):  # type: ignore[no-untyped-def]
    pve_tree(tmp_path)
    return {v.vmid: v for v in ProxmoxReader(Root(tmp_path)).poll().vms}


def test_every_vm_is_listed_with_its_vmid(tmp_path):
    vms = read(tmp_path)
    assert sorted(vms) == [100, 101, 102, 103, 104]
    assert {v.vmid: v.name for v in vms.values()} == {100: "train-a", 101: "infer-b", 102: "vm102", 103: "golden",
                                                      104: "stale-map"}
    assert all(v.hypervisor == "proxmox" for v in vms.values())


def test_running_state_needs_the_pid_files_qemu(tmp_path):
    vms = read(tmp_path)
    assert vms[100].state == "running"
    assert vms[101].state == "shut off"  # its pid file names a process that is not QEMU with that -pidfile
    assert vms[102].state == "shut off"  # no pid file


def test_cpu_memory_numa_hugepages_affinity(tmp_path):
    vm = read(tmp_path)[100]
    assert (vm.vcpus, vm.memory_kib, vm.hugepages_kib) == (16, 65536 * 1024, 1048576)
    assert (vm.numa_mode, vm.numa_nodeset) == ("strict", (0,))
    assert vm.emulator_pins == tuple(range(8))  # affinity: the whole process
    assert [(p.vcpu, p.cpus) for p in vm.pins] == [(v, tuple(range(8))) for v in range(16)]
    assert vm.uuid == "6f0a1c2d-0000-4000-8000-000000000100"
    assert vm.rss_kib == 8388608 and vm.cpu_percent is None  # CPU % takes two polls


def test_functionless_hostpci_gives_every_function(tmp_path):
    vm = read(tmp_path)[100]
    assert [(h.type, h.address) for h in vm.hostdevs] == [("pci", GPU_A), ("pci", "0000:41:00.1")]


def test_pending_and_snapshot_sections(tmp_path):
    vm = read(tmp_path)[100]
    assert (vm.pending, vm.pending_delete, vm.lock, vm.template) == (("affinity",), ("hostpci0",), None, False)
    assert vm.config_problems == ()


def test_mapping_resolved_and_lock(tmp_path):
    vm = read(tmp_path)[101]
    assert [h.address for h in vm.hostdevs] == [GPU_B] and vm.lock == "backup" and vm.memory_kib == 16384 * 1024


def test_mdev_on_a_gpu_and_a_malformed_line(tmp_path):
    vm = read(tmp_path)[102]
    assert [(h.type, h.uuid) for h in vm.hostdevs] == [("mdev", mdev_uuid(1, 102))]
    assert mdev_uuid(1, 102) == "00000001-0000-0000-0000-000000000102"
    assert vm.config_problems == ("/etc/pve/qemu-server/102.conf:4: cannot parse 'this line is broken'",)


def test_template_holds_no_device(tmp_path):
    vm = read(tmp_path)[103]
    assert vm.template and vm.hostdevs == () and vm.state == "shut off"


def test_stale_and_unknown_mappings_are_problems(tmp_path):
    vm = read(tmp_path)[104]
    path = "/etc/pve/qemu-server/104.conf"
    assert vm.config_problems == (
        f"{path}: hostpci0: mapping 'stale' (/etc/pve/mapping/pci.cfg:4): 0000:42:00.0 is 10de:2330 in sysfs, "
        "the mapping says id=10de:20b5",
        f"{path}: hostpci1: mapping 'nope' is not in /etc/pve/mapping/pci.cfg")


def test_cpu_percent_from_proc_between_polls(tmp_path):
    pve_tree(tmp_path)
    now = [10.0]
    reader = ProxmoxReader(Root(tmp_path), clock=lambda: now[0])
    reader.poll()
    (tmp_path / "proc/4242/stat").write_text("4242 (kvm) S 1 4242 4242 0 -1 4194560 0 0 0 0 1150 550 0 0 20 0 33")
    now[0] = 12.0
    vm = next(v for v in reader.poll().vms if v.vmid == 100)
    assert vm.cpu_percent == 100.0  # 200 ticks (2 s of CPU) in 2 s


def test_backend_reads_by_name_or_vmid_and_refuses_changes(tmp_path):
    pve_tree(tmp_path)
    vms = ProxmoxVms(Root(tmp_path))
    assert vms.names() == ["golden", "infer-b", "stale-map", "train-a", "vm102"]
    assert vms.vm("100") == vms.vm("train-a") and vms.vm("train-a").vmid == 100
    assert vms.vm("999") is None
    assert vms.pci_hostdevs("train-a") == set()  # its next start: [PENDING] deletes hostpci0
    assert vms.pci_hostdevs("103") == {GPU_A}
    assert vms.hostdev_place("101", GPU_B) == (0, True)
    assert vms.run_state("100") == "running" and vms.run_state("infer-b") == "shut off"
    assert vms.save("100") == (tmp_path / "etc/pve/qemu-server/100.conf").read_text()
    pins = vms.pins("train-a", live=False)
    # the whole process on [PENDING]'s affinity: every vCPU and the emulator
    assert (pins.vcpus, pins.emulator, pins.numa) == (tuple((v, "0-3") for v in range(16)), "0-3", ("strict", "0"))
    assert vms.pins("train-a", live=True).emulator == "0-7"
    saved = vms.saved_hostdev("infer-b", GPU_B)
    assert saved is not None and (saved.token, saved.place) == ("hostpci0: mapping=h100", 0)
    assert vms.check_saved_hostdev(GPU_B, saved.token) == saved.token
    with pytest.raises(VmConfigError, match="not the hostpci line of 0000:41:00.0"):
        vms.check_saved_hostdev(GPU_A, saved.token)
    assert vms.check_saved_hostdev("0000:41:00.1", "hostpci0: 41:00,pcie=1") == "hostpci0: 41:00,pcie=1"
    before = (tmp_path / "etc/pve/qemu-server/100.conf").read_bytes()
    with pytest.raises(VmConfigError, match="no qm"):  # a tree has no programs
        vms.add_hostdev("train-a", GPU_C)
    with pytest.raises(VmConfigError, match="not yet on Proxmox"):
        vms.start("train-a")
    with pytest.raises(VmConfigError, match="no qm"):
        vms.set_pins("train-a", VmPins(tuple((v, "8-11") for v in range(16)), "8-11", None), False, False)
    assert (tmp_path / "etc/pve/qemu-server/100.conf").read_bytes() == before


def test_seam_chooses_proxmox_for_a_tree_and_libvirt_when_forced(tmp_path):
    pve_tree(tmp_path)
    backend = real_host(str(tmp_path)).open_vm_backend()
    assert isinstance(backend, ProxmoxVms)
    assert real_host(str(tmp_path), libvirt_uri="test:///default").open_vm_backend().label == "libvirt"


def test_snapshot_lookup_by_vmid(tmp_path):
    pve_tree(tmp_path)
    snap = Collector(real_host(str(tmp_path))).collect()
    assert snap.vm("101").name == "infer-b" and snap.vm("infer-b").vmid == 101
    gpu_vms = {g.address: g.owner.vms for g in snap.gpus}
    assert "train-a" in gpu_vms[GPU_A]
    assert any(p.subject == "vm102" and "cannot parse" in p.message for p in snap.problems)


def test_snapshot_root_text_and_json(tmp_path, capsys):
    pve_tree(tmp_path)
    assert main(["snapshot", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "VMs (5)" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("train-a"))
    assert "running" in line and "vmid 100" in line and "pending affinity -hostpci0" in line
    assert "locked (backup)" in next(ln for ln in out.splitlines() if ln.strip().startswith("infer-b"))
    assert "template" in next(ln for ln in out.splitlines() if ln.strip().startswith("golden"))
    assert main(["snapshot", "--root", str(tmp_path), "--json"]) == 0
    vms = {v["name"]: v for v in json.loads(capsys.readouterr().out)["vms"]}
    assert (vms["train-a"]["hypervisor"], vms["train-a"]["vmid"], vms["train-a"]["vcpus"]) == ("proxmox", 100, 16)
    assert vms["infer-b"]["lock"] == "backup" and vms["golden"]["template"] is True


def test_the_backends_say_how_they_pin(tmp_path):
    pve_tree(tmp_path)
    assert ProxmoxVms(Root(tmp_path)).whole_process_pins is True
    assert real_host(str(tmp_path), libvirt_uri="test:///default").open_vm_backend().whole_process_pins is False
