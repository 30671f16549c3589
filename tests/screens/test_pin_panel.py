"""The VMs screen's pinning: select train-b (vCPUs across both nodes), press n, the plan modal shows the
before/after map with "No" focused; confirming applies it and the next snapshot shows train-b aligned.
The rebalance view marks the cross-node VM before and not after; N plans every unpinned GPU VM."""
from __future__ import annotations

from textual.widgets import Button, Static

from nodeconsole.console.checks import vm_alignment
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until


def _text(app, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).content)


async def test_pin_train_b_from_the_vms_screen(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 50)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("5")
        assert await wait_until(pilot, lambda: bool(app.screen.query("#vm-rebalance")))
        assert "train-b  CPU 10-13,34-37,74-77,98-101 on node 0-1  ✖ GPU on node 1" in _text(app, "#vm-rebalance")
        table = app.screen.query_one("#vm-table", KeyedTable)
        table.move_cursor(row=table.get_row_index("train-b"))
        await pilot.press("n")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        modal = app.screen
        assert "Pin VM train-b to NUMA node 1" in str(modal.query_one("#plan-title", Static).content)
        body = str(modal.query_one("#plan-body", Static).content)
        assert "before" in body and "after" in body
        assert "vCPU 0    10 (node 0)" in body and "→  34 (node 1)" in body
        assert "interleave on node 0-1 →  strict on node 1" in body
        assert app.focused is modal.query_one("#no", Button)
        await pilot.press("enter")  # "No" changes nothing
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PlanModal))
        await pilot.pause(0.4)
        assert app.action_results == [] and vm_alignment(app.snapshot, app.snapshot.vm("train-b")) == "cross-numa"

        await pilot.press("n")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        await pilot.press("tab")  # from "No" to "Yes", as an admin would (scrolls it into view)
        assert app.focused.id == "yes"
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        assert app.action_results[0].ok, app.action_results[0].message
        assert await wait_until(pilot, lambda: vm_alignment(app.snapshot, app.snapshot.vm("train-b")) == "aligned")
        vm = app.snapshot.vm("train-b")
        # off every other VM's pins (shut-off mig-infer-b holds 38-41,102-105), emulator on the host's CPUs
        assert vm.emulator_pins == (32, 33, 96, 97) and (vm.numa_mode, vm.numa_nodeset) == ("strict", (1,))
        assert await wait_until(pilot, lambda: "train-b  CPU 34-37,56-59,98-101,120-123 on node 1  ok"
                                in _text(app, "#vm-rebalance"))
        assert "mig-infer-b  (shut off)  CPU 38-41,102-105" in _text(app, "#vm-rebalance")


async def test_pin_all_plans_every_unpinned_gpu_vm(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 50)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("5")
        await pilot.press("N")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal))
        assert "Pin every unpinned GPU VM" in str(app.screen.query_one("#plan-title", Static).content)
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert "Pin VM vgpu-desk-2" in body
        assert "any CPU   →  24 (node 0)" in body
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, PlanModal))
        assert app.action_results == []


async def test_pin_needs_the_vms_screen(demo_seams):
    app = NodeConsoleApp(demo_seams, interval=0.3)
    async with app.run_test(size=(110, 50)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        await pilot.press("4")
        await pilot.press("n")  # inactive off the VMs screen (and not in the GPUs footer)
        await pilot.pause(0.3)
        assert not isinstance(app.screen, PlanModal)
        app._run_anywhere("pin")  # the palette's Pin runs anywhere and says where it works
        await pilot.pause(0.3)
        assert not isinstance(app.screen, PlanModal)
        assert any("VMs screen" in str(n.message) for n in app._notifications)
