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
        assert len(first.gpus) == 10 and first.vms == ()
        assert first.sources.nvml == "pending" and first.sources.libvirt == "pending"
        assert not any(p.subject in ("nvml", "libvirt") for p in first.problems)  # pending is no fault
        assert shown[1][0] == "full" and len(shown[1][1].vms) == 14


def test_partial_collect_marks_sources_pending(demo_seams):
    snap = Collector(demo_seams).collect(partial=True)
    assert snap.sources.sysfs == "ok"
    assert (snap.sources.nvml, snap.sources.libvirt, snap.sources.psutil) == ("pending",) * 3
    assert {g.owner.kind for g in snap.gpus} >= {"vfio", "unbound", "host"}


async def test_a_first_look_started_before_the_app_is_the_first_frame(demo_seams):
    """A first look taken on a thread (where the launcher cannot fork): its seams and collector become the
    console's, and its sysfs-only snapshot is the screen's first picture, which already lists the GPUs."""
    from nodeconsole.console.first_look import FirstLook

    first = FirstLook(lambda: demo_seams)
    assert first.wait(30) and first.error is None and len(first.snapshot.gpus) == 10
    app = await _first_frame_then_a_poll(first)
    assert app.collector is first.collector and len(app.snapshot.vms) == 14


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
        assert len(app.snapshot.gpus) == 10 and len(app.snapshot.vms) == 14

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
        assert len(tries) == 2 and len(app.snapshot.gpus) == 10 and app.note == ""


async def test_a_first_look_taken_in_a_child_process_is_the_first_frame(demo_seams):
    """A first look taken by a child process brings only the snapshot: the console shows it first, then
    prepares its own seams and collector in its first poll."""
    from nodeconsole.console.first_look import FirstLook

    first = FirstLook(lambda: demo_seams)
    assert first.wait(30) and first.snapshot is not None
    first.seams = first.collector = None  # what the child-process way leaves: the snapshot alone
    made = []

    def factory():
        made.append(1)
        return demo_seams

    first.factory = factory
    app = await _first_frame_then_a_poll(first)
    assert made == [1] and app.collector is not None and len(app.snapshot.vms) == 14


async def _first_frame_then_a_poll(first) -> NodeConsoleApp:
    """The console on a first look: its first frame is drawn from the look's snapshot and lists the 10
    GPUs; returned after its first full poll."""
    mounted = []

    class Watch(NodeConsoleApp):
        def on_mount(self) -> None:
            mounted.append(self.snapshot)  # what the first frame is drawn from
            super().on_mount()

    app = Watch(first, interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        assert mounted == [first.snapshot]
        await pilot.pause()
        assert app.screen.query_one("#gpus").row_count == 10
        for _ in range(100):
            await pilot.pause(0.05)
            if app.polls:
                break
    return app


CHILD_LOOK = """
import json, os, sys
from pathlib import Path
from nodeconsole.console.first_look import FirstLook

def factory():
    if sys.argv[2] == "fail":
        raise OSError("no such host tree")
    from nodeconsole.console.seams import demo_host
    return demo_host(Path(sys.argv[1]))

first = FirstLook(factory, process=True)
done = first.wait(60)
try:
    os.waitpid(-1, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True
snap = first.snapshot
print(json.dumps({"done": done, "in_process": first.in_process, "reaped": reaped,
                  "gpus": None if snap is None else len(snap.gpus),
                  "sysfs": None if snap is None else snap.sources.sysfs,
                  "error": repr(first.error), "collector": first.collector is not None,
                  "textual": "textual" in sys.modules}))
"""


def _child_look(tmp_path, mode: str) -> dict:
    import json
    import subprocess
    import sys

    script = tmp_path / "child_look.py"
    script.write_text(CHILD_LOOK)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "demo"), mode], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_launcher_takes_the_first_look_in_a_child_process(demo_seams, tmp_path):
    """At launch (one thread, before Textual is imported) the first look runs in a forked child, beside
    the console's start-up instead of taking turns with it on one interpreter lock; the child's
    snapshot comes back whole and the child is reaped."""
    got = _child_look(tmp_path, "ok")
    assert got == {"done": True, "in_process": True, "reaped": True, "gpus": 10, "sysfs": "ok", "error": "None",
                   "collector": False, "textual": False}


def test_a_failing_child_leaves_the_first_poll_to_say_why(demo_seams, tmp_path):
    got = _child_look(tmp_path, "fail")
    # no snapshot and no error: the console's first poll calls the factory itself and reports what it raises
    assert got == {"done": True, "in_process": True, "reaped": True, "gpus": None, "sysfs": None, "error": "None",
                   "collector": False, "textual": False}


