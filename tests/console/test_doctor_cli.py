"""`nodeconsole doctor` end to end, in-process: the configured demo host keeps the honest problems its
documentation lists, the bare demo is carried to ready by `--fix … --apply` and one `demo reboot`
(pending reboot, then took effect), the JSON interface and exit codes, bad arguments, and every real
captured host (doctor runs, and nothing the tree lacks passes)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.doctor.model import CHECK_IDS, GROUPS
from tests.console.test_sysfs_hosts import TREES, hosts  # noqa: F401 - the session fixture


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _doctor(capsys, *argv: str) -> tuple[int, dict]:
    rc, out, _ = _run(capsys, "doctor", *argv, "--json")
    return rc, json.loads(out)


def _statuses(d: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in d["checks"]}


@pytest.fixture
def demo(state_ro) -> Path:
    """The default demo host, shared by the tests of this module that only read it."""
    return state_ro


# What docs/demo-host.md promises of the configured demo: a ready host with a few honest problems.
DEFAULT_DEMO = {
    "kvm": "pass", "iommu": "pass", "iommu-pt": "pass", "interrupt-remapping": "pass", "acs-override": "pass",
    "vfio-modules": "pass", "nouveau": "pass", "nvidia-driver": "pass", "host-cores": "pass",
    "vcpu-commit": "warn", "numa-balancing": "pass", "acs": "warn", "pcie-link": "warn", "mig-pending": "pass",
    "vgpu-host": "pass", "vm-memory": "warn", "libvirtd": "pass", "vhost-net": "pass", "tun": "pass",
    "cgroups": "pass", "secure-guest": "skip",
    "pve-vfio": "skip", "pve-mappings": "skip", "pve-hookscripts": "skip",  # not a Proxmox VE host
}


def test_default_demo(capsys, demo):
    rc, d = _doctor(capsys, "--demo")
    assert rc == 0 and d["summary"]["fail"] == 0
    assert d["schema"] == 1 and d["role"] == "mixed" and d["boot_id"]
    assert d["notes"] == []  # every source answered, no check broke
    got = _statuses(d)
    assert got.pop("hugepages") in ("pass", "warn")
    assert got == DEFAULT_DEMO
    checks = {c["id"]: c for c in d["checks"]}
    assert "104 vCPUs of the defined VMs on 128 host threads = 81 %" in checks["vcpu-commit"]["finding"]
    link = checks["pcie-link"]["finding"]
    assert "0000:bb:00.0 at x8 of x16" in link and "trained below its width: GPU 7 0000:bb:00.0 at" in link
    assert "9a:00.0" not in link.split(";")[0]  # an idle GPU at low speed is not downtrained
    acs = checks["acs"]["finding"]
    assert "has no ACS: group" in acs and "GPU 6, GPU 7" in acs and "through the root complex" in acs
    assert "below 2x their GPUs' memory" in checks["vm-memory"]["finding"]
    for c in d["checks"]:
        assert set(c) == {"id", "group", "title", "status", "finding", "why", "evidence", "fix", "pending",
                          "applies", "applies_why"}
        if c["status"] in ("warn", "fail"):
            assert set(c["fix"]) == {"summary", "commands", "needs_reboot", "plannable"} and c["fix"]["summary"]
        if c["status"] == "pass":
            assert c["evidence"], c["id"]  # a pass says what it read


def test_table(capsys, demo):
    rc, out, err = _run(capsys, "doctor", "--demo")
    assert rc == 0 and not err
    heads = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert heads[:len(GROUPS)] == [g for g, _ in GROUPS]
    assert "  WARN  vcpu-commit" in out and "  PASS  kvm" in out
    assert "fix [by hand]: reseat the card" in out
    assert any(line.startswith("17 pass, 4 warn, 0 fail, 4 skip (role mixed)") or
               line.startswith("16 pass, 5 warn, 0 fail, 4 skip (role mixed)") for line in out.splitlines())


def test_roles(capsys, demo):
    rc, d = _doctor(capsys, "--demo", "--role", "passthrough")
    got = _statuses(d)
    assert got["mig-pending"] == "skip" and got["vgpu-host"] == "pass"  # vGPU is in use: checked anyway
    rc, d = _doctor(capsys, "--demo", "--role", "vgpu")
    assert _statuses(d)["vfio-modules"] == "skip" and _statuses(d)["nouveau"] == "pass"  # every role


@pytest.mark.parametrize("argv, message", [
    (["--fix", "iommmu"], "unknown check 'iommmu': did you mean iommu?"),
    (["--fix", "kvm,bogus"], "unknown check 'bogus'"),
    (["--apply"], "--apply and --yes go with --fix"),
    (["--fix", "iommu", "--json"], "--json shows the report"),
    (["--role", "gaming"], "invalid choice: 'gaming'"),
])
def test_bad_arguments(capsys, demo, argv, message):
    rc, out, err = _run(capsys, "doctor", "--demo", *argv)
    assert rc == 2 and not out and message in err and len(err.strip().splitlines()) == 1


def test_bare_demo_to_ready_with_one_reboot(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "bare"))
    assert _run(capsys, "demo", "reset", "--bare", "--demo")[0] == 0
    rc, d = _doctor(capsys, "--demo")
    got = _statuses(d)
    assert rc == 1
    assert {k: got[k] for k in ("kvm", "iommu", "iommu-pt", "vfio-modules", "nouveau", "nvidia-driver",
                                "host-cores", "vm-memory")} == {
        "kvm": "pass", "iommu": "fail", "iommu-pt": "warn", "vfio-modules": "fail", "nouveau": "fail",
        "nvidia-driver": "warn", "host-cores": "warn", "vm-memory": "pass"}
    assert got["interrupt-remapping"] == "skip"  # the IOMMU is off
    todo = [c["id"] for c in d["checks"] if c["status"] in ("warn", "fail") and c["fix"]["plannable"]]
    assert todo == ["iommu", "iommu-pt", "vfio-modules", "nouveau", "nvidia-driver", "vhost-net", "hugepages",
                    "host-cores"]
    assert {k: got[k] for k in ("libvirtd", "vhost-net", "tun", "cgroups", "secure-guest")} == {
        "libvirtd": "pass", "vhost-net": "warn", "tun": "pass", "cgroups": "pass", "secure-guest": "skip"}
    rc, out, err = _run(capsys, "doctor", "--demo", "--fix", *todo, "--apply", "--yes")
    assert rc == 0, err
    rc, d = _doctor(capsys, "--demo")
    pending = {c["id"]: c["pending"] for c in d["checks"] if c["pending"]}
    assert set(pending) == set(todo) and all(p.startswith("pending reboot (change ") for p in pending.values())
    assert rc == 1  # the IOMMU stays off until the reboot
    assert _run(capsys, "demo", "reboot", "--demo")[0] == 0
    rc, d = _doctor(capsys, "--demo")
    assert rc == 0, [(c["id"], c["finding"]) for c in d["checks"] if c["status"] == "fail"]
    for c in d["checks"]:
        if c["id"] in todo:
            assert c["status"] == "pass" and c["pending"].startswith("took effect after reboot"), c
        assert c["status"] in ("pass", "skip") or c["fix"] is not None  # every warning says what to do
    assert {c["id"]: c["status"] for c in d["checks"] if c["group"] == "hypervisor"} == {
        "libvirtd": "pass", "vhost-net": "pass", "tun": "pass", "cgroups": "pass", "secure-guest": "skip"}


@pytest.mark.parametrize("name", TREES)
def test_real_captured_hosts(capsys, hosts, name):  # noqa: F811 - the fixture
    root, _, _ = hosts.get(name)
    rc, d = _doctor(capsys, "--root", str(root))
    assert rc == (1 if d["summary"]["fail"] else 0)
    assert [c["id"] for c in d["checks"]] == list(CHECK_IDS)
    got = _statuses(d)
    # A captured tree holds /sys and /proc only: no /etc, no /dev/kvm, no /sys/module, no NVML, no libvirt.
    # Only what the kernel command line alone decides may pass, and the cgroups its /proc/mounts shows.
    assert {k for k, s in got.items() if s == "pass"} <= {"iommu-pt", "acs-override", "cgroups"}
    for cid in ("kvm", "vfio-modules", "nouveau", "nvidia-driver", "host-cores", "hugepages", "vcpu-commit",
                "numa-balancing", "vm-memory", "mig-pending", "interrupt-remapping", "libvirtd", "vhost-net",
                "tun"):
        assert got[cid] == "skip", (cid, got[cid])
    for c in d["checks"]:
        if c["status"] == "skip":
            assert c["finding"] and c["fix"] is None
    assert all(n.startswith(("nvml: ", "libvirt: ")) for n in d["notes"]), d["notes"]  # no check broke
    assert any("libvirt" in c["finding"] for c in d["checks"] if c["id"] == "vm-memory")
