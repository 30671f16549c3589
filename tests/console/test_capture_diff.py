"""`nodeconsole diff A B` and `diff A --live`: what changed between two captures of the demo host, as
a readable list and as JSON; exit 0 when nothing did, 1 when something did, 2 for bad arguments.

One demo host for the module, captured before and after a passthrough, a pin and new kernel-log
events; the CLI runs in-process. The comparison's rules (live metrics are no change, health counters
count when they grew, a running VM's config-only change, MIG on a GPU NVML cannot see) are checked on
hand-made sides, without a host."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.capture.diff import Change, Side, compare, describe, render

GPU4, AUDIO4 = "0000:9a:00.0", "0000:9a:00.1"
XID = "3,300,1950000000,-;NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=python3, GPU has fallen off the bus."


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def changes(*argv: str) -> tuple[int, list[dict]]:
    rc, out, err = cli("diff", *argv, "--json")
    assert rc in (0, 1), err
    return rc, json.loads(out)


@pytest.fixture(autouse=True)
def _read_each_capture_once(monkeypatch):
    """A capture file never changes: the CLI's diff reads each one once in this module (a side is a
    snapshot of the replay, the slow part)."""
    from nodeconsole.console.capture import diff

    real = diff.load_side
    def once(path, label=None):
        if label is not None:  # the live host, captured afresh each time
            return real(path, label)
        return _sides.get(str(path)) or _sides.setdefault(str(path), real(path))

    monkeypatch.setattr(diff, "load_side", once)


_sides: dict[str, Side] = {}


def keys(items: list[dict]) -> set[tuple[str, str, str]]:
    return {(c["topic"], c["subject"], c["what"]) for c in items}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The demo host captured four times: A as generated; B after GPU 4 was passed through to build-1;
    C after train-c was pinned to other CPUs; D after two kernel-log lines were added (one GPU event)."""
    from nodeconsole.console.demo.state import ensure_demo

    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
    base = Path(tempfile.mkdtemp(prefix="nodeconsole-test-diff-", dir=shm or tmp_path_factory.getbasetemp()))
    state = base / "demo"
    out = {"state": state}
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("NODECONSOLE_STATE_DIR", str(state))
            demo = ensure_demo(state)

            def capture(name: str) -> str:
                path = str(base / f"{name}.tar.gz")
                rc, _, err = cli("capture", "--demo", "-o", path)
                assert rc == 0, err
                return path

            out["A"] = capture("a")
            rc, _, err = cli("passthrough", "4", "--vm", "build-1", "--demo", "--apply", "--yes")
            assert rc == 0, err
            out["B"] = capture("b")
            rc, _, err = cli("pin", "train-c", "--cpus", "56-63,120-127", "--demo", "--apply", "--yes")
            assert rc == 0, err
            out["C"] = capture("c")
            kmsg = demo.root / ".sim/kmsg"
            old = kmsg.read_text() if kmsg.exists() else ""
            kmsg.write_text(old + "6,299,1949999999,-;kvm: noise\n" + XID + "\n")
            out["D"] = capture("d")
            yield out
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_passthrough_is_exactly_the_gpu_driver_owner_hostdev_and_its_audit_record(host):
    rc, items = changes(host["A"], host["B"])
    assert rc == 1
    audit = [c for c in items if c["topic"] == "audit"]
    assert len(audit) == 1 and audit[0]["what"] == "passthrough"
    assert audit[0]["after"]["result"] == "applied" and "build-1" in audit[0]["after"]["title"]
    assert keys(items) == {
        ("gpus", GPU4, "driver"), ("gpus", GPU4, "owner"), ("gpus", GPU4, "VMs"), ("gpus", GPU4, "driver_override"),
        ("devices", AUDIO4, "driver"), ("devices", AUDIO4, "driver_override"),
        ("vms", "build-1", "hostdevs"), ("audit", audit[0]["subject"], "passthrough")}
    by = {(c["subject"], c["what"]): (c["before"], c["after"]) for c in items}
    assert by[(GPU4, "driver")] == ("nvidia", "vfio-pci")
    assert by[(GPU4, "owner")] == ("host", "vfio")
    assert by[(GPU4, "VMs")] == (["train-c"], ["build-1", "train-c"])  # train-c's config held it already
    assert by[(AUDIO4, "driver")] == ("snd_hda_intel", "vfio-pci")
    assert by[("build-1", "hostdevs")] == ([], [f"pci {GPU4}", f"pci {AUDIO4}"])
    # grouped by topic, in the documented order; every change has the five keys
    topics = [c["topic"] for c in items]
    assert topics == sorted(topics, key=["gpus", "devices", "vms", "audit"].index)
    assert all(set(c) == {"topic", "subject", "what", "before", "after"} for c in items)


