"""The doctor on a Proxmox VE host (`demo reset --proxmox`): its own checks — vfio-pci claiming the GPUs
the VMs take before the NVIDIA driver (modprobe.d ids/softdep, driverctl), the PCI resource mappings
against sysfs, the hookscripts the configs name — and nothing libvirt-only failing there; on a libvirt host
the Proxmox checks are skipped."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.console.test_capture import cli

PASSED = ("0000:19:00.0", "0000:9a:00.0", "0000:9b:00.0")  # GPUs 1, 4, 5: whole in train-a, train-c, train-b


@pytest.fixture
def pve(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    rc, out, err = cli("demo", "reset", "--proxmox")
    assert rc == 0, err
    return tmp_path / "demo/root"


def doctor() -> dict[str, dict]:
    rc, out, err = cli("doctor", "--demo", "--json")
    assert rc in (0, 1), err
    return {c["id"]: c for c in json.loads(out)["checks"]}


def test_nothing_fails_on_the_proxmox_demo_and_its_checks_run(pve):
    checks = doctor()
    assert not [(i, c["finding"]) for i, c in checks.items() if c["status"] == "fail"]
    vfio = checks["pve-vfio"]
    assert vfio["status"] == "warn" and "not claimed by vfio-pci at boot" in vfio["finding"]
    assert all(a in vfio["finding"] for a in PASSED) and "VM 100's config" in vfio["finding"]
    # the host keeps GPUs of the same model: by address, not by ids=
    assert vfio["fix"]["commands"] == [f"driverctl set-override {a} vfio-pci" for a in PASSED]
    assert (checks["pve-mappings"]["status"], checks["pve-hookscripts"]["status"]) == ("pass", "pass")
    assert checks["pve-mappings"]["finding"] == "10 mapping entries of node gpu-node-01 match sysfs"
    assert "qm set 100 --memory 163840" in checks["vm-memory"]["fix"]["commands"]


def test_driverctl_overrides_claim_the_gpus(pve):
    (pve / "etc/driverctl.d").mkdir(parents=True)
    for a in PASSED:
        (pve / f"etc/driverctl.d/pci-{a}").write_text("vfio-pci\n")
    c = doctor()["pve-vfio"]
    assert c["status"] == "pass" and c["fix"] is None and "0000:19:00.0" in c["finding"]


def test_vfio_ids_without_a_softdep_fail_and_take_the_hosts_gpus_too(pve):
    (pve / "etc/modprobe.d/vfio.conf").write_text("options vfio-pci ids=10de:2330,10de:22a3\n")
    c = doctor()["pve-vfio"]
    assert c["status"] == "fail" and "nothing loads vfio-pci before nvidia" in c["finding"]
    assert "vfio-pci ids= also takes GPU 0 0000:18:00.0" in c["finding"]
    (pve / "etc/modprobe.d/vfio.conf").write_text("options vfio-pci ids=10de:2330\nsoftdep nvidia pre: vfio-pci\n")
    c = doctor()["pve-vfio"]
    assert c["status"] == "warn" and "nothing loads" not in c["finding"] and "also takes GPU 0" in c["finding"]


def test_a_mapping_that_no_longer_matches_sysfs_fails(pve):
    cfg = pve / "etc/pve/mapping/pci.cfg"
    cfg.write_text(cfg.read_text().replace("map id=10de:2330,iommugroup=11,", "map id=10de:20b5,iommugroup=11,"))
    c = doctor()["pve-mappings"]
    assert c["status"] == "fail"
    assert "mapping gpus (/etc/pve/mapping/pci.cfg:3): 0000:19:00.0 is 10de:2330 in sysfs, the mapping says " \
           "id=10de:20b5: Proxmox refuses to start a VM with it" in c["finding"]


def test_a_hookscript_named_but_absent_fails(pve):
    conf = pve / "etc/pve/qemu-server/100.conf"
    conf.write_text(conf.read_text() + "hookscript: local:snippets/gpu-hook.sh\n")
    c = doctor()["pve-hookscripts"]
    assert c["status"] == "fail" and "VM 100 names hookscript local:snippets/gpu-hook.sh, absent " \
                                     "(/var/lib/vz/snippets/gpu-hook.sh): the VM does not start" in c["finding"]
    (pve / "var/lib/vz/snippets").mkdir(parents=True)
    (pve / "var/lib/vz/snippets/gpu-hook.sh").write_text("#!/bin/sh\n")
    c = doctor()["pve-hookscripts"]
    assert (c["status"], c["finding"]) == ("pass", "1 hookscript(s) named, each present")


def test_the_proxmox_checks_are_skipped_on_a_libvirt_host(state_ro):
    checks = doctor()
    for cid in ("pve-vfio", "pve-mappings", "pve-hookscripts"):
        assert (checks[cid]["status"], checks[cid]["finding"]) == ("skip", "not a Proxmox VE host (no /etc/pve/qemu-server)")
