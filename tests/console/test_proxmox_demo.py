"""`demo reset --proxmox`: the demo host as a Proxmox VE host, its VMs qemu-server configs changed through
the simulated qm. Passthrough to a stopped VM adds hostpciN lines and `undo --apply` gives back the
config's bytes; to a running VM the change waits in [PENDING]; a locked VM is refused with the host as it
was."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.console.test_capture import cli

GPU4, GPU4_AUDIO = "0000:9a:00.0", "0000:9a:00.1"


@pytest.fixture
def pve(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    rc, out, err = cli("demo", "reset", "--proxmox")
    assert rc == 0 and "as a Proxmox VE host" in out, err
    return tmp_path / "demo/root/etc/pve/qemu-server"


def vms(argv: tuple[str, ...] = ()) -> dict[str, dict]:
    rc, out, err = cli("snapshot", "--demo", "--json", *argv)
    assert rc == 0, err
    return {v["name"]: v for v in json.loads(out)["vms"]}


def test_the_demo_vms_are_proxmox_vms_with_vmids(pve):
    got = vms()
    assert {n: (v["vmid"], v["hypervisor"]) for n, v in got.items() if n.startswith("train-")} == {
        "train-a": (100, "proxmox"), "train-b": (101, "proxmox"), "train-c": (102, "proxmox"),
        "train-d": (112, "proxmox")}
    a = got["train-a"]
    assert (a["state"], a["vcpus"], a["memory_kib"], a["hugepages_kib"], a["numa_mode"]) == (
        "running", 16, 131072 * 1024, 1048576, "strict")
    assert {h["address"] for h in a["hostdevs"]} >= {"0000:19:00.0", "0000:19:00.1"}
    assert got["vgpu-desk-1"]["hostdevs"][0]["type"] == "mdev" and got["vgpu-desk-1"]["hostdevs"][0]["gpu"]
    assert got["build-1"]["state"] == "shut off" and sorted(p.name for p in pve.iterdir())[0] == "100.conf"
    assert all(not v["config_problems"] for v in got.values())


def test_passthrough_to_a_stopped_vm_and_undo_gives_back_the_bytes(pve):
    before = (pve / "111.conf").read_bytes()
    rc, out, err = cli("passthrough", "4", "--vm", "111", "--demo", "--apply", "--yes")  # build-1 by its vmid
    assert rc == 0, out + err
    text = (pve / "111.conf").read_text()
    assert f"hostpci0: {GPU4},pcie=1\nhostpci1: {GPU4_AUDIO},pcie=1\n" in text and "[PENDING]" not in text
    assert {h["address"] for h in vms()["build-1"]["hostdevs"]} == {GPU4, GPU4_AUDIO}
    rc, out, err = cli("undo", "--demo", "--apply", "--yes")
    assert rc == 0, out + err
    assert (pve / "111.conf").read_bytes() == before


def test_passthrough_to_a_running_vm_waits_in_pending(pve):
    main_before = (pve / "100.conf").read_text()
    rc, out, err = cli("passthrough", "4", "--vm", "train-a", "--demo", "--apply", "--yes")
    assert rc == 0, out + err
    main, _, pending = (pve / "100.conf").read_text().partition("\n[PENDING]\n")
    assert main == main_before  # the running config is as it was
    assert pending == f"hostpci3: {GPU4},pcie=1\nhostpci4: {GPU4_AUDIO},pcie=1\n"
    a = vms()["train-a"]
    assert a["pending"] == ["hostpci3", "hostpci4"] and GPU4 not in {h["address"] for h in a["hostdevs"]}
    rc, out, _ = cli("snapshot", "--demo")
    assert "pending hostpci3 hostpci4" in next(ln for ln in out.splitlines() if ln.strip().startswith("train-a"))
    assert cli("undo", "--demo", "--apply", "--yes")[0] == 0
    assert (pve / "100.conf").read_text() == main_before


def test_a_locked_vm_is_refused_and_the_host_is_as_it_was(pve):
    (pve / "111.conf").write_text((pve / "111.conf").read_text() + "lock: backup\n")
    before = (pve / "111.conf").read_bytes()
    assert vms()["build-1"]["lock"] == "backup"
    rc, out, err = cli("passthrough", "4", "--vm", "build-1", "--demo", "--apply", "--yes")
    # refused at plan time (the backend's own refusal, should a lock come between plan and apply, is
    # tests/console/test_proxmox_qm.py's)
    assert rc != 0 and "VM 111 is locked (backup)" in out + err and "Refused: nothing will be changed" in out
    assert (pve / "111.conf").read_bytes() == before
    gpu = next(g for g in json.loads(cli("snapshot", "--demo", "--json")[1])["gpus"] if g["address"] == GPU4)
    assert gpu["driver"] == "nvidia"


def test_reboot_keeps_the_configs_and_runs_the_vms_that_ran(pve):
    (pve / "111.conf").write_text((pve / "111.conf").read_text() + "description: kept\n")
    kept = (pve / "111.conf").read_bytes()
    rc, out, err = cli("demo", "reboot")
    assert rc == 0, out + err
    assert (pve / "111.conf").read_bytes() == kept
    got = vms()
    assert (got["train-a"]["state"], got["build-1"]["state"]) == ("running", "shut off")
