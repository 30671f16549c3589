"""`release` is the inverse of `passthrough` for that GPU: it puts back exactly what the passthroughs in
effect changed (drivers, overrides, driverctl persistence, hostdevs added to a VM's config), byte for
byte, and leaves alone what was there before (train-c's config names GPU 4 in the demo as generated).
A VM that holds the GPU only in its persistent config is no reason to refuse. One demo host serves the
whole module: every test that changes it puts it back and checks that it did."""
from __future__ import annotations

import dataclasses

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.passthrough import memory_note, plan_passthrough, plan_release
from nodeconsole.actions.plan import needs_typed_confirmation
from nodeconsole.actions.progress import DONE
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import IDLE, IDLE_AUDIO, changed, tree_state

UNBOUND = "0000:ba:00.0"  # GPU 6: no driver in the demo as generated


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> ActionHost:
    return ActionHost.from_seams(demo_host(tmp_path_factory.mktemp("release") / "demo"))


def _definitions(host: ActionHost) -> dict[str, str]:
    """Every VM's definition as the domain store holds it (the demo's libvirt node file)."""
    cfg = host.domains
    return {name: cfg.xml(name) for name in cfg.names()}


def _run(host: ActionHost, plan) -> None:
    assert plan.ok, plan.refusal
    res = Runner(host).run(plan)
    assert res.status == DONE, res.message


def _vms_in(plan) -> set[str]:
    return {s.op["vm"] for s in plan.steps if s.op["kind"] == "vm_hostdev"}


@pytest.mark.parametrize("vm", ["web-1", "build-1"])  # running, shut off
def test_passthrough_persist_then_release_restores_byte_for_byte(host, vm):
    state = host.snapshot().vm(vm).state
    before, defs = tree_state(host.state_dir), _definitions(host)
    passed = plan_passthrough(host, host.snapshot(), "4", vm=vm, persist=True)
    _run(host, passed)
    assert host.root.read(f"etc/driverctl.d/pci-{IDLE}") == "vfio-pci"
    assert IDLE in host.domains.pci_hostdevs(vm)

    plan = plan_release(host, host.snapshot(), "4")
    assert plan.ok, plan.refusal  # a running VM given the GPU for its next start is no dead end
    assert _vms_in(plan) == {vm}  # train-c's config held the GPU before: not touched
    assert [s.op["kind"] for s in plan.steps] == ["vm_hostdev"] * 2 + ["driverctl"] * 2 + ["pci_driver"] * 2
    assert any(n.startswith("train-c's config names the GPU too") and "left alone" in n
               and "virsh edit train-c" in n for n in plan.notes)
    if state == "running":
        assert any(c.ok and c.reason == f"VM {vm} holds it in its config only" for c in plan.checks)
        assert any(n.startswith(f"VM {vm} is running without the GPU") and "config only" in n for n in plan.notes)
    # the config detach is shown as a command an admin can run, with the exact <hostdev> it removes
    detach = plan.steps[1]
    assert detach.commands == (f"virsh detach-device {vm} /dev/stdin --config <<'EOF'  # the <hostdev> below, then EOF",)
    assert detach.detail.startswith("<hostdev mode='subsystem' type='pci' managed='yes'>")
    assert "bus='0x9a' slot='0x00' function='0x0'" in detail_line(detach.detail) and detach.detail.endswith("</hostdev>")
    assert needs_typed_confirmation(plan) == IDLE
    _run(host, plan)

    assert changed(before, tree_state(host.state_dir)) == set()  # drivers, overrides, driverctl, node file
    assert _definitions(host) == defs  # every VM definition, text for text
    assert host.snapshot().gpu(IDLE).driver == "nvidia"


def detail_line(detail: str) -> str:
    return " ".join(line.strip() for line in detail.splitlines())


def test_release_after_two_passthroughs_undoes_both(host):
    """`passthrough 4` (no VM: train-c never touched) then `passthrough 4 --vm build-1`: release undoes
    the drivers of the first and the config of the second, nothing else."""
    before, defs = tree_state(host.state_dir), _definitions(host)
    bare = plan_passthrough(host, host.snapshot(), "4")
    _run(host, bare)
    first = plan_release(host, host.snapshot(), "4")
    assert [s.op["kind"] for s in first.steps] == ["pci_driver", "pci_driver"]  # not train-c's config
    assert needs_typed_confirmation(first) is None
    _run(host, plan_passthrough(host, host.snapshot(), "4", vm="build-1"))
    plan = plan_release(host, host.snapshot(), "4")
    assert _vms_in(plan) == {"build-1"}
    assert [s.title for s in plan.steps][-2:] == [f"Give {IDLE_AUDIO} back to snd_hda_intel", f"Give {IDLE} back to nvidia"]
    _run(host, plan)
    assert changed(before, tree_state(host.state_dir)) == set()
    assert _definitions(host) == defs


