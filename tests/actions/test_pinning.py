"""NUMA-aware pinning end to end on generated hosts: the plan, apply through the node file (demo) or a
libvirt connection (test driver), the next snapshot, undo byte for byte, and every refusal changing
nothing. "Nothing changed" is checked on the whole host directory, as for passthrough."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nodeconsole.actions.audit import APPLIED, FAILED
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.pin_steps import PinState, edit_pins, read_xml_state
from nodeconsole.actions.pinning import plan_pin, plan_pin_all
from nodeconsole.actions.plan import RequestError, build_step
from nodeconsole.actions.progress import DONE, FAILED_RESULT, REFUSED
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.checks import find_problems, vm_alignment
from nodeconsole.console.demo.generator import generate, small_spec
from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.demo.spec import CpuSpec, HostdevSpec, VmSpec
from nodeconsole.console.host_programs import NoCommands
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams, demo_host
from nodeconsole.console.vms.libvirt_domains import DomainConfigError, LibvirtDomainConfig
from tests.actions.test_passthrough import changed, tree_state

REPO = Path(__file__).resolve().parents[2]
NODE1 = set(range(32, 64)) | set(range(96, 128))  # the demo's NUMA node 1


@pytest.fixture
def demo(tmp_path) -> ActionHost:
    return ActionHost.from_seams(demo_host(tmp_path / "demo"))


@pytest.fixture(scope="module")
def demo_ro(tmp_path_factory) -> ActionHost:
    """One demo host for the tests that must change nothing (each checks that it did not)."""
    return ActionHost.from_seams(demo_host(tmp_path_factory.mktemp("pin-ro")))


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NODECONSOLE_STATE_DIR": str(state)}
    code = "import sys; from nodeconsole.actions.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


# -- the demo host ------------------------------------------------------------------------------------

def test_acceptance_cli_pin_train_b_snapshot_then_undo(tmp_path):
    import json

    state = tmp_path / "demo"
    demo_host(state)
    before = tree_state(state)
    dry = _cli(state, "pin", "train-b", "--demo")
    assert dry.returncode == 0, dry.stderr
    assert "Nothing was changed: add --apply" in dry.stdout
    assert "vCPU 0    10 (node 0)" in dry.stdout and "→  34 (node 1)" in dry.stdout  # before → after
    assert "memory    interleave on node 0-1 →  strict on node 1" in dry.stdout
    assert changed(before, tree_state(state, skip=())) == set()  # no audit record either

    done = _cli(state, "pin", "train-b", "--demo", "--apply", "--yes")
    assert done.returncode == 0, done.stderr
    snap = json.loads(_cli(state, "snapshot", "--demo", "--json").stdout)
    vm = next(v for v in snap["vms"] if v["name"] == "train-b")
    cpus = {c for p in vm["pins"] for c in p["cpus"]}
    assert len(vm["pins"]) == 16 and cpus <= NODE1 and len(cpus) == 16
    # the emulator threads on node 1's CPUs the host keeps (the demo's CPUAffinity=0-1,32-33,64-65,96-97)
    assert vm["emulator_pins"] == [32, 33, 96, 97] and vm["numa_mode"] == "strict" and vm["numa_nodeset"] == [1]
    assert not any(p["subject"] == "train-b" for p in snap["problems"])  # no cross-NUMA warning left

    undo = _cli(state, "undo", "--demo", "--apply", "--yes")
    assert undo.returncode == 0, undo.stderr
    assert changed(before, tree_state(state)) == set()


def test_pin_train_b_moves_everything_to_its_gpu_node_and_undo_restores_exactly(demo):
    before = tree_state(demo.state_dir)
    snap = demo.snapshot()
    assert vm_alignment(snap, snap.vm("train-b")) == "cross-numa"
    plan = plan_pin(demo, snap, "train-b")
    assert plan.ok and [s.op["scope"] for s in plan.steps] == ["config"]  # node file: live and config
    op = plan.steps[0].op
    # thread pairs on sibling pairs (CPU n and n + 64), vCPU order, off every other VM's pins (38-55 are
    # mig-infer-b's, db-1's, legacy-app's and train-c's), emulator on the CPUs node 1 keeps for the host
    cores = [*range(34, 38), *range(56, 60)]
    assert op["vcpus"] == [[i, str(c)] for i, c in enumerate(c for k in cores for c in (k, k + 64))]
    assert op["emulator"] == "32-33,96-97" and op["numa"] == {"mode": "strict", "nodeset": "1"}
    assert any("below 2× the 80 GiB VRAM" in n for n in plan.notes)  # 128 GiB for an H100 on vfio

    res = Runner(demo).run(plan)
    assert res.status == DONE, res.message
    after = demo.snapshot()
    vm = after.vm("train-b")
    assert vm_alignment(after, vm) == "aligned" and vm.emulator_pins == (32, 33, 96, 97)
    assert (vm.numa_mode, vm.numa_nodeset) == ("strict", (1,))
    assert not [p for p in find_problems(after) if p.subject == "train-b"]
    rec = demo.audit.find(res.record_id).to_json()
    assert rec["result"] == APPLIED and rec["action"] == "pin" and rec["request"]["vm"] == "train-b"
    assert rec["undo"][0]["vcpus"][0] == [0, "10"] and rec["undo"][0]["numa"]["mode"] == "interleave"

    assert plan_pin(demo, after, "train-b").empty  # the same request again: nothing to do
    assert Runner(demo).run(plan_undo(demo)).status == DONE
    assert changed(before, tree_state(demo.state_dir)) == set()
    back = demo.snapshot().vm("train-b")
    assert (back.pins, back.emulator_pins, back.numa_mode) == (snap.vm("train-b").pins,
                                                                snap.vm("train-b").emulator_pins, "interleave")


def test_a_shut_off_vm_is_planned_config_only_and_says_so(demo):
    before = tree_state(demo.state_dir)
    plan = plan_pin(demo, demo.snapshot(), "train-c")
    assert plan.ok and [s.op["scope"] for s in plan.steps] == ["config"]
    assert any("is shut off: only its config changes" in n for n in plan.notes)
    assert Runner(demo).run(plan).ok
    vm = demo.snapshot().vm("train-c")
    assert vm.state == "shut off" and {c for p in vm.pins for c in p.cpus} <= NODE1
    # train-b (running) keeps CPUs 34-37/98-101 on node 1: a shut-off VM avoids running VMs' CPUs
    assert not {c for p in vm.pins for c in p.cpus} & {34, 35, 36, 37, 98, 99, 100, 101}
    assert Runner(demo).run(plan_undo(demo)).ok
    assert changed(before, tree_state(demo.state_dir)) == set()


def test_pin_all_makes_one_plan_for_every_unpinned_gpu_vm(demo):
    before = tree_state(demo.state_dir)
    snap = demo.snapshot()
    unpinned = sorted(v.name for v in snap.vms if vm_alignment(snap, v) == "unpinned")
    assert unpinned == ["vgpu-desk-2"]
    plan = plan_pin_all(demo, snap)
    assert plan.ok and sorted({s.op["vm"] for s in plan.steps}) == unpinned
    assert any("not part of this plan: mig-infer-b, train-b" in n for n in plan.notes)
    assert Runner(demo).run(plan).ok
    after = demo.snapshot()
    vm = after.vm("vgpu-desk-2")
    assert vm_alignment(after, vm) == "aligned"
    others = {c for v in after.vms if v.name != vm.name and v.state != "shut off" for p in v.pins for c in p.cpus}
    assert not {c for p in vm.pins for c in p.cpus} & others
    assert plan_pin_all(demo, after).empty
    assert Runner(demo).run(plan_undo(demo)).ok
    assert changed(before, tree_state(demo.state_dir)) == set()


# -- refusals change nothing --------------------------------------------------------------------------

@pytest.mark.parametrize("vm, cpus, reserve, message", [
    ("nope", None, None, "no VM named 'nope'"),
    ("train-b", "0-3,x", None, "'x' is not a number"),
    ("train-b", "126-130", None, "CPU 128-130 does not exist"),
    ("train-b", "", None, "--cpus names no CPU"),
    ("train-b", None, "1-2,zz", "--reserve: bad CPU list"),
])
def test_bad_requests_are_refused_with_the_reason(demo_ro, vm, cpus, reserve, message):
    before = tree_state(demo_ro.state_dir, skip=())
    snap = demo_ro.snapshot()
    try:
        plan = plan_pin(demo_ro, snap, vm, cpus=cpus, reserve=reserve)
    except RequestError as e:
        assert message in str(e)
    else:
        assert not plan.ok and message in plan.refusal and plan.steps == []
        assert Runner(demo_ro).run(plan).status == REFUSED
    assert changed(before, tree_state(demo_ro.state_dir, skip=())) == set()


def test_cpus_in_the_host_reserve_are_refused(demo_ro):
    before = tree_state(demo_ro.state_dir, skip=())
    plan = plan_pin(demo_ro, demo_ro.snapshot(), "train-b", cpus="32-40")
    # the demo's host keeps 0-1,32-33,64-65,96-97 (systemd CPUAffinity=)
    assert not plan.ok and "CPU 32-33 is in the host reserve (0-1,32-33,64-65,96-97)" in plan.refusal
    assert "--reserve" in "\n".join(plan.lines())
    assert Runner(demo_ro).run(plan).status == REFUSED
    # the reserve is the admin's to choose: the emulator threads go where it says
    ok = plan_pin(demo_ro, demo_ro.snapshot(), "train-b", cpus="34-37,56-59", reserve="0,64,63,127")
    assert ok.ok and ok.steps[0].op["emulator"] == "63,127"
    assert any("16 vCPUs share 8 CPU(s), as --cpus asks" in n for n in ok.notes)
    assert changed(before, tree_state(demo_ro.state_dir, skip=())) == set()


def test_cli_refusals_exit_nonzero_and_change_nothing(demo_ro):
    state = demo_ro.state_dir
    before = tree_state(state, skip=())
    bad = _cli(state, "pin", "train-b", "--demo", "--cpus", "0-3,x", "--apply", "--yes")
    assert bad.returncode == 2 and "'x' is not a number or a range" in bad.stderr
    reserved = _cli(state, "pin", "train-b", "--demo", "--cpus", "96", "--apply", "--yes")
    assert reserved.returncode == 1 and "in the host reserve" in reserved.stdout
    nodev = _cli(state, "pin", "web-1", "--demo", "--apply", "--yes")
    assert nodev.returncode == 1 and "no GPU or NIC" in nodev.stdout
    usage = _cli(state, "pin", "--demo")
    assert usage.returncode == 2 and "name one VM, or --all" in usage.stderr
    assert changed(before, tree_state(state, skip=())) == set()


# -- libvirt's test driver through a connection (live and config) -------------------------------------

def _tiny(dest: Path) -> tuple[Seams, str]:
    """1 socket x 4 cores x 2 threads (the test driver's CPU maps are 8 wide), a GPU on vfio-pci given
    to the running VM `vm-gpu` (pinned to the last core) and a shut-off `vm-off`."""
    base = small_spec()
    cpu = CpuSpec(sockets=1, cores_per_socket=4, threads_per_core=2)
    vms = (VmSpec("vm-gpu", "running", 2, 65536, ((3,), (7,)), (3,), ("strict", (0,)), 2,
                  (HostdevSpec("0000:19:00.0"),)),
           VmSpec("vm-off", "shut off", 2, 4096, hostdevs=(HostdevSpec("0000:19:00.0"),)))
    h = generate(replace(base, cpu=cpu, vms=vms), dest)
    root = Root(h.root)
    return Seams(root=root, libvirt_uri=h.libvirt_uri, nvml_lib=SimulatedNvml.from_file(h.nvml_state, root=root),
                 state_dir=h.dest), h.libvirt_uri


class LostConnection(LibvirtDomainConfig):
    """The connection breaks while the persistent config is being written."""

    def define(self, vm: str, xml: str) -> None:
        raise DomainConfigError("libvirt: Cannot write data: Broken pipe (connection lost)")


def _host(seams: Seams, cfg) -> ActionHost:
    return ActionHost(seams=seams, kernel=None, domains=cfg, state_dir=Path(seams.state_dir),
                      commands=NoCommands(), is_root=lambda: True)


def test_test_driver_live_and_config_pins_then_undo(tmp_path):
    seams, uri = _tiny(tmp_path / "tiny")
    cfg = LibvirtDomainConfig(uri)
    host = _host(seams, cfg)
    try:
        plan = plan_pin(host, host.snapshot(), "vm-gpu")
        assert plan.ok and [s.op["scope"] for s in plan.steps] == ["live", "config"]
        assert "VM vm-gpu is running: its pins are set live now and in the config (kept at the next start)" \
            in plan.notes
        # core 2 and its sibling: cores 0 and 1 are the host's (CPUAffinity=0-1,4-5 on this host)
        assert plan.steps[0].op["vcpus"] == [[0, "2"], [1, "6"]]
        assert Runner(host).run(plan).status == DONE
        dom = cfg.domain("vm-gpu")
        assert [tuple(i for i, on in enumerate(m) if on) for m in dom.vcpuPinInfo(0)] == [(2,), (6,)]
        assert read_xml_state(cfg.xml("vm-gpu")) == PinState(((0, "2"), (1, "6")), "0-1,4-5", ("strict", "0"))
        assert Runner(host).run(plan_undo(host)).status == DONE
        assert [tuple(i for i, on in enumerate(m) if on) for m in dom.vcpuPinInfo(0)] == [(3,), (7,)]
        assert read_xml_state(cfg.xml("vm-gpu")) == PinState(((0, "3"), (1, "7")), "3", ("strict", "0"))

        off = plan_pin(host, host.snapshot(), "vm-off")
        assert [s.op["scope"] for s in off.steps] == ["config"]
        assert Runner(host).run(off).ok
        # off vm-gpu's core 3 and the host's cores 0-1: core 2's two threads are all that is left
        assert read_xml_state(cfg.xml("vm-off")).vcpus == ((0, "2"), (1, "6"))
    finally:
        cfg.close()


def test_connection_lost_mid_apply_undoes_the_completed_steps(tmp_path):
    seams, uri = _tiny(tmp_path / "tiny")
    cfg = LostConnection(uri)
    host = _host(seams, cfg)
    try:
        plan = plan_pin(host, host.snapshot(), "vm-gpu")
        live_before = cfg.live_xml("vm-gpu")
        res = Runner(host).run(plan)
        assert res.status == FAILED_RESULT and "connection lost" in res.error
        assert res.undone == [plan.steps[1].title, plan.steps[0].title] and res.undo_failed == []
        assert read_xml_state(cfg.live_xml("vm-gpu")) == read_xml_state(live_before)
        pins = [tuple(i for i, on in enumerate(m) if on) for m in cfg.domain("vm-gpu").vcpuPinInfo(0)]
        assert pins == [(3,), (7,)]  # the live pins the first step had made are gone
        assert host.audit.find(res.record_id).to_json()["result"] == FAILED
    finally:
        cfg.close()


# -- the node file's text edits -----------------------------------------------------------------------

DOMAIN = """<domain type='test'>
    <name>v</name>
    <vcpu placement='static'>4</vcpu>
    <cputune>
      <shares>2048</shares>
      <vcpupin vcpu='1' cpuset='0,1'/>
    </cputune>
    <numatune>
      <memory nodeset='0'/>
    </numatune>
    <os>
      <type>hvm</type>
    </os>
  </domain>"""


@pytest.mark.parametrize("target, with_numa", [
    (PinState(((0, "4"), (1, "5"), (2, "6"), (3, "7")), "0", ("strict", "1")), True),
    (PinState((), None, None), True),
    (PinState(((3, "2-3,^3"),), None, None), False),
    (PinState(((1, "0,1"),), "2", ("interleave", "0-1")), True),
])
def test_text_edits_round_trip_byte_for_byte(target, with_numa):
    new = edit_pins(DOMAIN, target, with_numa)
    got = read_xml_state(new)
    assert got.sets()[:2] == target.sets()[:2] and (not with_numa or got.sets()[2] == target.sets()[2])
    assert "<shares>2048</shares>" in new  # what is not a pin stays
    back = edit_pins(new, read_xml_state(DOMAIN), with_numa)
    assert back == DOMAIN


def test_text_edits_keep_the_quoting_of_a_value_they_change():
    dom = DOMAIN.replace("<memory nodeset='0'/>", '<memory mode="interleave" nodeset="0"/>')
    new = edit_pins(dom, PinState(((1, "2"),), None, ("strict", "1")), True)
    assert "<vcpupin vcpu='1' cpuset='2'/>" in new and '<memory mode="strict" nodeset="1"/>' in new
    assert edit_pins(new, read_xml_state(dom), True) == dom


def test_step_kind_refuses_a_vm_that_is_gone(demo_ro):
    from nodeconsole.actions.plan import StepError

    with pytest.raises(StepError, match="no VM named 'ghost'"):
        build_step(demo_ro, {"kind": "vm_pins", "vm": "ghost", "scope": "config", "vcpus": [], "emulator": None})
    with pytest.raises(StepError, match="unknown pin scope"):
        build_step(demo_ro, {"kind": "vm_pins", "vm": "train-b", "scope": "both", "vcpus": []})


def test_node_file_pin_edit_and_undo_are_byte_exact(tmp_path):
    from nodeconsole.actions.pin_steps import read_state, write_state
    from nodeconsole.console.demo.node_domains import NodeFileDomainConfig

    node = tmp_path / "node.xml"
    original = f"<node>\n  {DOMAIN}\n</node>\n"
    node.write_text(original, encoding="utf-8")
    cfg = NodeFileDomainConfig(node)
    before = read_state(cfg, "v", "config")
    target = PinState(((1, "0,1"),), "2", ("interleave", "0-1"))  # a mode attribute added to the line
    write_state(cfg, "v", "config", target, True)
    assert read_state(cfg, "v", "config").sets() == target.sets()
    assert "<shares>2048</shares>" in node.read_text()
    write_state(cfg, "v", "config", before, True)
    assert node.read_text() == original
