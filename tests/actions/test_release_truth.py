"""Plans tell the truth: every sentence a release plan says about its effect holds after apply. Each
case applies the plan, re-reads the host (the snapshot, each VM's definition from the demo's libvirt
node file, sysfs) and checks every note against it; a note no checker knows fails the test, so a new
sentence has to come with its check. Cases: a GPU held by a running VM's live config (refused: shut
it down first; then released), a shut-off VM's config (with and without the NIC VF of --with-nic, and
a config that named the GPU before the passthrough), a running VM's persistent config only, and an
unbound GPU."""
from __future__ import annotations

import re

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import driverctl_state, pci_state
from nodeconsole.actions.passthrough import plan_passthrough, plan_release
from nodeconsole.actions.plan import Plan
from nodeconsole.actions.progress import DONE
from nodeconsole.actions.runner import Runner
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import IDLE, IDLE_AUDIO, changed, tree_state

IN_VM = "0000:9b:00.0"  # GPU 5: train-b runs with it (no passthrough record: generated that way)
UNBOUND = "0000:ba:00.0"  # GPU 6: no driver
VF = "0000:9c:00.2"  # the NIC VF beside GPU 4 that --with-nic gives


@pytest.fixture
def host(tmp_path) -> ActionHost:
    return ActionHost.from_seams(demo_host(tmp_path / "demo"))


def _apply(host: ActionHost, plan: Plan) -> None:
    assert plan.ok, plan.refusal
    res = Runner(host).run(plan)
    assert res.status == DONE, res.message


def _hostdevs(host: ActionHost, vm: str) -> set[str]:
    return host.domains.pci_hostdevs(vm)


def _named(host: ActionHost, what: str, gpu: str) -> list[str]:
    """The addresses a note's 'the GPU', 'the NIC VF A', 'A (of the GPU's IOMMU group)' name."""
    out = []
    for part in what.split(" and "):
        if part == "the GPU":
            out.append(gpu)
        elif m := re.fullmatch(r"the NIC VF (\S+)", part):
            out.append(m[1])
        elif m := re.fullmatch(r"(\S+) \(of the GPU's IOMMU group\)", part):
            out.append(m[1])
        else:
            raise AssertionError(f"unknown device phrase {part!r}")
    return out


def _check_note(host: ActionHost, gpu: str, note: str, states: dict[str, str]) -> None:
    """Assert the sentence holds on the host as it is now (after apply). `states`: VM states before."""
    snap = host.snapshot()
    if m := re.fullmatch(r"VM (\S+) loses (.+) from its config", note):
        gone = _named(host, m[2], gpu)
        assert not set(gone) & _hostdevs(host, m[1]), note
        vm = snap.vm(m[1])
        assert not {h.address for h in vm.hostdevs} & set(gone), note  # `snapshot` no longer lists it
    elif m := re.fullmatch(r"VM (\S+) is running without the GPU \((.+)\): release takes (.+) out of its config "
                           r"only; the running VM is not touched", note):
        assert not set(_named(host, m[3], gpu)) & _hostdevs(host, m[1]), note
        assert snap.vm(m[1]).state == states[m[1]] == "running", note
    elif m := re.fullmatch(r"(\S+)'s config names (.+) too; passthrough \S+ did not put it there: left alone, "
                           r"and \1's next start takes it from the host again \(virsh edit \1 to remove it\)", note):
        kept = [gpu] if m[2] == "the GPU" else m[2].split(", ")
        assert set(kept) <= _hostdevs(host, m[1]), note
        assert all(host.domains.hostdev_place(m[1], a)[1] for a in kept), note  # managed: libvirt takes it
        assert snap.gpu(gpu).driver not in (None, "vfio-pci"), note  # "from the host": it is on it now
    elif re.fullmatch(r"release undoes what passthrough \S+ did for this GPU; what was there before stays", note):
        assert pci_state(host.root, gpu)[1] not in (None, "vfio-pci"), note
    elif m := re.fullmatch(r"GPU \d+ \((\S+), .+\) has no driver: release binds it to its host driver \(the one the "
                           r"kernel picks for it, not vfio-pci\)", note):
        assert snap.gpu(m[1]).driver not in (None, "vfio-pci"), note
    elif m := re.fullmatch(r"(\S+) stays on vfio-pci: it was there before passthrough \S+", note):
        assert pci_state(host.root, m[1])[1] == "vfio-pci", note
    elif m := re.fullmatch(r"the driverctl override of (\S+) is older than passthrough \S+: left alone .*", note):
        assert driverctl_state(host.root, m[1]) is not None, note
    else:
        raise AssertionError(f"a release note no test checks: {note!r}")


