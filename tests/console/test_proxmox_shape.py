"""A Proxmox VM's shape through `qm set` on `demo reset --proxmox` (console/vms/proxmox_shape.py): vCPUs,
memory, huge pages and NUMA cells written as qm.conf keys and read back as the next start takes them; a
running VM's change waits in [PENDING]; a saved config comes back byte for byte through `qm set`/`--delete`;
what Proxmox cannot hold (threads per core, odd page sizes) or a restore qm set cannot make is refused."""
from __future__ import annotations

from pathlib import Path

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.console.seams import demo_host
from nodeconsole.console.vms.backend import GuestCell, VmConfigError, VmShape
from tests.console.test_capture import cli

GIB = 1 << 20


@pytest.fixture
def pve(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    rc, out, err = cli("demo", "reset", "--proxmox")
    assert rc == 0, err
    return tmp_path / "demo/root/etc/pve/qemu-server"


def _vms():
    vms = ActionHost.from_seams(demo_host()).vms
    assert vms is not None
    return vms


def test_a_one_node_shape_is_cores_memory_hugepages_and_numa0_and_restore_is_exact(pve):
    vms, before = _vms(), (pve / "112.conf").read_bytes()
    target = VmShape(vcpus=16, memory_kib=64 * GIB, hugepage_kib=GIB, numa=("strict", "1"))
    assert vms.shape_commands("train-d", target) == (
        "qm set 112 --cores 16 --memory 65536 --hugepages 1024 "
        "--numa0 cpus=0-15,hostnodes=1,memory=65536,policy=bind --numa 1",)
    vms.set_shape("train-d", target)
    lines = (pve / "112.conf").read_text().splitlines()
    assert {"cores: 16", "memory: 65536", "hugepages: 1024", "numa: 1",
            "numa0: cpus=0-15,hostnodes=1,memory=65536,policy=bind", "sockets: 1"} <= set(lines)
    assert vms.shape("train-d").key() == target.key()
    assert vms.check_saved("train-d", before.decode()) == before.decode()
    vms.restore("train-d", before.decode())
    assert (pve / "112.conf").read_bytes() == before


def test_guest_cells_become_numa_lines_and_fewer_cells_delete_the_rest(pve):
    vms, before = _vms(), (pve / "112.conf").read_bytes()
    two = VmShape(vcpus=16, memory_kib=64 * GIB, hugepage_kib=2048, numa=("strict", "0-1"),
                  cells=(GuestCell(0, "0-7", 32 * GIB, "0"), GuestCell(1, "8-15", 32 * GIB, "1")))
    vms.set_shape("train-d", two)
    text = (pve / "112.conf").read_text()
    assert "numa0: cpus=0-7,hostnodes=0,memory=32768,policy=bind\n" in text
    assert "numa1: cpus=8-15,hostnodes=1,memory=32768,policy=bind\n" in text and "hugepages: 2\n" in text
    assert vms.shape("train-d").key() == two.key()
    plain = VmShape(vcpus=4, memory_kib=8 * GIB, hugepage_kib=None, numa=None)
    vms.set_shape("train-d", plain)
    text = (pve / "112.conf").read_text()
    assert "numa" not in text and "hugepages" not in text and "cores: 4\n" in text
    assert vms.shape("train-d").key() == plain.key()
    vms.restore("train-d", before.decode())
    assert (pve / "112.conf").read_bytes() == before


def test_a_running_vm_takes_its_shape_in_pending_and_restore_takes_it_back(pve):
    vms = _vms()
    assert vms.run_state("db-1") == "running"
    before = (pve / "110.conf").read_bytes()
    now = vms.shape("db-1")
    target = VmShape(vcpus=now.vcpus, memory_kib=2 * now.memory_kib, hugepage_kib=None, numa=("strict", "0"))
    vms.set_shape("db-1", target)
    main, _, pending = (pve / "110.conf").read_text().partition("[PENDING]\n")
    assert main == before.decode() + "\n"  # the running VM's own section is untouched
    assert "delete: hugepages\n" in pending and f"memory: {2 * now.memory_kib // 1024}\n" in pending
    assert vms.shape("db-1").key() == target.key()  # as the next start takes it
    vms.restore("db-1", before.decode())
    assert (pve / "110.conf").read_bytes() == before


def test_what_proxmox_cannot_hold_is_refused_and_nothing_changes(pve):
    vms, before = _vms(), (pve / "112.conf").read_bytes()
    with pytest.raises(VmConfigError, match="no threads per core"):
        vms.set_shape("train-d", VmShape(vcpus=16, memory_kib=8 * GIB, hugepage_kib=None, numa=None,
                                         threads_per_core=2))
    with pytest.raises(VmConfigError, match="2 MiB or 1 GiB pages"):
        vms.set_shape("train-d", VmShape(vcpus=4, memory_kib=8 * GIB, hugepage_kib=16, numa=None))
    with pytest.raises(VmConfigError, match="whole MiB"):
        vms.set_shape("train-d", VmShape(vcpus=4, memory_kib=8 * GIB + 4, hugepage_kib=None, numa=None))
    assert (pve / "112.conf").read_bytes() == before


def test_a_saved_config_is_checked_and_a_snapshot_difference_is_refused(pve):
    vms, before = _vms(), (pve / "112.conf").read_text()
    with pytest.raises(VmConfigError, match="does not parse"):
        vms.check_saved("train-d", before + "this is no config line\n")
    with pytest.raises(VmConfigError, match="names another VM"):
        vms.check_saved("train-d", before.replace("name: train-d", "name: db-1"))
    with pytest.raises(VmConfigError, match="over 1 MiB"):
        vms.check_saved("train-d", before + "#" + "x" * (1 << 20) + "\n")
    with pytest.raises(VmConfigError, match="snapshots"):
        vms.restore("train-d", before + "\n[before]\ncores: 8\nsnaptime: 1700000000\n")
    assert (pve / "112.conf").read_text() == before


def test_a_running_vms_saved_pending_section_comes_back_exactly(pve):
    vms = _vms()
    now = vms.shape("db-1")
    vms.set_shape("db-1", VmShape(vcpus=now.vcpus, memory_kib=2 * now.memory_kib, hugepage_kib=None, numa=None))
    saved = (pve / "110.conf").read_text()
    assert "[PENDING]" in saved and "delete: hugepages,numa0,numa" in saved
    vms.set_shape("db-1", VmShape(vcpus=now.vcpus, memory_kib=now.memory_kib, hugepage_kib=2048,
                                  numa=("interleave", "0-1")))
    assert (pve / "110.conf").read_text() != saved
    vms.restore("db-1", saved)
    assert (pve / "110.conf").read_text() == saved
