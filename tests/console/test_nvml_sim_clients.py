"""Third-party NVML clients run on the simulated library: nvitop (its own ctypes structs, its own function
lookups) reads the demo host without a traceback and with the console's figures; struct arguments are
checked by size and layout, as the C library effectively does, not by Python class."""
from __future__ import annotations

import contextlib
import ctypes
import io
import sys

import pynvml
import pytest

from nodeconsole.console.demo.nvml_sim import NvmlAbiError, SimulatedNvml, uninstall
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.root import Root
from nodeconsole.console.sources.nvml import read_nvml

CLOCK = 1000.0


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    host = ensure_demo(tmp_path_factory.mktemp("clients") / "demo")
    yield host
    uninstall()


@pytest.fixture()
def sim(demo):
    lib = SimulatedNvml.from_file(demo.nvml_state, root=Root(demo.root), clock=lambda: CLOCK).install()
    yield lib
    uninstall()


# -- struct layout ---------------------------------------------------------------------------------------
class ForeignMemoryV2(ctypes.Structure):
    """What nvitop declares: NVML's nvmlMemory_v2_t with other integer class names."""
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class ShortMemory(ctypes.Structure):
    """One field short: the library would write past its end."""
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong)]


class ShuffledMemory(ctypes.Structure):
    """The same size, but a 4-byte field where the library writes 8 bytes."""
    _fields_ = [("version", ctypes.c_uint), ("a", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_uint),
                ("pad", ctypes.c_uint)]


def test_a_foreign_struct_of_the_same_layout_is_written_like_the_libraries_own(sim):
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")
        mine = ForeignMemoryV2(version=pynvml.nvmlMemory_v2)
        assert fn(h, ctypes.byref(mine)) == pynvml.NVML_SUCCESS
        theirs = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        assert (mine.total, mine.used, mine.free) == (theirs.total, theirs.used, theirs.free)
        assert mine.total == 81559 * 1024 * 1024
        for wrong in (ShortMemory(version=pynvml.nvmlMemory_v2), ShuffledMemory(version=pynvml.nvmlMemory_v2)):
            with pytest.raises(NvmlAbiError, match="must point to c_nvmlMemory_v2_t"):
                fn(h, ctypes.byref(wrong))
        with pytest.raises(NvmlAbiError, match=r"must point to c_uint \(4 bytes\)"):
            pynvml._nvmlGetFunctionPointer("nvmlDeviceGetCount_v2")(ctypes.byref(ctypes.c_ulonglong()))
        count = ctypes.c_int()  # a signed int of the same size: C writes the same four bytes
        assert pynvml._nvmlGetFunctionPointer("nvmlDeviceGetCount_v2")(ctypes.byref(count)) == 0
        assert count.value == 7
    finally:
        pynvml.nvmlShutdown()


# -- nvitop ----------------------------------------------------------------------------------------------
def test_nvitop_reads_the_demo_host_like_the_console(sim, monkeypatch):
    """`nvitop --once` in-process on the simulated library (pynvml's library object, which nvitop calls
    through): no traceback, no missing function, and the GPUs, utilization and memory the console reads."""
    from nvitop import cli
    from nvitop.api import libnvml

    ours = read_nvml(sim)
    monkeypatch.setattr(sys, "argv", ["nvitop", "--once", "--ascii"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main()
    text = out.getvalue()
    assert rc == 0, err.getvalue()
    assert "Traceback" not in text + err.getvalue() and "ERROR" not in text + err.getvalue()
    assert not libnvml.UNKNOWN_FUNCTIONS
    assert "Driver Version: 550.90.07" in text
    for g in ours.gpus:  # every GPU NVML sees, by bus id, in NVML order
        assert f"00000000:{g.address[5:].upper()}" in text
    rows = [line for line in text.splitlines() if "W / 700W" in line or "W / 350W" in line]  # SXM5, PCIe
    assert len(rows) == len(ours.gpus)
    for g, row in zip(ours.gpus, rows):
        util = f"{g.utilization_gpu}%" if isinstance(g.utilization_gpu, int) else "N/A"
        assert f" {util} " in row, row
        assert row.split("|")[1].split()[0] == "N/A"  # the fan column: an SXM module has none

    # the API nvitop's views are built on: the same figures, GPU by GPU
    from nvitop import Device

    devices = Device.all()
    assert [d.bus_id().lower()[4:] for d in devices] == [g.address for g in ours.gpus]
    for d, g in zip(devices, ours.gpus):
        assert d.memory_used() // (1024 * 1024) == g.memory_used_mib
        assert d.memory_total() // (1024 * 1024) == g.memory_total_mib
        assert (d.gpu_utilization() if g.utilization_gpu != "N/A" else "N/A") == g.utilization_gpu
        assert d.fan_speed() == "N/A" and d.performance_state() == "P0"
        assert d.current_driver_model() == "N/A"  # a Windows notion: NOT_SUPPORTED on Linux
        assert d.sm_clock() == g.clock_sm_mhz
    libnvml.nvmlShutdown()
