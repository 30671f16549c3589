"""The console's screens on the Proxmox VE demo (`demo reset --proxmox`): every screen opens, and the VMs
screen lists the qemu-server VMs by name with their GPUs (Pilot)."""
from __future__ import annotations

import asyncio

from nodeconsole.console.demo.state import reset_demo
from nodeconsole.console.seams import demo_host
from nodeconsole.screens.app import NodeConsoleApp
from tests.screens.conftest import FIXED_IDS
from tests.screens.helpers import wait_until

SCREENS = {"1": "overview", "2": "topology", "3": "iommu", "4": "gpus", "5": "vms", "6": "nccl", "7": "setup",
           "8": "changes", "9": "events"}


async def _walk(seams) -> dict[str, str]:
    app = NodeConsoleApp(seams, interval=3600)
    seen: dict[str, str] = {}
    async with app.run_test(size=(160, 50)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1, tries=200)
        for key, mode in SCREENS.items():
            await pilot.press(key)
            assert await wait_until(pilot, lambda m=mode: app.current_mode == m), mode
            await app.workers.wait_for_complete()
            await pilot.pause()
            seen[mode] = app.export_screenshot()
    return seen


def test_every_screen_opens_and_the_vms_screen_lists_the_proxmox_vms(tmp_path, monkeypatch):
    state = tmp_path / "demo"
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(state))
    reset_demo(state, proxmox=True)
    seams = demo_host(state)
    seams.pci_ids = FIXED_IDS
    assert seams.hypervisor == "proxmox"
    seen = asyncio.run(_walk(seams))
    vms = seen["vms"]
    for name in ("train-a", "build-1", "vgpu-desk-1", "web-2"):
        assert name in vms, name
    assert "0000:19:00.0" in seen["gpus"] and "train-a" in seen["gpus"]
