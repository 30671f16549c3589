"""A capture of a Proxmox VE tree carries its VM configs, mappings and run files, replays as the same VMs,
and `--redact` takes out its VM names and descriptions."""
from __future__ import annotations

import json

from tests.console.test_capture import cli, members
from tests.console.test_proxmox_reader import pve_tree


def vms_of(out: str) -> list[dict]:
    return [{k: v.get(k) for k in ("name", "vmid", "state", "vcpus", "hostdevs", "lock", "pending")}
            for v in json.loads(out)["vms"]]


def test_capture_carries_the_configs_and_replays_the_same_vms(tmp_path):
    tree = tmp_path / "tree"
    pve_tree(tree)
    archive = tmp_path / "pve.tar.gz"
    rc, _, err = cli("capture", "--root", str(tree), "-o", str(archive))
    assert rc == 0, err
    names = set(members(archive))
    for rel in ("etc/pve/qemu-server/100.conf", "etc/pve/qemu-server/104.conf", "etc/pve/mapping/pci.cfg",
                "run/qemu-server/100.pid", "proc/4242/cmdline"):
        assert f"root/{rel}" in names, rel
    rc, live, _ = cli("snapshot", "--root", str(tree), "--json")
    rc2, replayed, err = cli("snapshot", "--replay", str(archive), "--json")
    assert rc == rc2 == 0, err
    assert vms_of(replayed) == vms_of(live)
    assert {v["name"]: v["state"] for v in vms_of(replayed)}["train-a"] == "running"
    assert json.loads(replayed)["sources"]["libvirt"] == "ok"


def test_redacted_capture_has_no_vm_names_nor_descriptions(tmp_path):
    tree = tmp_path / "tree"
    pve_tree(tree)
    (tree / "etc/pve/mapping/pci.cfg").write_text(
        (tree / "etc/pve/mapping/pci.cfg").read_text() + "\tdescription the ml-team's H100s\n")
    archive = tmp_path / "pve-redacted.tar.gz"
    rc, _, err = cli("capture", "--root", str(tree), "--redact", "-o", str(archive))
    assert rc == 0, err
    everything = b"".join(data or b"" for _kind, _target, data in members(archive).values())
    for secret in (b"train-a", b"infer-b", b"stale-map", b"golden", b"training box", b"ml-team"):
        assert secret not in everything, secret
    conf = members(archive)["root/etc/pve/qemu-server/100.conf"][2]
    assert conf.startswith(b"#(redacted)\nname: vm-") and b"hostpci0: 41:00,pcie=1,x-vga=1" in conf
    rc, out, err = cli("snapshot", "--replay", str(archive), "--json")
    assert rc == 0, err
    assert sorted(v["vmid"] for v in json.loads(out)["vms"]) == [100, 101, 102, 103, 104]
