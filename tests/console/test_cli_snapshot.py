"""`nodeconsole snapshot` end to end: the JSON interface on the demo host and on every real captured
host (against lstopo), bad arguments, and faults injected into each source."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.collector import Collector
from nodeconsole.console.cpulist import parse_cpulist
from tests.console.test_sysfs_hosts import TREES, hosts  # noqa: F401 - the session fixture


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture()
def demo_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    return tmp_path / "demo"


def test_demo_snapshot_json_has_every_ownership_state(capsys, demo_dir):
    rc, out, _ = _run(capsys, "snapshot", "--demo", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["schema"] == 1 and all(v == "ok" for v in d["sources"].values())
    gpus = d["gpus"]
    assert len(gpus) == 10
    assert {g["owner"]["kind"] for g in gpus} == {"host", "vfio", "mig", "vgpu", "unbound"}
    bad = [g for g in d["iommu"]["groups"] if not g["viable"]]
    assert len(bad) == 1 and "bound to nvme" in bad[0]["reason"]
    mig = next(g for g in gpus if g["owner"]["kind"] == "mig")
    assert mig["mig"]["mode"] == "enabled"
    assert [(i["profile"], i["start"], i["size"]) for i in mig["mig"]["instances"]] == [
        ("3g.40gb", 0, 4), ("2g.20gb", 4, 2), ("1g.10gb", 6, 1)]
    vg = next(g for g in gpus if g["owner"]["kind"] == "vgpu")
    assert len(vg["vgpu"]["instances"]) == 2 and all(i["vm"] for i in vg["vgpu"]["instances"])
    assert 10 <= len(d["vms"]) <= 14
    vfio = [g for g in gpus if g["owner"]["kind"] == "vfio"]
    for g in vfio:
        (vm,) = g["owner"]["vms"]
        v = next(v for v in d["vms"] if v["name"] == vm)
        assert any(h["gpu"] == g["address"] for h in v["hostdevs"])
        assert v["pins"] and all(isinstance(c, int) for p in v["pins"] for c in p["cpus"])
    assert any(g["driver"] is None for g in gpus)
    assert all(isinstance(c["id"], int) and isinstance(c["core"], int) for c in d["cpus"])


def test_readable_summary(capsys, demo_dir):
    rc, out, _ = _run(capsys, "snapshot", "--demo")
    assert rc == 0
    assert "GPUs (10)" in out and "IOMMU on" in out and "Problems" in out


@pytest.mark.parametrize("argv,needle", [
    (["snapshot", "--root", "/nonexistent-dir"], "not a directory"),
    (["snapshot", "--demo", "--root", "/"], "exclusive"),
    (["snapshot", "--bogus"], "unrecognized arguments"),
    (["--interval", "0"], "positive"),
    (["nosuchcommand"], "invalid choice"),
    (["snapshot", "--demo", "--libvirt", "qemu:///system"], "cannot be combined with --demo"),
])
def test_bad_arguments_one_line_exit_2(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and needle in err


@pytest.mark.parametrize("name", TREES)
def test_snapshot_root_agrees_with_lstopo(capsys, hosts, name):  # noqa: F811
    root, _, oracle = hosts.get(name)
    rc, out, _ = _run(capsys, "snapshot", "--root", str(root), "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["sources"]["sysfs"] == "ok"
    assert d["sources"]["libvirt"].startswith("unavailable") and d["sources"]["nvml"].startswith("unavailable")
    online = sorted(c["id"] for c in d["cpus"] if c["online"])
    assert online == sorted(oracle["pus"]) or online == sorted(set(oracle["pus"]) | set(
        parse_cpulist(oracle.get("disallowed_pus") or "")))
    assert sorted({c["package"] for c in d["cpus"] if c["online"]}) == sorted(p["os_index"] for p in oracle["packages"])
    assert len({(c["package"], c["core"]) for c in d["cpus"] if c["online"]}) == len(oracle["cores"])
    nodes = {n["id"]: n["cpus"] for n in d["numa_nodes"] if n["cpus"]}
    for n in oracle["numa_nodes"]:
        if not n["cpuless"]:
            assert nodes[n["os_index"]] == list(parse_cpulist(n["cpuset"])), n
    ours = {p["address"]: p for p in d["pci_devices"]}
    for dev in oracle["pci_devices"]:
        if dev["is_bridge"]:
            continue
        p = ours[dev["busid"]]
        want = dev["numa_nodes"]
        assert (p["numa_node"] is None and len(want) != 1) or [p["numa_node"]] == want, (dev["busid"], want)


# -- faults: every source failure degrades the snapshot, never raises ---------------------------------
def _demo_collector(demo_dir) -> Collector:
    from nodeconsole.console.seams import demo_host

    return Collector(demo_host())


def test_permission_denied_on_sysfs(demo_dir, monkeypatch):
    import os

    c = _demo_collector(demo_dir)
    pci = str(c.seams.root.path / "sys/bus/pci/devices")
    real_listdir = os.listdir

    def listdir(path="."):
        # the tests run as root, which no file mode stops: deny at the system-call boundary
        if str(path).rstrip("/") == pci:
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    snap = c.collect()
    assert snap.sources.sysfs.startswith("unavailable: permission denied"), snap.sources.sysfs
    assert snap.sources.nvml == "ok" and len(snap.gpus) == 7  # NVML still shows what it sees


def test_gpu_lost_marks_only_that_gpu(demo_dir):
    c = _demo_collector(demo_dir)
    c.collect()
    c.seams.nvml_lib.set_lost("0000:18:00.0")
    snap = c.collect()
    assert snap.sources.nvml == "ok"
    lost = snap.gpu("0000:18:00.0")
    assert lost.nvml_error == "GPU is lost" and lost.utilization_gpu is None
    assert any("GPU is lost" in p.message for p in snap.problems)
    assert snap.gpu("0000:bb:00.0").utilization_gpu is not None


def test_no_nvidia_driver(demo_dir):
    import pynvml

    c = _demo_collector(demo_dir)
    c.seams.nvml_lib.set_no_driver(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    snap = c.collect()
    assert snap.sources.nvml.startswith("unavailable") and "not found" in snap.sources.nvml
    assert len(snap.gpus) == 10 and all(g.nvml_index is None for g in snap.gpus)  # sysfs still has them


def test_libvirt_connection_closed_then_back(demo_dir):
    c = _demo_collector(demo_dir)
    assert len(c.collect().vms) == 14
    c._libvirt._conn.close()
    snap = c.collect()
    assert snap.sources.libvirt.startswith("unavailable") and "lost" in snap.sources.libvirt
    assert snap.vms == () and len(snap.gpus) == 10
    assert len(c.collect().vms) == 14  # re-opened on the next poll


def test_malformed_sysfs_values(demo_dir):
    c = _demo_collector(demo_dir)
    root = c.seams.root.path
    (root / "sys/bus/pci/devices/0000:18:00.0/numa_node").write_text("garbage\n")
    (root / "sys/bus/pci/devices/0000:19:00.0/class").write_text("0xZZZZ\n")
    (root / "sys/devices/system/node/node1/meminfo").write_text("Node 1 MemTotal: lots kB\n")
    (root / "sys/devices/system/cpu/cpu3/topology/core_id").write_text("\x00\x00")
    snap = c.collect()
    assert snap.sources.sysfs == "ok"
    assert snap.gpu("0000:18:00.0").numa_node == 0  # from local_cpus
    assert len(snap.cpus) == 128


def test_known_commands_match_the_registry():
    """The base names its read-only subcommands and those actions/cli/ registers: the lists must match
    what registers."""
    from nodeconsole.actions.cli import load
    from nodeconsole.console.cli import CHANGE_COMMANDS, KNOWN_COMMANDS, build_parser
    from nodeconsole.console.cli_base import SUBCOMMANDS

    build_parser(more=load)
    assert set(SUBCOMMANDS) == set(KNOWN_COMMANDS) | set(CHANGE_COMMANDS)
    assert not KNOWN_COMMANDS & CHANGE_COMMANDS


def test_gpu_rebound_behind_nvmls_back(demo_dir):
    """A GPU moved to vfio-pci by hand is not 'lost', and one given back to nvidia reappears in
    NVML's view without waiting for a periodic rescan."""
    from nodeconsole.console.demo.kernel import SimulatedKernel

    c = _demo_collector(demo_dir)
    c.collect()
    kernel = SimulatedKernel(c.seams.root)
    gpu, audio = "0000:9a:00.0", "0000:9a:00.1"
    for dev in (gpu, audio):
        kernel.write(f"sys/bus/pci/devices/{dev}/driver_override", "vfio-pci")
        kernel.write(f"sys/bus/pci/devices/{dev}/driver/unbind", dev)
        kernel.write("sys/bus/pci/drivers_probe", dev)
    c._sysfs = None  # forget cached sysfs only: NVML still holds its old handle, as after a manual rebind
    snap = c.collect()
    g = snap.gpu(gpu)
    assert g.driver == "vfio-pci" and g.owner.kind == "vfio"
    assert g.name == "NVIDIA H100 80GB HBM3"  # the name NVML gave it, not pci.ids' spelling
    assert g.nvml_error == "" and not any("GPU is lost" in p.message for p in snap.problems)
    for dev in (gpu, audio):
        kernel.write(f"sys/bus/pci/devices/{dev}/driver_override", "\n")
        kernel.write(f"sys/bus/pci/devices/{dev}/driver/unbind", dev)
        kernel.write("sys/bus/pci/drivers_probe", dev)
    c._sysfs = None
    c.collect()  # sees it on nvidia but not in NVML: asks NVML to re-initialise
    snap = c.collect()
    assert snap.gpu(gpu).driver == "nvidia" and snap.gpu(gpu).nvml_index is not None


@pytest.mark.parametrize("argv,expected", [
    (["mig", "2", "--demo", "7g.80gb"], ["mig", "2", "7g.80gb", "--demo"]),
    (["--root", "/x", "snapshot", "--json"], ["snapshot", "--json", "--root", "/x"]),
    (["pin", "vm", "--libvirt=test:///a", "--cpus", "1-2"], ["pin", "vm", "--cpus", "1-2", "--libvirt=test:///a"]),
    (["nccl", "parse", "--", "--demo"], ["nccl", "parse", "--", "--demo"]),
])
def test_host_flags_may_stand_anywhere(argv, expected):
    from nodeconsole.console.cli import _host_flags_last

    assert _host_flags_last(argv) == expected


def test_layout_after_demo_flag(capsys, demo_dir):
    rc, out, err = _run(capsys, "mig", "4", "--demo", "3g.40gb,3g.40gb")
    assert rc in (0, 1) and err == ""
    assert "MIG layout 3g.40gb" in out and "Nothing was changed" in out
