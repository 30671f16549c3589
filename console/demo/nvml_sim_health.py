"""Health symbols of the simulated NVML library: clocks and clock-event (throttle) reasons, the PCIe replay
counter and throughput, NVLink (state, version, remote end, error counters, capabilities) and the GPU's
state in the NVLink fabric.

State keys of a GPU (docs/demo-host.md): "clocks" (maximum and idle MHz; the current SM clock follows the
load model; a capture's "captured" clock_sm_mhz, clock_mem_mhz and clock_events_mask replace it),
"clock_events" (reason names forced on top of the ones the load model gives), "pcie_replay",
"nvlink" ({"version", "remote_type" or per link "remote_types", "remotes": one PCI address per link,
"down": inactive links, "errors": {link: {counter: n}}}; absent: NVLink NOT_SUPPORTED, as on a PCIe board without a bridge) and
"fabric" ({"state", "status", "clique_id", "cluster_uuid"}; absent: NOT_SUPPORTED, as before Hopper).
"""
from __future__ import annotations

import ctypes
import uuid as uuidlib
from typing import Any

import pynvml
from pynvml import NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED

from nodeconsole.console.demo.nvml_abi import NvmlAbiError, NvmlReturn, in_int, out_ref
from nodeconsole.console.demo.nvml_sim_base import NvmlSimBase
from nodeconsole.console.demo.nvml_sim_device import load_percent, split_address

# H100 SXM5 80GB: maximum SM/graphics clock, HBM3 clock, video clock; the SM clock at idle.
DEFAULT_CLOCKS = {"sm_max": 1980, "mem_max": 2619, "video_max": 1755, "sm_idle": 345}
POWER_CAP_LOAD = 70  # above this load % the board runs into its power limit: SW power cap, lower clock

# nvmlClocksEventReason* bits and the names the console and the state use for them.
CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
    "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100,
}
_SUPPORTED_EVENTS = sum(CLOCK_EVENT_BITS.values()) & ~0x100  # no display clock on a board without display

NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")  # NVML_NVLINK_ERROR_DL_* 0-3
_REMOTE_TYPES = {"gpu": 0, "ibmnpu": 1, "switch": 2}
_FABRIC_STATES = {"not_supported": 0, "not_started": 1, "in_progress": 2, "completed": 3}
# healthMask of a healthy Hopper GPU in the fabric: degraded bandwidth, route recovery, route unhealthy and
# access timeout recovery all "false" (2 in each 2-bit field).
_FABRIC_HEALTHY_MASK = 2 | 2 << 2 | 2 << 4 | 2 << 6


def clock_mhz(gpu: dict[str, Any], domain: str, t: float) -> int:
    """The current clock of `domain` ("sm", "graphics", "mem", "video") at time `t`: idle clock without
    load; the maximum under load, less as the load pushes the board into its power cap."""
    captured = (gpu.get("captured") or {}).get(f"clock_{'mem' if domain == 'mem' else 'sm'}_mhz")
    if captured is not None and domain in ("sm", "graphics", "mem"):
        return int(captured)
    clocks = {**DEFAULT_CLOCKS, **(gpu.get("clocks") or {})}
    if domain == "mem":
        return int(clocks["mem_max"])
    top = int(clocks["video_max" if domain == "video" else "sm_max"])
    busy = load_percent(gpu, t)
    if busy < 1:
        return int(clocks["sm_idle"])
    return top - round(max(0.0, busy - POWER_CAP_LOAD) * 6)


def clock_events_mask(gpu: dict[str, Any], t: float) -> int:
    """Reasons the clocks are held below their maximum now: idle without load, SW power cap above
    POWER_CAP_LOAD, plus the state's forced "clock_events"."""
    captured = (gpu.get("captured") or {}).get("clock_events_mask")
    if captured is not None:
        return int(captured)
    busy = load_percent(gpu, t)
    mask = CLOCK_EVENT_BITS["gpu_idle"] if busy < 1 else 0
    if busy > POWER_CAP_LOAD:
        mask |= CLOCK_EVENT_BITS["sw_power_cap"]
    for name in gpu.get("clock_events", ()):
        mask |= CLOCK_EVENT_BITS.get(name, 0)
    return mask


_CLOCK_TYPES = {pynvml.NVML_CLOCK_GRAPHICS: "graphics", pynvml.NVML_CLOCK_SM: "sm", pynvml.NVML_CLOCK_MEM: "mem",
                pynvml.NVML_CLOCK_VIDEO: "video"}