def test_with_other_threads_running_the_first_look_stays_on_a_thread(demo_seams):
    import threading

    from nodeconsole.console.first_look import FirstLook

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        first = FirstLook(lambda: demo_seams, process=True)
        assert first.wait(30)
        assert not first.in_process and first.collector is not None and len(first.snapshot.gpus) == 10
    finally:
        stop.set()


async def test_the_garbage_collector_paused_at_launch_resumes_after_the_first_frame(demo_seams):
    """The launcher pauses cyclic garbage collection while the console starts; the first frame drawn
    resumes it, with what start-up left alive frozen out of later collections."""
    import gc

    from nodeconsole.screens.app import GC_YOUNG_THRESHOLD

    app = NodeConsoleApp(lambda: demo_seams, interval=5)
    app.gc_paused = True
    threshold = gc.get_threshold()
    gc.disable()
    frozen = gc.get_freeze_count()
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert not app.gc_paused  # the first frame is drawn: resuming is scheduled
            for _ in range(50):
                await pilot.pause(0.05)
                if gc.isenabled():
                    break
            assert gc.isenabled() and gc.get_freeze_count() > frozen
            # the youngest generation is collected less often from then on; the older ones as before
            assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *threshold[1:])
    finally:
        gc.enable()
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_the_launcher_resumes_the_garbage_collector_when_the_console_fails(monkeypatch):
    import gc

    import nodeconsole.console.first_look as first_look
    import nodeconsole.screens.app as app_module
    from nodeconsole.screens.launch import main

    class NoLook:  # nothing of a host is read in this test
        def __init__(self, factory, **_kw):
            self.factory = factory

    def broken(*_args, **_kw):
        assert not gc.isenabled()  # paused while the console starts
        raise RuntimeError("the terminal went away")

    monkeypatch.setattr(first_look, "FirstLook", NoLook)
    monkeypatch.setattr(app_module, "run_app", broken)
    try:
        main(["--demo"])
    except RuntimeError as e:
        assert "terminal went away" in str(e)
    else:
        raise AssertionError("the failure was swallowed")
    assert gc.isenabled()


def test_the_childs_sysfs_only_seams_give_the_same_first_look(demo_seams, tmp_path):
    """The child reads the demo host through seams without the simulated NVML library: its sysfs-only
    snapshot is the one the console's full seams give."""
    import dataclasses

    from nodeconsole.console.seams import demo_host

    light = demo_host(tmp_path / "demo", sysfs_only=True)
    assert light.nvml_lib is None and not light.use_real_nvml and light.origin == "demo"
    full = demo_host(tmp_path / "demo")
    a = Collector(light).collect(partial=True)
    b = Collector(full).collect(partial=True)
    assert dataclasses.replace(a, taken_at=0.0) == dataclasses.replace(b, taken_at=0.0)
    assert len(a.gpus) == 10


def test_a_replay_takes_its_first_look_on_a_thread(monkeypatch, tmp_path):
    """A capture is unpacked into a scratch directory removed by an exit handler, which a forked child
    never runs: a replay's first look stays in the console's process (the demo's goes to a child)."""
    import nodeconsole.console.first_look as first_look
    import nodeconsole.screens.app as app_module
    from nodeconsole.screens.launch import main

    asked = []

    class Look:
        def __init__(self, factory, process=False, **_kw):
            asked.append(process)

    monkeypatch.setattr(first_look, "FirstLook", Look)
    monkeypatch.setattr(app_module, "run_app", lambda *_a, **_kw: 0)
    capture = tmp_path / "host.tar.gz"
    capture.write_bytes(b"not read in this test")
    assert main(["--replay", str(capture)]) == 0
    assert main(["--demo"]) == 0
    assert asked == [False, True]


def test_the_fleet_console_runs_with_the_garbage_collector_on(monkeypatch):
    """Only the host console resumes the collector after its first frame: the fleet console is never
    started with it paused."""
    import gc

    import nodeconsole.screens.fleet as fleet
    from nodeconsole.screens.launch import main

    seen = []
    monkeypatch.setattr(fleet, "run_fleet", lambda url, theme=None: seen.append((url, gc.isenabled())) or 0)
    assert main(["--fleet", "http://127.0.0.1:9090"]) == 0
    assert seen == [("http://127.0.0.1:9090", True)]
