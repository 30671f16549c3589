"""Fixtures for console tests: a private demo host per test module, and a frozen snapshot for SVG
snapshots (fixed NVML clock and fixed VM load so the pictures are stable)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nodeconsole.console.collector import Collector
from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.pciids import PciIds
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams, simulated_host

# Device names in every rendered test come from the built-in table, never the machine's pci.ids.
FIXED_IDS = PciIds(paths=None)


@pytest.fixture()
def demo_seams(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    host = ensure_demo(tmp_path / "demo")
    root = Root(host.root)
    lib = SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True)
    return simulated_host(root=root, libvirt_uri=host.libvirt_uri, nvml_lib=lib, state_dir=tmp_path / "demo", pci_ids=FIXED_IDS)


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


def make_frozen_seams(state: Path) -> Seams:
    """Seams for a private demo host whose NVML clock is fixed (for stable pictures)."""
    host = ensure_demo(state)
    root = Root(host.root)
    lib = SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True, clock=lambda: 1000.0)
    return simulated_host(root=root, libvirt_uri=host.libvirt_uri, nvml_lib=lib, state_dir=state, pci_ids=FIXED_IDS)


@pytest.fixture()
def frozen_seams(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    return make_frozen_seams(tmp_path / "demo")
