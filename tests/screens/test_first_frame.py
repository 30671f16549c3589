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


async def test_a_first_look_started_before_the_app_is_the_first_frame(demo_seams):
    """The launcher starts the first look (seams + a sysfs-only snapshot) on a thread before Textual is
    imported: when it is ready, the screen's first picture already lists the GPUs."""
    from nodeconsole.console.first_look import FirstLook

    first = FirstLook(lambda: demo_seams)
    assert first.wait(30) and first.error is None and len(first.snapshot.gpus) == 8
    mounted = []

    class Watch(NodeConsoleApp):
        def on_mount(self) -> None:
            super().on_mount()
            mounted.append(self.snapshot)  # what the first frame is drawn from

    app = Watch(first, interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        assert len(mounted) == 1 and mounted[0] is first.snapshot
        await pilot.pause()
        assert app.screen.query_one("#gpus").row_count == 8
        for _ in range(100):
            await pilot.pause(0.05)
            if app.polls:
                break
        assert app.collector is first.collector and len(app.snapshot.vms) == 13


async def test_a_slow_or_failing_first_look_does_not_hold_the_console(demo_seams):
    import threading

    from nodeconsole.console.first_look import FirstLook

    gate = threading.Event()

    def slow():
        gate.wait(10)
        return demo_seams

    app = NodeConsoleApp(FirstLook(slow), interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.snapshot is None  # drawn without waiting for it
        gate.set()
        for _ in range(100):
            await pilot.pause(0.05)
            if app.polls:
                break
        assert len(app.snapshot.gpus) == 8 and len(app.snapshot.vms) == 13

    tries = []

    def broken_once():  # a host tree that is not there yet, then is: the console recovers
        tries.append(1)
        if len(tries) == 1:
            raise OSError("no such host tree")
        return demo_seams

    app = NodeConsoleApp(FirstLook(broken_once), interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(40):
            await pilot.pause(0.05)
            if app.note:
                break
        assert "no such host tree" in app.note
        for _ in range(100):
            await pilot.pause(0.05)
            if app.polls:
                break
        assert len(tries) == 2 and len(app.snapshot.gpus) == 8 and app.note == ""