def test_the_readable_list_groups_by_topic(host):
    rc, out, _ = cli("diff", host["A"], host["B"])
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"A: {host['A']} (gpu-node-01, captured ") and lines[1].startswith(f"B: {host['B']}")
    assert lines[2] == "8 changes"
    assert lines[3:8] == ["GPUs: drivers and owners",
                          f"  GPU 4 {GPU4} driver: nvidia → vfio-pci",
                          f"  GPU 4 {GPU4} owner: host → vfio",
                          f"  GPU 4 {GPU4} VMs: +build-1",
                          f"  GPU 4 {GPU4} driver_override: (none) → vfio-pci"]
    assert f"  build-1 hostdevs: +pci {GPU4}, +pci {AUDIO4}" in lines
    assert lines.index("Audit records (changes made in between)") == len(lines) - 2
    assert lines[-1].split()[1] == "passthrough:" and "(applied, " in lines[-1]


def test_a_capture_against_itself_is_no_change(host):
    rc, out, err = cli("diff", host["B"], host["B"])
    assert (rc, err) == (0, "") and out.splitlines()[-1] == "no changes"
    assert changes(host["B"], host["B"]) == (0, [])


def test_a_pin_shows_the_vms_pins(host):
    rc, items = changes(host["B"], host["C"])
    assert rc == 1
    assert {k for k in keys(items) if k[0] != "audit"} == {("vms", "train-c", "vCPU pins"),
                                                           ("vms", "train-c", "emulator pins")}
    pins = next(c for c in items if c["what"] == "vCPU pins")
    assert pins["before"]["0"] == "48" and pins["after"]["0"] == "56" and len(pins["after"]) == 16
    emu = next(c for c in items if c["what"] == "emulator pins")
    assert (emu["before"], emu["after"]) == (None, "32-33,96-97")
    assert [c["what"] for c in items if c["topic"] == "audit"] == ["pin"]
    rc, out, _ = cli("diff", host["B"], host["C"])
    assert "  train-c vCPU pins: 0:48→56, 1:112→120," in out


def test_new_kernel_log_events_are_listed_old_ones_not(host):
    rc, items = changes(host["C"], host["D"])
    assert rc == 1
    assert keys(items) == {("events", "0000:9b:00.0", "Xid 79")}
    event = items[0]["after"]
    assert event["vms"] == ["train-b"] and "fallen off the bus" in event["text"]
    rc, out, _ = cli("diff", host["C"], host["D"])
    assert "  0000:9b:00.0 Xid 79 at " in out and out.rstrip().endswith("(VM train-b)")


def test_live_compares_a_capture_with_the_host_now(host, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(host["state"]))
    rc, out, err = cli("diff", host["C"], "--live", "--demo")
    assert rc == 1, out + err
    lines = out.splitlines()
    assert lines[1].startswith("B: live (gpu-node-01, captured ") and lines[2] == "1 change"
    assert lines[3] == "New kernel-log GPU events" and lines[4].startswith("  0000:9b:00.0 Xid 79 at ")
    assert err == "nodeconsole diff: capturing the host now\n"


@pytest.mark.parametrize("argv, why", [
    (("A",), "diff needs two captures"),
    (("A", "--demo"), "--demo names the live host: add --live"),
    (("A", "B", "--live"), "give a second capture B or --live, not both"),
    (("A", "--replay", "A"), "not --replay"),
    (("missing", "A"), "missing: no such file"),
    (("junk", "A"), "junk: not a readable archive"),
])
def test_bad_arguments_say_why_in_one_line(host, tmp_path, argv, why):
    junk = tmp_path / "junk"
    junk.write_text("not an archive\n")
    names = {"A": host["A"], "B": host["B"], "missing": str(tmp_path / "missing"), "junk": str(junk)}
    rc, out, err = cli("diff", *(names.get(a, a) for a in argv))
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and why in err, err


