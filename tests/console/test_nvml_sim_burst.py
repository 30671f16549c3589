"""The simulated library looks at its state file and at the GPUs' driver links once per burst of calls
(a client's reading of its GPUs), not once per call: what another process changed in between is seen by
the next poll, and by a call after a pause."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pynvml
import pytest

from nodeconsole.console.demo import nvml_sim
from nodeconsole.console.demo.nvml_sim import SimulatedNvml, uninstall
from nodeconsole.console.sources.nvml import NvmlSource
from tests.console.nvml_states import A100, H100, L40S, demo_state, driver_tree

# Another process: rewrites the state file atomically (a new process on A100) and moves L40S to vfio-pci.
OTHER = """
import json, os, sys
state, root, gpu, moved = sys.argv[1:]
data = json.load(open(state))
for g in data["gpus"]:
    if g["address"] == gpu:
        g["processes"].append({"pid": 5151, "name": "trainer", "used_mib": 2048})
with open(state + ".tmp", "w") as f:
    json.dump(data, f)
os.replace(state + ".tmp", state)
link = os.path.join(root, "sys/bus/pci/devices", moved, "driver")
os.unlink(link)
os.symlink("../../../../bus/pci/drivers/vfio-pci", link)
"""


@pytest.fixture(autouse=True)
def _no_library_left_behind():
    yield
    uninstall()


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    root = driver_tree(tmp_path / "root", {H100: "nvidia", A100: "nvidia", L40S: "nvidia"})
    state = tmp_path / "nvml.json"
    state.write_text(json.dumps(demo_state()))
    return state, root


def _by_addr(data):
    return {g.address: g for g in data.gpus}


def test_another_process_change_is_seen_by_the_next_poll(host: tuple[Path, Path]) -> None:
    state, root = host
    source = NvmlSource(SimulatedNvml.from_file(state, root=str(root)))
    first = _by_addr(source.read())
    assert 5151 not in {p.pid for p in first[A100].processes} and first[L40S].error == ""
    subprocess.run([sys.executable, "-c", OTHER, str(state), str(root), A100, L40S], check=True, timeout=30)
    second = _by_addr(source.read())  # at once: no pause needed between the change and the poll
    assert {p.pid: p.name for p in second[A100].processes}[5151] == "trainer"
    assert second[L40S].error == "GPU is lost"  # taken from the driver while NVML held it


def test_one_look_per_burst(host: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    state, root = host
    source = NvmlSource(SimulatedNvml.from_file(state, root=str(root)))
    source.read()
    stats, links = [], []
    real_stat, real_readlink = os.stat, os.readlink

    def stat(path, *args, **kwargs):
        if os.fspath(path) == str(state):
            stats.append(path)
        return real_stat(path, *args, **kwargs)

    def readlink(path, *args, **kwargs):
        links.append(path)
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(nvml_sim.os, "stat", stat)
    monkeypatch.setattr(nvml_sim.os, "readlink", readlink)
    # A burst ends after a 1 ms gap between calls: a loaded machine that stops this thread for longer
    # mid-poll would split the poll in two. Only the reading's start begins a burst here.
    monkeypatch.setattr(nvml_sim, "BURST_GAP_S", 60.0)
    monkeypatch.setattr(nvml_sim, "BURST_MAX_S", 60.0)
    lib = source.lib
    assert isinstance(lib, SimulatedNvml)
    lib.calls.clear()
    source.read()
    assert sum(lib.calls.values()) > 15  # a poll's many calls ...
    assert len(stats) == 1 and len(links) == 3  # ... look once at the state file and each GPU's link


def test_a_call_after_a_pause_sees_a_change(host: tuple[Path, Path]) -> None:
    state, root = host
    SimulatedNvml.from_file(state, root=str(root)).install()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByPciBusId(L40S.encode())
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu >= 0
    link = root / "sys/bus/pci/devices" / L40S / "driver"
    link.unlink()
    os.symlink("../../../../bus/pci/drivers/vfio-pci", link)
    time.sleep(2 * nvml_sim.BURST_GAP_S)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUtilizationRates(handle)
    pynvml.nvmlShutdown()