class HealthSymbols(NvmlSimBase):
    """Mixin of SimulatedNvml (uses its state, clock and handle helpers)."""

    def _out_uint(self, out: Any, sym: str, pos: int, ctype: type = ctypes.c_uint) -> Any:
        obj = out_ref(out, ctype, sym, pos)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return obj

    # -- clocks ---------------------------------------------------------------------------------------
    def _clock_domain(self, clock_type: Any, sym: str) -> str:
        domain = _CLOCK_TYPES.get(in_int(clock_type, sym, 2))
        if domain is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return domain

    def c_nvmlDeviceGetClockInfo(self, handle: Any, clock_type: Any, out: Any) -> None:
        sym = "nvmlDeviceGetClockInfo"
        t = self._target(handle, sym)
        domain = self._clock_domain(clock_type, sym)
        self._out_uint(out, sym, 3).value = clock_mhz(t.gpu, domain, self.clock())

    def c_nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: Any, out: Any) -> None:
        sym = "nvmlDeviceGetMaxClockInfo"
        t = self._target(handle, sym)
        domain = self._clock_domain(clock_type, sym)
        clocks = {**DEFAULT_CLOCKS, **(t.gpu.get("clocks") or {})}
        key = {"graphics": "sm_max", "sm": "sm_max", "mem": "mem_max", "video": "video_max"}[domain]
        self._out_uint(out, sym, 3).value = int(clocks[key])

    def c_nvmlDeviceGetClock(self, handle: Any, clock_type: Any, clock_id: Any, out: Any) -> None:
        sym = "nvmlDeviceGetClock"
        t = self._target(handle, sym)
        domain = self._clock_domain(clock_type, sym)
        cid = in_int(clock_id, sym, 3)
        if cid != pynvml.NVML_CLOCK_ID_CURRENT:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)  # no application clocks set on this board
        self._out_uint(out, sym, 4).value = clock_mhz(t.gpu, domain, self.clock())

    def c_nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetCurrentClocksEventReasons"
        t = self._target(handle, sym)
        self._out_uint(out, sym, 2, ctypes.c_ulonglong).value = clock_events_mask(t.gpu, self.clock())

    def c_nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetCurrentClocksThrottleReasons"  # the older name of the same query
        t = self._target(handle, sym)
        self._out_uint(out, sym, 2, ctypes.c_ulonglong).value = clock_events_mask(t.gpu, self.clock())

    def c_nvmlDeviceGetSupportedClocksEventReasons(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetSupportedClocksEventReasons"
        self._target(handle, sym)
        self._out_uint(out, sym, 2, ctypes.c_ulonglong).value = _SUPPORTED_EVENTS

    # -- PCIe -----------------------------------------------------------------------------------------
    def c_nvmlDeviceGetPcieReplayCounter(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetPcieReplayCounter"
        t = self._target(handle, sym)
        self._out_uint(out, sym, 2).value = int(t.gpu.get("pcie_replay", 0))

    def c_nvmlDeviceGetPcieThroughput(self, handle: Any, counter: Any, out: Any) -> None:
        """KB/s over the last 20 ms: TX (0) and RX (1) follow the load, RX a little more."""
        sym = "nvmlDeviceGetPcieThroughput"
        t = self._target(handle, sym)
        c = in_int(counter, sym, 2)
        if c not in (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES):
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        busy = load_percent(t.gpu, self.clock())
        self._out_uint(out, sym, 3).value = round(busy * (2000 if c == pynvml.NVML_PCIE_UTIL_TX_BYTES else 3000))

    # -- NVLink ---------------------------------------------------------------------------------------
    def _link(self, handle: Any, link: Any, sym: str) -> tuple[dict[str, Any], int]:
        """(the GPU's "nvlink" state, the link index) — NOT_SUPPORTED without NVLink, INVALID_ARGUMENT for a
        link the GPU does not have."""
        t = self._target(handle, sym)
        nv = t.gpu.get("nvlink")
        if not nv:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        i = in_int(link, sym, 2)
        if not 0 <= i < len(nv.get("remotes", ())):
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return nv, i

    def c_nvmlDeviceGetNvLinkState(self, handle: Any, link: Any, out: Any) -> None:
        sym = "nvmlDeviceGetNvLinkState"
        nv, i = self._link(handle, link, sym)
        self._out_uint(out, sym, 3).value = 0 if i in nv.get("down", ()) else 1

    def c_nvmlDeviceGetNvLinkVersion(self, handle: Any, link: Any, out: Any) -> None:
        sym = "nvmlDeviceGetNvLinkVersion"
        nv, _ = self._link(handle, link, sym)
        self._out_uint(out, sym, 3).value = int(nv.get("version", 4))

    def c_nvmlDeviceGetNvLinkRemotePciInfo_v2(self, handle: Any, link: Any, out: Any) -> None:
        sym = "nvmlDeviceGetNvLinkRemotePciInfo_v2"
        nv, i = self._link(handle, link, sym)
        info = out_ref(out, pynvml.nvmlPciInfo_t, sym, 3)
        if info is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        if not nv["remotes"][i]:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)  # a capture that could not read this end
        domain, bus, dev, fn = split_address(nv["remotes"][i])
        info.domain, info.bus, info.device = domain, bus, dev
        info.pciDeviceId = int(nv.get("remote_device_id", 0x22A310DE))
        info.pciSubSystemId = 0
        info.busId = f"{domain:08X}:{bus:02X}:{dev:02X}.{fn:X}".encode()
        info.busIdLegacy = f"{domain:04X}:{bus:02X}:{dev:02X}.{fn:X}".encode()

    def c_nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: Any, out: Any) -> None:
        sym = "nvmlDeviceGetNvLinkRemoteDeviceType"
        nv, i = self._link(handle, link, sym)
        kinds = nv.get("remote_types")
        kind = kinds[i] if kinds and i < len(kinds) else nv.get("remote_type", "switch")
        self._out_uint(out, sym, 3).value = _REMOTE_TYPES.get(kind, 0xFF)

    def c_nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: Any, counter: Any, out: Any) -> None:
        sym = "nvmlDeviceGetNvLinkErrorCounter"
        nv, i = self._link(handle, link, sym)
        c = in_int(counter, sym, 3)
        if not 0 <= c < len(NVLINK_COUNTERS):
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)  # ECC_DATA (4) is not counted before NVLink 5
        errors = (nv.get("errors") or {}).get(str(i)) or {}
        self._out_uint(out, sym, 4, ctypes.c_ulonglong).value = int(errors.get(NVLINK_COUNTERS[c], 0))

    def c_nvmlDeviceGetNvLinkCapability(self, handle: Any, link: Any, capability: Any, out: Any) -> None:
        sym = "nvmlDeviceGetNvLinkCapability"
        nv, _ = self._link(handle, link, sym)
        cap = in_int(capability, sym, 3)
        if not 0 <= cap < pynvml.NVML_NVLINK_CAP_COUNT:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        # P2P, system memory access, P2P atomics, valid; no system memory atomics (x86), no SLI bridge
        self._out_uint(out, sym, 4).value = int(cap in (pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED,
                                                      pynvml.NVML_NVLINK_CAP_SYSMEM_ACCESS,
                                                      pynvml.NVML_NVLINK_CAP_P2P_ATOMICS,
                                                      pynvml.NVML_NVLINK_CAP_VALID))

    # -- the NVLink fabric ----------------------------------------------------------------------------
    def _fabric(self, handle: Any, sym: str) -> dict[str, Any]:
        t = self._target(handle, sym)
        fabric = t.gpu.get("fabric")
        if not fabric:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        return fabric

    @staticmethod
    def _fill_fabric(info: Any, fabric: dict[str, Any]) -> None:
        raw = uuidlib.UUID(fabric.get("cluster_uuid") or "0" * 32).bytes
        for i, b in enumerate(raw):
            info.clusterUuid[i] = b
        info.status = int(fabric.get("status", 0))
        info.cliqueId = int(fabric.get("clique_id", 0))
        info.state = _FABRIC_STATES.get(fabric.get("state", "completed"), 0)

    def c_nvmlDeviceGetGpuFabricInfo(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetGpuFabricInfo"
        fabric = self._fabric(handle, sym)
        info = out_ref(out, pynvml.c_nvmlGpuFabricInfo_t, sym, 2)
        if info is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._fill_fabric(info, fabric)

    def c_nvmlDeviceGetGpuFabricInfoV(self, handle: Any, out: Any) -> None:
        """Versioned: v2 adds the health mask, v3 the health summary; the version field must match."""
        sym = "nvmlDeviceGetGpuFabricInfoV"
        fabric = self._fabric(handle, sym)
        info = out_ref(out, (pynvml.c_nvmlGpuFabricInfo_v2_t, pynvml.c_nvmlGpuFabricInfo_v3_t), sym, 2)
        if info is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        version = info.version
        if version not in (pynvml.nvmlGpuFabricInfo_v2, pynvml.nvmlGpuFabricInfo_v3):
            raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if version == pynvml.nvmlGpuFabricInfo_v3 and not isinstance(info, pynvml.c_nvmlGpuFabricInfo_v3_t):
            raise NvmlAbiError(f"{sym}: the struct says version 3 but is a version 2 struct: the library "
                               "would write past it")
        self._fill_fabric(info, fabric)
        info.healthMask = int(fabric.get("health_mask", _FABRIC_HEALTHY_MASK))
        if version == pynvml.nvmlGpuFabricInfo_v3:
            info.healthSummary = 1  # NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
