"""Fixtures for console tests: a private demo host per test module, and a frozen snapshot for SVG
snapshots (fixed NVML clock and fixed VM load so the pictures are stable)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from console.collector import Collector
from console.demo.nvml_sim import SimulatedNvml
from console.demo.state import ensure_demo
from console.root import Root
from console.seams import Seams


@pytest.fixture()
def demo_seams(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    host = ensure_demo(tmp_path / "demo")
    root = Root(host.root)
    lib = SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True)
    return Seams(root=root, libvirt_uri=host.libvirt_uri, nvml_lib=lib, demo_dir=tmp_path / "demo",
                 state_dir=tmp_path / "demo")


class FrozenCollector(Collector):
    """Collects once for real, then serves that snapshot with deterministic load figures."""

    def __init__(self, seams: Seams) -> None:
        super().__init__(seams)
        snap = Collector.collect(self)
        vms = tuple(replace(v, cpu_percent=(None if v.state != "running" else 25.0 + 5 * (i % 5)))
                    for i, v in enumerate(snap.vms))
        self._frozen = replace(snap, vms=vms, taken_at=0.0)

    def collect(self, partial: bool = False):
        return self._frozen


@pytest.fixture()
def frozen_seams(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    host = ensure_demo(tmp_path / "demo")
    root = Root(host.root)
    lib = SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True, clock=lambda: 1000.0)
    return Seams(root=root, libvirt_uri=host.libvirt_uri, nvml_lib=lib, demo_dir=tmp_path / "demo")
