"""Host-device changes on a Proxmox VE tree through a simulated `qm set` (argv only): a stopped VM's
config changes at once and the change undone gives back its bytes; a running VM's waits in [PENDING]; a
locked VM, a moved digest and an index collision are refused with nothing changed."""
from __future__ import annotations

from pathlib import Path

import pytest

from nodeconsole.console.demo.sim_qm import SimulatedQm
from nodeconsole.console.root import Root
from nodeconsole.console.vms.backend import VmConfigError, VmPins
from nodeconsole.console.vms.proxmox import ProxmoxReader
from nodeconsole.console.vms.proxmox_backend import ProxmoxVms
from tests.console.test_proxmox_reader import GPU_A, GPU_B, GPU_C, pve_tree

CANON = "#canonical\ncores: 4\nmachine: q35\nmemory: 8192\nname: canon\nnuma: 0\n"


class Qm:
    """The host's programs: a simulated qm, and a record of every argv run."""

    def __init__(self, root: Root) -> None:
        self.qm, self.runs = SimulatedQm(root), []

    def which(self, name: str) -> str | None:
        return "/usr/sbin/qm" if name == "qm" else None

    def run(self, argv: list[str]) -> tuple[int, str]:
        self.runs.append(list(argv))
        return self.qm.run(argv[1:])


def host(tmp_path: Path) -> tuple[ProxmoxVms, Qm]:
    pve_tree(tmp_path)
    (tmp_path / "etc/pve/qemu-server/105.conf").write_text(CANON)
    root = Root(tmp_path)
    qm = Qm(root)
    return ProxmoxVms(root, qm), qm


def conf(tmp_path: Path, vmid: int) -> bytes:
    return (tmp_path / f"etc/pve/qemu-server/{vmid}.conf").read_bytes()


def test_stopped_vm_gets_a_hostpci_line_and_undo_gives_back_its_bytes(tmp_path):
    vms, qm = host(tmp_path)
    vms.add_hostdev("canon", GPU_B)
    assert conf(tmp_path, 105).decode() == (
        "#canonical\ncores: 4\nhostpci0: 0000:42:00.0,pcie=1\nmachine: q35\nmemory: 8192\nname: canon\nnuma: 0\n")
    assert qm.runs[0][:3] == ["qm", "set", "105"] and qm.runs[0][3] == "--digest"
    assert qm.runs[0][5:] == ["--hostpci0", "0000:42:00.0,pcie=1"]
    assert vms.pci_hostdevs("105") == {GPU_B}
    saved = vms.saved_hostdev("canon", GPU_B)
    vms.remove_hostdev("canon", GPU_B)
    assert conf(tmp_path, 105).decode() == CANON
    vms.restore_hostdev("canon", GPU_B, saved)
    assert vms.hostdev_place("canon", GPU_B) == (0, True)


def test_running_vm_change_waits_in_pending(tmp_path):
    vms, _ = host(tmp_path)
    before = [ln for ln in conf(tmp_path, 100).decode().split("\n[PENDING]")[0].splitlines()]
    vms.add_hostdev("train-a", GPU_C)
    text = conf(tmp_path, 100).decode()
    main, pending = text.split("\n[PENDING]\n")
    assert sorted(main.splitlines()) == sorted(before)  # the running config is untouched
    assert "hostpci1: 0000:43:00.0" in pending.splitlines()  # hostpci0 is taken: its delete waits
    assert GPU_C in vms.pci_hostdevs("train-a")  # the next start has it
    vm = next(v for v in ProxmoxReader(Root(tmp_path)).poll().vms if v.vmid == 100)
    assert "hostpci1" in vm.pending and GPU_C not in {h.address for h in vm.hostdevs}
    assert "waits in the config's [PENDING]" in vms.pin_scopes("train-a", True).says


def test_locked_vm_is_refused_and_unchanged(tmp_path):
    vms, qm = host(tmp_path)
    before = conf(tmp_path, 101)
    with pytest.raises(VmConfigError, match=r"VM 101 is locked \(backup\)"):
        vms.add_hostdev("infer-b", GPU_C)
    assert conf(tmp_path, 101) == before and qm.runs == []