def test_undone_passthrough_is_not_released_again(host):
    before = tree_state(host.state_dir)
    _run(host, plan_passthrough(host, host.snapshot(), "4", vm="build-1"))
    _run(host, plan_undo(host))
    assert changed(before, tree_state(host.state_dir)) == set()
    # no passthrough in effect: release plans from the host, naming only the VM whose config holds it
    plan = plan_release(host, host.snapshot(), "4")
    assert _vms_in(plan) == {"train-c"} and not any("passthrough" in n for n in plan.notes)


def test_release_without_a_record_names_only_the_vms_that_hold_the_gpu(host):
    plan = plan_release(host, host.snapshot(), IDLE)
    assert plan.ok and _vms_in(plan) == {"train-c"}
    text = "\n".join(plan.lines())
    others = {v.name for v in host.snapshot().vms} - {"train-c"}
    assert not [name for name in others if name in text], text
    busy = plan_release(host, host.snapshot(), "5")  # train-b runs with GPU 5
    assert not busy.ok and busy.refusal == "no running VM uses the GPU: VM train-b is running with it"


class ConfigOnly:
    """A libvirt connection (running and persistent definitions apart) where running `vm` has the
    GPU in its persistent config only: its running definition (the snapshot's) lacks it."""
    one_state = False

    def __init__(self, inner, vm: str, addresses: set[str]) -> None:
        self.inner, self.vm, self.addresses = inner, vm, addresses

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def pci_hostdevs(self, vm: str) -> set[str]:
        return self.inner.pci_hostdevs(vm) | (self.addresses if vm == self.vm else set())


def test_a_running_vm_holding_the_gpu_in_its_config_only(host):
    libvirt_host = dataclasses.replace(host, domains=ConfigOnly(host.domains, "web-1", {IDLE, IDLE_AUDIO}))
    snap = host.snapshot()
    assert snap.vm("web-1").state == "running" and not snap.vm("web-1").hostdevs
    plan = plan_release(libvirt_host, snap, IDLE)
    assert plan.ok, plan.refusal
    assert _vms_in(plan) == {"train-c", "web-1"}
    assert any(n.startswith("VM web-1 is running without the GPU (its config names the GPU, its running "
                            "definition does not)") for n in plan.notes)
    assert "VM train-c loses the GPU from its config" in plan.notes
    # and passthrough to another VM is not refused for it either
    other = plan_passthrough(libvirt_host, snap, IDLE, vm="build-1")
    assert not any(c.title == "no running VM uses the GPU" for c in other.checks)


def test_release_of_an_unbound_gpu_gives_it_its_host_driver(host):
    before = tree_state(host.state_dir)
    plan = plan_release(host, host.snapshot(), "6")
    assert [s.op for s in plan.steps] == [{"kind": "pci_driver", "device": UNBOUND, "override": None, "driver": "*",
                                          "group": host.snapshot().gpu(UNBOUND).iommu_group}]
    assert plan.notes[0].startswith(f"GPU 6 ({UNBOUND}, ") and "has no driver: release binds it to its host driver" \
        in plan.notes[0]
    _run(host, plan)
    assert host.snapshot().gpu(UNBOUND).driver == "nvidia"
    assert plan_release(host, host.snapshot(), "6").empty
    _run(host, plan_undo(host))
    assert changed(before, tree_state(host.state_dir)) == set()


def test_vm_memory_below_twice_the_vram_it_would_hold_is_a_note(host):
    snap = host.snapshot()
    plan = plan_passthrough(host, snap, "4", vm="web-1")
    assert plan.ok  # a note, not a refusal
    (note,) = [n for n in plan.notes if n.startswith("warning: VM web-1 has 4 GiB of memory")]
    assert "below 2× the 80 GiB VRAM of the GPU (160 GiB; 2–3× is recommended)" in note
    assert "virsh setmaxmem web-1 160G --config" in note
    # train-a already holds GPU 1: the rule counts every GPU it would hold
    (note,) = [n for n in plan_passthrough(host, snap, "4", vm="train-a").notes if "of memory" in n]
    assert "VM train-a has 128 GiB of memory, below 2× the 160 GiB VRAM of its 2 GPUs (320 GiB;" in note
    big = dataclasses.replace(snap.vm("web-1"), memory_kib=256 * 1048576)
    assert memory_note(host, snap, big, snap.gpu(IDLE)) is None
