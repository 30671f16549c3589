"""Safety checks that need libvirt refuse when libvirt is down (or a VM's definition cannot be read),
naming it, and change nothing: which VMs hold a device is not guessed."""
from __future__ import annotations

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.passthrough import plan_passthrough, plan_release
from nodeconsole.actions.progress import REFUSED
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.vgpu import plan_vgpu_remove
from tests.actions.test_cli_actions import _cli
from tests.actions.test_passthrough import changed, tree_state

BROKEN = ("<vcpupin vcpu='0' cpuset='2'/>", "<vcpupin vcpu='0' cpuset='abc'/>")


def _break_libvirt(state) -> None:
    """The issue's reproduction: one domain of the node file gets an invalid cpuset, so the test
    driver cannot load the node file at all (libvirt unavailable)."""
    node = state / "libvirt.xml"
    text = node.read_text()
    assert BROKEN[0] in text
    node.write_text(text.replace(*BROKEN, 1))


@pytest.mark.parametrize("args", [("release", "1"), ("vgpu", "remove", "0000:3a:00.4"),
                                  ("passthrough", "4", "--vm", "build-1")])
def test_cli_refuses_while_libvirt_is_down(state, args):
    _break_libvirt(state)
    before = tree_state(state, skip=())
    out = _cli(state, *args, "--demo", "--apply", "--yes")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "libvirt" in text and ("libvirt answers" in text or "no VM named" in text), text
    assert "Traceback" not in text
    assert changed(before, tree_state(state, skip=())) == set()  # host and audit log as before


def test_release_plan_names_the_source(state):
    _break_libvirt(state)
    from nodeconsole.console.seams import demo_host

    host = ActionHost.from_seams(demo_host(state))
    snap = host.snapshot()
    assert snap.sources.libvirt.startswith("unavailable")
    plan = plan_release(host, snap, "1")
    assert not plan.ok and "libvirt" in plan.refusal and "cannot be known" in plan.refusal
    assert Runner(host).run(plan).status == REFUSED
    remove = plan_vgpu_remove(host, snap, "0000:3a:00.4")
    assert not remove.ok and "libvirt" in remove.refusal


def test_unreadable_vm_definition_is_not_dropped(state, monkeypatch):
    from nodeconsole.console.seams import demo_host

    host = ActionHost.from_seams(demo_host(state))
    snap = host.snapshot()
    assert host.domains is not None
    real = host.domains.pci_hostdevs

    def flaky(name: str) -> set[str]:
        if name == "train-c":
            raise RuntimeError("XML of train-c is corrupt")
        return real(name)

    monkeypatch.setattr(host.domains, "pci_hostdevs", flaky)
    plan = plan_release(host, snap, "4")
    assert not plan.ok and "train-c" in plan.refusal and "corrupt" in plan.refusal
    # with every definition readable the same release plans fine
    monkeypatch.setattr(host.domains, "pci_hostdevs", real)
    readable = plan_release(host, snap, "4")
    assert readable.ok and any("train-c" in n for n in readable.notes), readable.notes


def test_passthrough_without_vm_needs_no_libvirt_for_a_plain_gpu(state):
    _break_libvirt(state)
    from nodeconsole.console.seams import demo_host

    host = ActionHost.from_seams(demo_host(state))
    snap = host.snapshot()
    gpu = next(g for g in snap.gpus if g.index == 4)
    assert not gpu.vgpu.instances
    plan = plan_passthrough(host, snap, "4")
    assert "libvirt answers" not in [c.title for c in plan.checks]
