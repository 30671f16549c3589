"""The doctor's vm-memory fix as a plan on the demo host: every VM the check names resized within what its
NUMA node(s) can hold in hugepages (train-a's 1 GiB pages on node 0: its own 128 plus 16 more reserved),
a running VM's definition for its next start, then the check passes; undo gives the node file, the
hugepage counts and the boot loader's files back exactly."""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.progress import DONE
from nodeconsole.actions.session import ActionSession, DoctorFix, Undo
from nodeconsole.console.doctor.run import run_doctor
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import changed, tree_state

GIB = 1048576
PAGES0 = "root/sys/devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages"


def _check(state):
    host = ActionHost.from_seams(demo_host(state))
    snap = host.snapshot()
    return run_doctor(snap, host.root, "mixed", ()).check("vm-memory"), snap


def test_vm_memory_fix_resizes_every_vm_it_names_and_undo_is_exact(tmp_path):
    state = tmp_path / "demo"
    check, snap = _check(state)
    assert check.status == "warn" and check.fix.plannable
    # a command for every VM it names, none cut short: each resized VM has its setmaxmem and setmem
    for name in ("train-a", "train-b", "train-c", "mig-infer-a", "vgpu-desk-1", "vgpu-desk-2"):
        assert f"virsh setmaxmem {name} " in "\n".join(check.fix.commands), name
    assert "echo 160 > /sys/devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages" in check.fix.commands
    session = ActionSession.from_seams(demo_host(state))
    before = tree_state(state)
    plan = session.plan(DoctorFix(("vm-memory",)))
    assert plan.ok, "\n".join(plan.lines())
    kinds = [op["kind"] for op in plan.ops()]
    assert kinds.count("vm_shape") >= 6 and {"kind": "hugepages", "node": 0, "size_kib": GIB, "count": 160,
                                             "boot": True} in plan.ops()
    assert any(s.op.get("next_start") for s in plan.steps if s.op["kind"] == "vm_shape")  # running VMs: next start
    result = session.apply(plan)
    assert result.status == DONE, result.message
    after, snap = _check(state)
    assert after.status == "pass", after.finding
    assert snap.vm("train-a").memory_kib == 160 * GIB and snap.vm("train-a").hugepages_kib == GIB
    assert (state / PAGES0).read_text().strip() == "160"
    undo = session.plan(Undo(result.record_id))
    assert session.apply(undo).status == DONE
    assert changed(before, tree_state(state)) == set()