def test_simulated_qm_refuses_a_moved_digest_and_a_lock(tmp_path):
    pve_tree(tmp_path)
    qm = SimulatedQm(Root(tmp_path))
    before = conf(tmp_path, 102)
    rc, out = qm.run(["set", "102", "--digest", "0" * 40, "--hostpci0", GPU_B])
    assert rc == 255 and "modified" in out and conf(tmp_path, 102) == before
    rc, out = qm.run(["set", "101", "--hostpci1", GPU_C])
    assert (rc, out) == (255, "VM 101 is locked (backup)")
    rc, out = qm.run(["set", "102", "--hostpci0", "41:00.0,bogus=1"])
    assert rc == 255 and "unknown option 'bogus'" in out and conf(tmp_path, 102) == before


def test_restore_into_a_taken_index_is_an_index_collision(tmp_path):
    vms, _ = host(tmp_path)
    vms.add_hostdev("canon", GPU_B)
    saved = vms.saved_hostdev("canon", GPU_B)
    vms.remove_hostdev("canon", GPU_B)
    vms.add_hostdev("canon", GPU_A)  # takes hostpci0
    before = conf(tmp_path, 105)
    with pytest.raises(VmConfigError, match="index collision"):
        vms.restore_hostdev("canon", GPU_B, saved)
    assert conf(tmp_path, 105) == before


def test_removing_one_function_takes_the_whole_line(tmp_path):
    vms, _ = host(tmp_path)
    vms.remove_hostdev("vm102", GPU_C)  # hostpci1: 0000:43:00.0,mdev=… (the file is written in Proxmox's form)
    assert vms.pci_hostdevs("102") == set() and "hostpci1" not in conf(tmp_path, 102).decode()


def test_a_description_is_written_back_as_proxmox_encodes_it(tmp_path):
    vms, _ = host(tmp_path)
    text = "#owner%3A ml-team %C3%A9t%C3%A9\ncores: 2\nname: described\n"
    (tmp_path / "etc/pve/qemu-server/106.conf").write_text(text)
    vms.add_hostdev("described", GPU_B)
    vms.remove_hostdev("described", GPU_B)
    assert conf(tmp_path, 106).decode() == text


PLAIN = "cores: 4\nmemory: 8192\nname: plain\n"


def test_pinning_the_whole_process_and_its_undo_give_back_the_bytes(tmp_path):
    vms, qm = host(tmp_path)
    (tmp_path / "etc/pve/qemu-server/107.conf").write_text(PLAIN)
    before = vms.pins("plain", live=False)
    assert (before.vcpus, before.emulator, before.numa) == ((), None, None)
    target = VmPins(tuple((v, "2-5") for v in range(4)), "2-5", ("strict", "0"))
    vms.set_pins("plain", target, live=False, memory_policy=True)
    assert conf(tmp_path, 107).decode() == ("affinity: 2-5\ncores: 4\nmemory: 8192\nname: plain\nnuma: 1\n"
                                            "numa0: cpus=0-3,hostnodes=0,memory=8192,policy=bind\n")
    assert vms.pins("107", live=False).sets() == target.sets()  # what the pin step verifies
    vms.set_pins("plain", before, live=False, memory_policy=True)
    assert conf(tmp_path, 107).decode() == PLAIN
    assert qm.runs[-1][5:] == ["--delete", "affinity,numa0,numa"]


def test_pins_that_differ_by_vcpu_are_refused_before_qm_runs(tmp_path):
    vms, qm = host(tmp_path)
    per_vcpu = VmPins(((0, "2"), (1, "3"), (2, "4"), (3, "5")), "0-1", ("strict", "0"))
    with pytest.raises(VmConfigError, match="pins the whole QEMU process to one CPU set"):
        vms.set_pins("canon", per_vcpu, live=False, memory_policy=True)
    with pytest.raises(VmConfigError, match="every vCPU and the emulator together"):  # the emulator apart
        vms.set_pins("canon", VmPins(tuple((v, "2-5") for v in range(4)), "0-1", None), live=False,
                     memory_policy=False)
    assert qm.runs == [] and conf(tmp_path, 105).decode() == CANON


def test_pinning_a_running_vm_waits_in_pending(tmp_path):
    vms, _ = host(tmp_path)
    target = VmPins(tuple((v, "8-15") for v in range(16)), "8-15", ("strict", "1"))
    vms.set_pins("train-a", target, live=False, memory_policy=True)
    pending = conf(tmp_path, 100).decode().partition("[PENDING]\n")[2]
    assert "affinity: 8-15\n" in pending and "numa0: cpus=0-15,hostnodes=1,memory=65536,policy=bind\n" in pending
    assert vms.pins("train-a", live=True).emulator == "0-7"  # the running VM's as it started