# -- the rules, on hand-made sides --------------------------------------------------------------------

def gpu(**kw) -> dict:
    base = {"address": "0000:18:00.0", "index": 0, "name": "H100", "driver": "nvidia",
            "owner": {"kind": "host", "vms": []}, "utilization_gpu": 10, "temperature_c": 40, "power_w": 100.0,
            "memory_used_mib": 100, "ecc_volatile_uncorrected": 0, "ecc_aggregate_uncorrected": 3,
            "retired_pages": 0, "remapped_rows_pending": 0, "remapped_rows_failure": 0,
            "mig": {"mode": "enabled", "pending_mode": "enabled", "instances": [
                {"profile": "3g.40gb", "start": 0, "size": 4, "compute_instances": ["3g.40gb"]}]},
            "vgpu": {"instances": []}}
    base.update(kw)
    return base


def vm(**kw) -> dict:
    base = {"name": "web", "state": "running", "vcpus": 2, "pins": [{"vcpu": 0, "cpus": [4]}], "emulator_pins": [],
            "memory_kib": 4194304, "hostdevs": [], "cpu_percent": 12.0, "uuid": "u-1", "numa_mode": None,
            "numa_nodeset": [], "hugepages_kib": None}
    base.update(kw)
    return base


def config(**kw) -> dict:
    base = {"uuid": "u-1", "vcpus": 2, "memory_kib": 4194304, "current_memory_kib": 4194304, "pins": {"0": "4"},
            "emulator_pins": None, "numatune": None, "hugepages_kib": None, "hostdevs": []}
    base.update(kw)
    return base


def side(label="a", gpus=(), vms=(), vm_config=None, load=None, **kw) -> Side:
    snapshot = {"host": {"hostname": "h"}, "gpus": list(gpus), "vms": list(vms), "pci_devices": [],
                "iommu": {"enabled": True, "groups": []}, "numa_nodes": [], "sources": {"libvirt": "ok"},
                "load": load or {"load_avg": [0.1, 0, 0]}}
    manifest = {"hostname": "h", "captured_at": "t", "versions": {"kernel": "6.8"}, "sources": {}}
    manifest.update(kw.pop("manifest", {}))
    if "audit" in kw:
        kw["audit"] = [AuditRecord.from_dict(r) for r in kw["audit"]]
    return Side(label=label, manifest=manifest, snapshot=snapshot, vm_config=vm_config or {"web": config()}, **kw)


def test_live_metrics_are_no_change_and_counters_count_when_they_grew():
    a = side(gpus=[gpu()], vms=[vm()])
    b = side(gpus=[gpu(utilization_gpu=99, temperature_c=80, power_w=650.0, memory_used_mib=70000,
                       ecc_aggregate_uncorrected=5, ecc_volatile_uncorrected=None, retired_pages=2)],
             vms=[vm(cpu_percent=190.0)], load={"load_avg": [9.0, 8, 7]})
    got = [(c.topic, c.what, c.before, c.after) for c in compare(a, b).changes]
    assert got == [("health", "ecc_aggregate_uncorrected", 3, 5), ("health", "retired_pages", 0, 2)]
    links = [{"link": 0, "active": True, "replay": 1, "crc_flit": 0}, {"link": 1, "active": True, "replay": 0}]
    grown = [{"link": 0, "active": True, "replay": 1, "crc_flit": 4}, {"link": 1, "active": False, "replay": 0}]
    got = [(c.what, c.before, c.after) for c in compare(side(gpus=[gpu(nvlinks=links, pcie_replay_count=2)]),
                                                        side(gpus=[gpu(nvlinks=grown, pcie_replay_count=9)])).changes]
    assert got == [("pcie_replay_count", 2, 9), ("nvlink 0 crc_flit", 0, 4)]
    # a counter that went down (a volatile count after a reboot) is no change
    assert compare(side(gpus=[gpu(ecc_aggregate_uncorrected=5)]), side(gpus=[gpu()])).changes == []


