"""The demo host's VM load: moves over time, deterministic, paused uses nothing."""
from __future__ import annotations

from nodeconsole.console.demo.vm_load import demo_vm_cpu_percent


def test_load_moves_and_is_deterministic():
    series = [demo_vm_cpu_percent("train-a", "running", 16, t) for t in range(0, 120, 10)]
    assert len(set(series)) > 3  # it moves
    assert series == [demo_vm_cpu_percent("train-a", "running", 16, t) for t in range(0, 120, 10)]
    assert all(0 < v <= 1600 for v in series)
    assert demo_vm_cpu_percent("db-1", "running", 8, 5.0) != demo_vm_cpu_percent("web-1", "running", 8, 5.0)


def test_states():
    assert demo_vm_cpu_percent("x", "paused", 4, 1.0) == 0.0
    assert demo_vm_cpu_percent("x", "shut off", 4, 1.0) is None


def test_collector_applies_it_on_the_demo_only(tmp_path, monkeypatch):
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.seams import demo_host

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    seams = demo_host()
    snap = Collector(seams).collect()
    by = {v.name: v for v in snap.vms}
    assert by["legacy-app"].state == "paused" and by["legacy-app"].cpu_percent == 0.0
    running = [v for v in snap.vms if v.state == "running"]
    assert running and all(v.cpu_percent is not None and v.cpu_percent <= v.vcpus * 100 for v in running)
    seams.vm_load = None  # the libvirt figures as they come (test driver: first poll has none)
    assert all(v.cpu_percent is None for v in Collector(seams).collect().vms)
