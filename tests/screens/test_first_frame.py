"""The console's first frame comes from sysfs alone (GPUs, topology, IOMMU), then the full snapshot."""
from __future__ import annotations

from nodeconsole.console.collector import Collector
from nodeconsole.screens.app import NodeConsoleApp


async def test_sysfs_first_then_everything(demo_seams):
    shown = []

    class Watch(NodeConsoleApp):
        def _show_partial(self, snap):
            shown.append(("partial", snap))
            super()._show_partial(snap)

        def _apply(self, snap):
            shown.append(("full", snap))
            super()._apply(snap)

    app = Watch(lambda: demo_seams, interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if app.polls:
                break
        kind, first = shown[0]
        assert kind == "partial"
        assert len(first.gpus) == 8 and first.vms == ()
        assert first.sources.nvml == "pending" and first.sources.libvirt == "pending"
        assert not any(p.subject in ("nvml", "libvirt") for p in first.problems)  # pending is no fault
        assert shown[1][0] == "full" and len(shown[1][1].vms) == 13


def test_partial_collect_marks_sources_pending(demo_seams):
    snap = Collector(demo_seams).collect(partial=True)
    assert snap.sources.sysfs == "ok"
    assert (snap.sources.nvml, snap.sources.libvirt, snap.sources.psutil) == ("pending",) * 3
    assert {g.owner.kind for g in snap.gpus} >= {"vfio", "unbound", "host"}
