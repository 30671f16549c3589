"""Host-device changes on a Proxmox VE tree through a simulated `qm set` (argv only): a stopped VM's
config changes at once and the change undone gives back its bytes; a running VM's waits in [PENDING]; a
locked VM, a moved digest and an index collision are refused with nothing changed."""
from __future__ import annotations

from pathlib import Path

import pytest

from nodeconsole.console.demo.sim_qm import SimulatedQm
from nodeconsole.console.root import Root
from nodeconsole.console.vms.backend import VmConfigError
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