def test_a_running_vms_config_only_change_is_named_apart():
    a = side(vms=[vm()])
    b = side(vms=[vm()], vm_config={"web": config(pins={"0": "6"}, memory_kib=8388608)})
    got = {(c.what, str(c.before), str(c.after)) for c in compare(a, b).changes}
    assert got == {("vCPU pins (next boot)", "{'0': '4'}", "{'0': '6'}"), ("memory", "4194304", "8388608")}
    # changed live and in the config alike: one change
    c = side(vms=[vm(pins=[{"vcpu": 0, "cpus": [6]}])], vm_config={"web": config(pins={"0": "6"})})
    assert [(x.what, x.after) for x in compare(a, c).changes] == [("vCPU pins", {"0": "6"})]
    # a VM defined in between; one undefined
    d = side(vms=[vm(), vm(name="db", uuid="u-2")], vm_config={"web": config(), "db": config(uuid="u-2")})
    assert [(x.subject, x.what) for x in compare(a, d).changes] == [("db", "added")]
    assert [(x.subject, x.what) for x in compare(d, a).changes] == [("db", "removed")]


def test_mig_is_compared_only_where_both_sides_read_it():
    on_vfio = gpu(driver="vfio-pci", mig={"mode": "N/A", "pending_mode": "N/A", "instances": []})
    assert [c.what for c in compare(side(gpus=[gpu()]), side(gpus=[on_vfio])).changes] == ["driver"]
    two = gpu(mig={"mode": "enabled", "pending_mode": "enabled", "instances": [
        {"profile": "1g.10gb", "start": 6, "size": 1, "compute_instances": ["1g.10gb"]}]})
    (c,) = compare(side(gpus=[gpu()]), side(gpus=[two])).changes
    assert (c.topic, c.what, c.before, c.after) == ("mig", "instances", ["3g.40gb at slice 0"], ["1g.10gb at slice 6"])


def test_versions_kernel_files_doctor_and_audit():
    a = side(cmdline="ro quiet", modules={"nvidia", "kvm"}, files={"/etc/default/grub": "X=1\n"},
             audit=[{"id": "r1", "action": "pin"}],
             doctor={"checks": [{"id": "iommu", "status": "fail", "finding": "off"}]})
    b = side(cmdline="ro quiet intel_iommu=on", modules={"vfio_pci", "kvm"},
             files={"/etc/default/grub": "X=2\n", "/etc/modules-load.d/vfio.conf": "vfio\n"},
             audit=[{"id": "r1", "action": "pin"}, {"id": "r2", "action": "doctor fix", "title": "Fix iommu",
                                                    "result": "applied", "who": {"user": "root"}}],
             doctor={"checks": [{"id": "iommu", "status": "pass", "finding": "on"}]},
             manifest={"versions": {"kernel": "6.9"}})
    d = compare(a, b)
    got = [(c.topic, c.subject, c.what) for c in d.changes]
    assert got == [("versions", "kernel", "version"), ("kernel", "/proc/cmdline", "command line"),
                   ("kernel", "vfio_pci", "module"), ("kernel", "nvidia", "module"),
                   ("files", "/etc/default/grub", "content"), ("files", "/etc/modules-load.d/vfio.conf", "added"),
                   ("audit", "r2", "doctor fix"), ("doctor", "iommu", "status")]
    text = [line for _style, line in render(d)]
    assert "  /proc/cmdline: +intel_iommu=on" in text and "      +X=2" in text
    assert "  iommu status: fail → pass — on" in text and "  r2 doctor fix: Fix iommu (applied, root)" in text
    assert d.to_dicts()[-1] == {"topic": "doctor", "subject": "iommu", "what": "status", "before": "fail",
                               "after": "pass", "note": "on"}


def test_host_text_stays_text():
    c = Change("vms", "[bold]x\x1b[31m", "hostdevs", [], ["pci 0000:01:00.0"])
    assert describe(c) == ["[bold]x\x1b[31m hostdevs: +pci 0000:01:00.0"]  # printed through the CLI's visible writer
    from nodeconsole.screens.modals.diff import diff_text

    shown = diff_text([("change", describe(c)[0])])
    assert shown.plain.startswith("[bold]x\\x1b[31m") and not shown.spans