def _release_and_check(host: ActionHost, gpu: str) -> Plan:
    states = {v.name: v.state for v in host.snapshot().vms}
    plan = plan_release(host, host.snapshot(), gpu)
    _apply(host, plan)
    assert plan.notes
    for note in plan.notes:
        _check_note(host, gpu, note, states)
    return plan


def test_gpu_in_a_running_vms_live_config_is_refused_then_released_once_it_is_shut_off(host):
    before = tree_state(host.state_dir)
    plan = plan_release(host, host.snapshot(), IN_VM)
    assert not plan.ok and plan.refusal == "no running VM uses the GPU: VM train-b is running with it"
    assert [c.fix for c in plan.checks if not c.ok] == ["shut it down first (virsh shutdown train-b)"]
    assert Runner(host).run(plan).status != DONE
    assert changed(before, tree_state(host.state_dir)) == set()  # refused: nothing changed
    host.domains.edit("train-b", lambda x: x.replace("<test:runstate>1</test:runstate>",
                                                     "<test:runstate>5</test:runstate>"))
    assert host.snapshot().vm("train-b").state == "shut off"
    plan = _release_and_check(host, IN_VM)
    assert "VM train-b loses the GPU from its config" in plan.notes
    assert host.snapshot().gpu(IN_VM).driver == "nvidia"


def test_shut_off_vm_given_the_gpu_and_a_nic_vf_that_named_the_gpu_before(host):
    """The reproduction: train-c's config named GPU 4 before the passthrough, which added only the VF."""
    _apply(host, plan_passthrough(host, host.snapshot(), IDLE, vm="train-c", with_nic=True))
    assert {IDLE, VF} <= _hostdevs(host, "train-c")
    plan = _release_and_check(host, IDLE)
    assert "VM train-c loses the GPU from its config" not in plan.notes  # the old, false sentence
    assert "VM train-c loses the NIC VF 0000:9c:00.2 from its config" in plan.notes
    assert any(n.startswith("train-c's config names the GPU too") for n in plan.notes)
    assert IDLE in _hostdevs(host, "train-c") and VF not in _hostdevs(host, "train-c")
    assert IDLE in {h.address for h in host.snapshot().vm("train-c").hostdevs}


def test_shut_off_vm_given_the_gpu(host):
    _apply(host, plan_passthrough(host, host.snapshot(), IDLE, vm="build-1"))
    plan = _release_and_check(host, IDLE)
    assert "VM build-1 loses the GPU from its config" in plan.notes
    assert not {IDLE, IDLE_AUDIO} & _hostdevs(host, "build-1")


def test_running_vm_given_the_gpu_for_its_next_start(host):
    _apply(host, plan_passthrough(host, host.snapshot(), IDLE, vm="web-1"))
    plan = _release_and_check(host, IDLE)
    assert any(n.startswith("VM web-1 is running without the GPU") for n in plan.notes)


def test_release_without_a_record_takes_it_out_of_every_config(host):
    plan = _release_and_check(host, IDLE)
    assert plan.notes == ["VM train-c loses the GPU from its config"]
    assert not {IDLE, IDLE_AUDIO} & _hostdevs(host, "train-c")


def test_unbound_gpu(host):
    plan = _release_and_check(host, UNBOUND)
    assert "has no driver" in plan.notes[0]
    assert host.snapshot().gpu(UNBOUND).driver == "nvidia"
