"""`prepare VM` on `demo reset --proxmox`: the shut-off train-d (vmid 112) gets the idle H100 PCIe pair on
node 1 and two VFs as hostpciN lines, its shape as qm.conf keys (16 cores of one thread: Proxmox's config
has no threads; memory in MiB on 1 GiB pages; `numa: 1` + `numa0 …,hostnodes=1,policy=bind`) and the whole
process's `affinity` on node 1; `undo --apply` gives back the config's bytes and the whole host tree."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.actions.test_passthrough import changed, tree_state
from tests.console.test_capture import cli

PAIR = ["0000:da:00.0", "0000:db:00.0"]
VFS = ["0000:dc:00.1", "0000:dc:00.2"]


@pytest.fixture
def pve(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    rc, out, err = cli("demo", "reset", "--proxmox")
    assert rc == 0, err
    return tmp_path / "demo"


def _keys(conf: Path) -> dict[str, str]:
    return dict(ln.split(": ", 1) for ln in conf.read_text().splitlines() if ": " in ln)


def test_prepare_train_d_on_proxmox_writes_qm_conf_keys_and_undo_is_byte_exact(pve):
    conf = pve / "root/etc/pve/qemu-server/112.conf"
    assert _keys(conf)["name"] == "train-d"
    before, tree = conf.read_bytes(), tree_state(pve)
    rc, out, err = cli("prepare", "train-d", "--gpus", "2", "--with-nic", "--demo")
    assert rc == 0, out + err
    assert "$ qm set 112 --cores 16 --memory " in out and "virsh" not in out
    assert "no threads: the guest sees 16 cores of one thread" in out
    rc, out, err = cli("prepare", "train-d", "--gpus", "2", "--with-nic", "--demo", "--apply", "--yes")
    assert rc == 0, out + err
    keys = _keys(conf)
    held = {v.split(",")[0] for k, v in keys.items() if k.startswith("hostpci")}
    assert held == {*PAIR, "0000:da:00.1", "0000:db:00.1", *VFS}
    assert all(v.endswith(",pcie=1") for k, v in keys.items() if k.startswith("hostpci"))  # q35
    assert keys["cores"] == "16" and keys["sockets"] == "1" and keys["hugepages"] == "1024" and keys["numa"] == "1"
    assert keys["numa0"] == f"cpus=0-15,hostnodes=1,memory={keys['memory']},policy=bind"
    assert int(keys["memory"]) * 1024 >= 2 * 2 * 81559 * 1024  # twice the pair's VRAM
    assert keys["affinity"] == "56-63,120-127"  # node 1's CPUs, the whole process
    rc, out, err = cli("undo", "--demo")  # the plan: the saved config goes back through qm set
    assert rc == 0 and "$ qm set 112 --KEY VALUE … --delete KEY,…" in out and "virsh" not in out, out + err
    rc, out, err = cli("undo", "--demo", "--apply", "--yes")
    assert rc == 0, out + err
    assert conf.read_bytes() == before
    assert changed(tree, tree_state(pve)) == set()


def test_doctor_vm_memory_fix_on_proxmox_resizes_through_qm_set_and_undo_is_byte_exact(pve):
    confs = pve / "root/etc/pve/qemu-server"
    before, tree = {p.name: p.read_bytes() for p in confs.iterdir()}, tree_state(pve)
    rc, out, err = cli("doctor", "--fix", "vm-memory", "--demo")
    assert rc == 0, out + err
    assert "$ qm set 100 --memory 163840 --numa0 cpus=0-15,hostnodes=0,memory=163840,policy=bind" in out
    assert "virsh" not in out
    rc, out, err = cli("doctor", "--fix", "vm-memory", "--demo", "--apply", "--yes")
    assert rc == 0, out + err
    main, _, pending = (confs / "100.conf").read_text().partition("[PENDING]\n")  # train-a runs
    assert main.rstrip("\n") + "\n" == before["100.conf"].decode()
    assert pending == "memory: 163840\nnuma0: cpus=0-15,hostnodes=0,memory=163840,policy=bind\n"
    assert "memory: 163840\n" in (confs / "102.conf").read_text()  # train-c is shut off: at once
    rc, out, err = cli("undo", "--demo", "--apply", "--yes")
    assert rc == 0, out + err
    assert {p.name: p.read_bytes() for p in confs.iterdir()} == before
    assert changed(tree, tree_state(pve)) == set()
