"""Actions on `demo reset --proxmox`: pinning proposes the whole QEMU process on one CPU set (Proxmox pins
the process through `affinity`, not each vCPU), applies as `affinity` + `numa: 1` + `numa0 …,policy=bind`
and its undo gives back the config byte for byte; through the CLI and through the action session."""
from __future__ import annotations

from pathlib import Path

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.session import ActionSession, Pin, Undo
from nodeconsole.console.audit_log import Status
from nodeconsole.console.seams import demo_host
from tests.console.test_capture import cli


@pytest.fixture
def pve(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    rc, out, err = cli("demo", "reset", "--proxmox")
    assert rc == 0 and "as a Proxmox VE host" in out, err
    return tmp_path / "demo/root/etc/pve/qemu-server"


def test_pin_plan_puts_every_vcpu_and_the_emulator_on_one_set(pve):
    rc, out, err = cli("pin", "mig-infer-b", "--demo")
    assert rc == 0, out + err
    assert "Proxmox VE pins the whole QEMU process (affinity), not each vCPU" in out
    assert "run on CPU 24-31, the memory bound to node 0" in out
    rows = [ln for ln in out.splitlines() if "→" in ln]
    assert sum("vCPU" in r for r in rows) == 8 and all(r.rstrip().endswith("→  24-31 (node 0)") for r in rows[:9])
    assert "strict on node 0" in rows[-1]


def test_pin_applies_affinity_and_numa0_and_undo_gives_back_the_bytes(pve):
    before = (pve / "106.conf").read_bytes()
    rc, out, err = cli("pin", "106", "--demo", "--apply", "--yes")  # mig-infer-b by its vmid
    assert rc == 0, out + err
    text = (pve / "106.conf").read_text()
    assert "affinity: 24-31\n" in text and "numa: 1\n" in text
    assert "numa0: cpus=0-7,hostnodes=0,memory=65536,policy=bind\n" in text
    assert text.replace("affinity: 24-31", "affinity: 38-41,102-105").replace("hostnodes=0", "hostnodes=1") == \
        before.decode()  # nothing else of the config changed
    rc, out, err = cli("undo", "--demo", "--apply", "--yes")
    assert rc == 0, out + err
    assert (pve / "106.conf").read_bytes() == before


def test_pin_through_the_session_and_undo(pve):
    before = (pve / "111.conf").read_bytes()  # build-1: no GPU, so its CPUs are chosen
    session = ActionSession(ActionHost.from_seams(demo_host()))
    plan = session.plan(Pin(vm="build-1", cpus="56-59"))
    assert plan.ok and any("not each vCPU" in n for n in plan.notes)
    result = session.apply(plan)
    assert result.status == Status.APPLIED, result
    text = (pve / "111.conf").read_text()
    assert "affinity: 56-59\n" in text and "numa0: cpus=0-3,hostnodes=1,memory=" in text and "policy=bind" in text
    assert session.apply(session.plan(Undo())).status == Status.APPLIED
    assert (pve / "111.conf").read_bytes() == before


def test_the_backend_reads_a_vms_shape_and_writing_it_again_changes_nothing(pve):
    vms = ActionHost.from_seams(demo_host()).vms
    assert vms is not None
    shape = vms.shape("102")  # train-c
    assert (shape.vcpus, shape.memory_kib, shape.hugepage_kib, shape.numa) == (16, 131072 * 1024, None, ("strict", "1"))
    before = (pve / "102.conf").read_bytes()
    vms.set_shape("train-c", shape)  # already so: no qm set at all
    assert vms.shape_commands("train-c", shape) == ()
    assert (pve / "102.conf").read_bytes() == before


def test_plans_name_qm_not_virsh_on_a_proxmox_host(pve):
    rc, out, err = cli("pin", "mig-infer-b", "--demo")
    assert rc == 0 and "virsh" not in out, out + err
    assert "$ qm set 106 --affinity 24-31 --numa0 cpus=0-7,hostnodes=0,memory=65536,policy=bind\n" in out
    rc, out, err = cli("passthrough", "4", "--vm", "build-1", "--demo")
    assert rc == 0 and "virsh" not in out, out + err
    assert "$ qm set 111 --hostpciN 0000:9a:00.0" in out and "To give it more: qm set 111 --memory 163840" in out
    rc, out, err = cli("release", "1", "--demo")  # train-a (100) runs with GPU 1
    assert rc != 0 and "virsh" not in out + err
    assert "fix: shut it down first (qm shutdown 100)" in out + err


def test_the_hints_of_each_hypervisor():
    from nodeconsole.console.model import Vm
    from nodeconsole.console.vms.hints import command_hint, hint_for

    assert command_hint("libvirt", "shutdown", "a b") == "virsh shutdown 'a b'"
    assert command_hint("proxmox", "setmem", "101", size="160G") == "qm set 101 --memory 163840"
    assert command_hint("libvirt", "setmem", "x", size="160G") == \
        "virsh setmaxmem x 160G --config; virsh setmem x 160G --config"
    assert hint_for(Vm("train-b", "running", 16, hypervisor="proxmox", vmid=101), "stop") == "qm stop 101"
    assert hint_for(Vm("train-b", "running", 16), "stop") == "virsh destroy train-b"


def _refused(argv: tuple[str, ...], reason: str, fix: str) -> None:
    rc, out, err = cli(*argv, "--demo", "--apply", "--yes")
    assert rc != 0 and f"[FAILED] {reason}\n      fix: {fix}\n" in out and "Refused: nothing will be changed" in out, \
        out + err


def test_a_locked_vm_is_refused_at_plan_time_by_every_plan_that_changes_it(pve):
    (pve / "111.conf").write_text((pve / "111.conf").read_text() + "lock: backup\n")
    before = {p.name: p.read_bytes() for p in pve.iterdir()}
    why, fix = "VM build-1 is not locked: VM 111 is locked (backup)", "qm unlock 111 once the backup is done"
    _refused(("passthrough", "4", "--vm", "build-1"), why, fix)
    _refused(("pin", "111", "--cpus", "56-59"), why, fix)
    _refused(("vgpu", "create", "2", "1110", "--vm", "build-1"), why, fix)
    _refused(("nic", "passthrough", "0000:1a:00.4", "--vm", "build-1"), why, fix)
    _refused(("prepare", "build-1", "--gpus", "1"), why, fix)
    assert {p.name: p.read_bytes() for p in pve.iterdir()} == before



def test_pin_all_leaves_a_locked_vm_out(pve):
    (pve / "104.conf").write_text((pve / "104.conf").read_text() + "lock: migrate\n")  # vgpu-desk-2: unpinned GPU VM
    rc, out, err = cli("pin", "--all", "--demo")
    assert rc == 0 and "  - VM vgpu-desk-2 is left out: VM 104 is locked (migrate)\n" in out, out + err
    assert "qm set 104" not in out


def test_a_locked_vm_holding_the_gpu_refuses_its_release(pve):
    (pve / "102.conf").write_text((pve / "102.conf").read_text() + "lock: snapshot\n")  # train-c holds GPU 4
    _refused(("release", "4"), "VM train-c is not locked: VM 102 is locked (snapshot)",
             "qm unlock 102 once the snapshot is done")


def test_a_template_holds_no_gpu(pve):
    (pve / "111.conf").write_text((pve / "111.conf").read_text() + "template: 1\n")
    before = (pve / "111.conf").read_bytes()
    _refused(("passthrough", "4", "--vm", "build-1"),
             "VM build-1 is not a template: VM 111 is a template: a template never starts, so it holds no GPU",
             "give the device to a clone of it (qm clone 111 NEWID --name NAME)")
    assert (pve / "111.conf").read_bytes() == before
