"""Pinning respects every defined VM and the host's own CPUs: `pin train-b` on the demo stays off shut-off
mig-infer-b's 38-41,102-105, off every other VM's pins (running, paused, shut off) and off the CPUs the
host keeps (CPUAffinity=); a host with no room left refuses naming the VMs in the way, and shares their
CPUs, saying whose, only with --allow-overlap; a running VM is pinned live now and in its config; the
rebalance map shows shut-off VMs' pins. The CLI runs in-process on one demo per module."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.pinning import plan_pin
from nodeconsole.actions.progress import DONE
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.cpulist import parse_cpulist
from nodeconsole.console.demo.generator import generate, small_spec
from nodeconsole.console.demo.spec import CpuSpec, HostdevSpec, VmSpec
from nodeconsole.console.seams import demo_host
from nodeconsole.screens.pin_view import rebalance_map
from tests.actions.test_passthrough import changed, tree_state

KEPT = {0, 1, 32, 33, 64, 65, 96, 97}  # the demo's CPUAffinity=0-1,32-33,64-65,96-97
MIG_INFER_B = {38, 39, 40, 41, 102, 103, 104, 105}
# every free CPU of node 1 (train-b's own 34-37,98-101 included): as a reserve, it leaves train-b only
# CPUs that other VMs are pinned to
SQUEEZE = "32-37,56-63,96-101,110-111,120-127"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> ActionHost:
    return ActionHost.from_seams(demo_host(tmp_path_factory.mktemp("pin-defined") / "demo"))


@pytest.fixture
def cli(demo, monkeypatch, capsys):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(demo.state_dir))

    def run(*argv: str) -> tuple[int, str, str]:
        rc = main([*argv, "--demo"])
        out = capsys.readouterr()
        return rc, out.out, out.err
    return run


def _placed(out: str) -> set[int]:
    m = re.search(r"VM train-b can be placed: 16 vCPUs on CPU (\S+),", out)
    assert m, out
    return set(parse_cpulist(m.group(1)))


def test_pin_train_b_avoids_every_defined_vms_pins_and_the_hosts_cores(demo, cli):
    before = tree_state(demo.state_dir, skip=())
    snap = demo.snapshot()
    assert snap.vm("mig-infer-b").state == "shut off"
    assert {c for p in snap.vm("mig-infer-b").pins for c in p.cpus} == MIG_INFER_B
    rc, out, err = cli("pin", "train-b")
    assert rc == 0, err
    cpus = _placed(out)
    assert len(cpus) == 16 and not cpus & MIG_INFER_B and not cpus & KEPT
    for vm in snap.vms:  # running, paused and shut off alike
        if vm.name != "train-b":
            pinned = {c for p in vm.pins for c in p.cpus} | set(vm.emulator_pins)
            if pinned != {c.id for c in snap.cpus}:  # a pin to every CPU is no pin
                assert not cpus & pinned, (vm.name, vm.state)
    assert cpus == set(parse_cpulist("34-37,56-59,98-101,120-123"))
    assert "kept for the host by CPUAffinity=0-1,32-33,64-65,96-97" in out
    assert "emulator on 32-33,96-97" in out
    # a running VM: live now and in its config; here one edit is both, and the plan says why
    assert "Pin VM train-b live now and in the config (kept at the next start): 16 vCPU pin(s)" in out
    assert ("VM train-b is running: its pins are set live now and in the config (kept at the next start): "
            "libvirt here serves one definition (the node file) as both the running VM and its config") in out
    assert "warning:" not in out.replace("warning: VM train-b has 128 GiB", "")  # no overlap to warn about
    assert changed(before, tree_state(demo.state_dir, skip=())) == set()


def test_no_room_refuses_naming_the_vms_and_allow_overlap_shares_on_purpose(demo, cli):
    before = tree_state(demo.state_dir, skip=())
    rc, out, _ = cli("pin", "train-b", "--reserve", SQUEEZE, "--apply", "--yes")
    assert rc == 1 and "Refused: nothing will be changed." in out
    assert ("VM train-b needs 16 CPUs on node 1: node 1 has 0 CPU(s) outside the host reserve that no other "
            "VM is pinned to; the others are pinned to VMs db-1 (running, CPU 42-45,106-109), legacy-app "
            "(paused, CPU 46-47), mig-infer-b (shut off, CPU 38-41,102-105) and train-c (shut off, CPU "
            "48-55,112-119)") in out
    assert "fix: add --allow-overlap" in out
    assert changed(before, tree_state(demo.state_dir, skip=())) == set()

    rc, out, err = cli("pin", "train-b", "--reserve", SQUEEZE, "--allow-overlap")
    assert rc == 0, err
    cpus = _placed(out)
    # the stopped VMs' CPUs before the running db-1's and paused legacy-app's, in thread pairs
    assert cpus == set(parse_cpulist("38-41,48-51,102-105,112-115"))
    assert ("warning: CPU 38-41,48-51,102-105,112-115 shared on purpose (overlap allowed) with VMs mig-infer-b "
            "(shut off, CPU 38-41,102-105) and train-c (shut off, CPU 48-51,112-115)") in out
    assert "Nothing was changed" in out
    assert changed(before, tree_state(demo.state_dir, skip=())) == set()


def test_cpus_chosen_onto_a_shut_off_vms_pins_need_the_flag(demo, cli):
    rc, out, _ = cli("pin", "train-b", "--cpus", "38-41")
    assert rc == 1 and "CPU 38-41 of --cpus is pinned to VM mig-infer-b (shut off, CPU 38-41)" in out
    rc, out, _ = cli("pin", "train-b", "--cpus", "38-41", "--allow-overlap")
    assert rc == 0 and "shared on purpose (overlap allowed) with VM mig-infer-b (shut off" in out


def test_the_map_shows_shut_off_and_paused_vms_pins(demo):
    text = rebalance_map(demo.snapshot())
    plain = text.plain
    assert "mig-infer-b  (shut off)  CPU 38-41,102-105 on node 1" in plain
    assert "legacy-app  (paused)  CPU 22-23,46-47 on node 0-1" in plain
    lines = plain.splitlines()
    node1 = lines[lines.index("node 1  (GPU4 GPU5 GPU6 GPU7 GPU8 GPU9)") + 1]
    mark = next(line[0] for line in lines if line[2:].startswith("mig-infer-b "))
    assert node1[38 - 32:42 - 32] == mark * 4  # CPUs 38-41 carry mig-infer-b's letter


# -- a host whose GPU node is full -------------------------------------------------------------------

@pytest.fixture(scope="module")
def full(tmp_path_factory) -> ActionHost:
    """1 socket x 4 cores x 2 threads; the kernel isolates 1-3,5-7 (so the host keeps core 0: 0 and 4).
    vm-gpu (running, unpinned) holds the GPU; `stopped` (shut off) is pinned to cores 1-2, `db` (running)
    to core 3: no CPU is left that no VM is pinned to."""
    base = small_spec()
    vms = (VmSpec("vm-gpu", "running", 2, 65536, threads_per_core=2, hostdevs=(HostdevSpec("0000:19:00.0"),)),
           VmSpec("stopped", "shut off", 4, 4096, pins=((1,), (2,), (5,), (6,))),
           VmSpec("db", "running", 2, 4096, pins=((3,), (7,))))
    spec = replace(base, cpu=CpuSpec(sockets=1, cores_per_socket=4, threads_per_core=2), vms=vms,
                   host_cores=(), cmdline=base.cmdline + " isolcpus=1-3,5-7")
    h = generate(spec, tmp_path_factory.mktemp("full") / "host")
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml
    from nodeconsole.console.root import Root
    from nodeconsole.console.seams import simulated_host

    root = Root(h.root)
    seams = simulated_host(root=root, libvirt_uri=h.libvirt_uri, state_dir=h.dest,
                  nvml_lib=SimulatedNvml.from_file(h.nvml_state, root=root))
    return ActionHost.from_seams(seams)


def test_a_full_host_refuses_without_the_flag_and_overlaps_naming_the_vms_with_it(full):
    snap = full.snapshot()
    plan = plan_pin(full, snap, "vm-gpu")
    assert not plan.ok and plan.steps == []
    assert ("node 0 has 0 CPU(s) outside the host reserve that no other VM is pinned to; the others are "
            "pinned to VMs db (running, CPU 3,7) and stopped (shut off, CPU 1-2,5-6)") in plan.refusal
    assert "--allow-overlap" in "\n".join(plan.lines())

    plan = plan_pin(full, snap, "vm-gpu", allow_overlap=True)
    assert plan.ok and plan.request["allow_overlap"] is True
    assert plan.steps[0].op["vcpus"] == [[0, "1"], [1, "5"]]  # the shut-off VM's core, a thread pair
    assert plan.steps[0].op["emulator"] == "0,4"  # the core the host keeps (isolcpus= spares it)
    assert any("kept for the host by isolcpus=1-3,5-7" in c.reason for c in plan.checks)
    assert ("warning: CPU 1,5 shared on purpose (overlap allowed) with VM stopped (shut off, CPU 1,5): the "
            "VMs compete for those CPUs whenever both run") in plan.notes
    # applied as planned (the runner's fresh plan before applying allows the overlap too), then undone
    before = tree_state(full.state_dir)
    assert Runner(full).run(plan).status == DONE
    assert [p.cpus for p in full.snapshot().vm("vm-gpu").pins] == [(1,), (5,)]
    assert Runner(full).run(plan_undo(full)).status == DONE
    assert changed(before, tree_state(full.state_dir)) == set()
