"""The GPUs screen's `a` asks which VM gets the GPU (shut-off VMs first) and whether its NIC goes along:
keyboard only, the plan then names the VM's hostdevs and the VF beside the GPU, and applying it leaves
them in the VM's config; Esc on the picker or on the plan changes nothing."""
from __future__ import annotations

from textual.widgets import Checkbox, Input, OptionList, Static

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.passthrough_pick import PassthroughPickModal, vm_choices
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

GPU = "0000:9a:00.0"  # idle on nvidia; the shut-off VM train-c has it in its config
VF = "0000:9c:00.2"  # the free VF at PIX from it


def _said(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def _picker(app, pilot) -> PassthroughPickModal:
    assert await wait_until(pilot, lambda: app.polls >= 1)
    await pilot.press("4")
    table = app.screen.query_one("#gpu-table", KeyedTable)
    table.move_cursor(row=table.get_row_index(GPU))
    assert await wait_until(pilot, lambda: app.selected_gpu == GPU)
    await pilot.press("a")
    assert await wait_until(pilot, lambda: isinstance(app.screen, PassthroughPickModal))
    return app.screen


def _prompts(modal) -> list[str]:
    ol = modal.query_one("#pt-pick-list", OptionList)
    return [str(ol.get_option_at_index(i).prompt) for i in range(ol.option_count)]


def test_vm_choices_put_shut_off_vms_first_and_say_what_they_hold(demo_seams):
    from nodeconsole.actions.session import ActionSession

    snap = ActionSession.from_seams(demo_seams).host.snapshot()
    choices = vm_choices(snap, GPU)
    assert sorted(c.name for c in choices) == sorted(v.name for v in snap.vms)  # every defined VM
    order = [c.state for c in choices]
    assert order == sorted(order, key=lambda s: {"shut off": 0, "paused": 1, "running": 2}.get(s, 3))
    assert [c.name for c in choices if c.state == "shut off"] == ["build-1", "mig-infer-b", "train-c", "train-d"]
    by_name = {c.name: c for c in choices}
    assert by_name["train-c"].note == "its config already has this GPU"
    assert by_name["train-a"].note == "holds GPU 1" and by_name["build-1"].note == ""


async def test_a_gives_the_gpu_and_its_nic_to_a_shut_off_vm_keyboard_only(demo_seams):
    node = demo_seams.audit_dir / "libvirt.xml"
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(80, 24)) as pilot:
        modal = await _picker(app, pilot)
        prompts = _prompts(modal)
        assert prompts[0].startswith("no VM") and prompts[1].split() == ["VM", "build-1", "shut", "off"]
        assert "VM train-a running holds GPU 1" in [" ".join(p.split()) for p in prompts]
        assert app.focused is modal.query_one("#pt-pick-list", OptionList)
        nic = modal.query_one("#pt-pick-nic", Checkbox)
        assert nic.disabled and not nic.value  # no VM yet: no NIC to give
        await pilot.press("n")
        assert not nic.value and any("pick one first" in m for m in _said(app))
        await pilot.press("down")  # build-1
        assert not nic.disabled
        await pilot.press("n")
        assert nic.value
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
        plan = app.screen
        title = str(plan.query_one("#plan-title", Static).content)
        assert "through to VM build-1 with a NIC VF beside it" in title
        body = str(plan.query_one("#plan-body", Static).content)
        assert f"Add {GPU} to VM build-1's config" in body and "Add 0000:9a:00.1 to VM build-1's config" in body
        assert f"Bind {VF} to vfio-pci" in body and f"Add {VF} to VM build-1's config" in body
        # a VM's config gets a device: confirmed by typing the address the dialog names
        hint = str(plan.query_one("#plan-typed-hint", Static).content)
        assert app.focused is plan.query_one("#plan-typed", Input)
        typed = hint.split("type ", 1)[1].split(" and press", 1)[0]
        assert typed in (GPU, VF), hint
        await pilot.press(*typed, "enter")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        assert app.action_results[0].ok, app.action_results[0].message
        assert await wait_until(pilot, lambda: {GPU, VF} <= {h.address for h in app.snapshot.vm("build-1").hostdevs},
                                tries=100)
        after = node.read_text()
        build = after[after.index("<name>build-1</name>"):]
        build = build[:build.index("</domain>")]
        assert "bus='0x9a'" in build and "bus='0x9c' slot='0x00' function='0x2'" in build


async def test_escape_on_the_picker_or_the_plan_changes_nothing(demo_seams):
    node = demo_seams.audit_dir / "libvirt.xml"
    before = node.read_bytes()
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(80, 24)) as pilot:
        await _picker(app, pilot)
        await pilot.press("down", "n", "escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PassthroughPickModal))
        await pilot.pause(0.3)
        assert not isinstance(app.screen, PlanModal) and app.action_results == []

        await pilot.press("a")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PassthroughPickModal))
        await pilot.press("down", "down", "enter")  # mig-infer-b, no NIC
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert f"Add {GPU} to VM mig-infer-b's config" in body and VF not in body
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PlanModal))
        assert await wait_until(pilot, lambda: any("cancelled, nothing was changed" in m for m in _said(app)))
        await pilot.pause(0.3)
        assert app.action_results == [] and node.read_bytes() == before
        assert app.snapshot.gpu(GPU).driver == "nvidia"
