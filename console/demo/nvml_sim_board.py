"""Board symbols of the simulated NVML library that monitoring clients (nvitop, nvidia-smi) read: BAR1
memory, compute mode, video decoder/encoder utilization, display, driver model, fans, performance state,
power management limits, per-process utilization, confidential-computing memory, the process detail list,
the device index, CUDA compute capability, field values and MPS processes.

A board without fans answers NOT_SUPPORTED for them, as an SXM module does: the state's "not_supported"
list names "fan" for it ("display" makes the display queries NOT_SUPPORTED too; an SXM module answers
them: display disabled). The driver model is a Windows notion: NVML on Linux answers NOT_SUPPORTED. State
keys: "bar1_total_mib" (default 131072, an H100's), "compute_mode" (default 0), "cuda_capability" (default
[9, 0]), "fan_percent" (for a board with fans), "power_min_w".
"""
from __future__ import annotations

import ctypes
from typing import Any

import pynvml
from pynvml import (
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
)

from nodeconsole.console.demo.nvml_abi import NvmlAbiError, NvmlReturn, fill_array, in_int, out_array, out_ref
from nodeconsole.console.demo.nvml_sim_base import NvmlSimBase
from nodeconsole.console.demo.nvml_sim_device import load_percent
from nodeconsole.console.demo.nvml_sim_health import clock_mhz

_MIB = 1024 * 1024
_NOT_AVAILABLE_U32 = 0xFFFFFFFF
_NOT_AVAILABLE_U64 = 0xFFFFFFFFFFFFFFFF
SAMPLING_US = 167_000  # the decoder/encoder sampling period NVML reports on Hopper
# Field values this library answers (the others come back with NOT_SUPPORTED in their own nvmlReturn).
_FI_LINK_COUNT = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT
_FI_THROUGHPUT = (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                  pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX)
_FI_REPLAY = pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER
# NVML_FI_DEV_NVLINK_GET_STATE (scoped by link) and its NVML_NVLINK_STATE_INACTIVE / _ACTIVE answers: the
# library's numbers (nvidia-ml-py before 12.570 lacks the names)
_FI_LINK_STATE, _LINK_INACTIVE, _LINK_ACTIVE = 165, 0, 1


class BoardSymbols(NvmlSimBase):
    """Mixin of SimulatedNvml (uses its state, clock and handle helpers)."""

    def _out(self, out: Any, sym: str, pos: int, ctype: type = ctypes.c_uint) -> Any:
        obj = out_ref(out, ctype, sym, pos)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return obj

    # -- memory ---------------------------------------------------------------------------------------
    def c_nvmlDeviceGetBAR1MemoryInfo(self, handle: Any, out: Any) -> None:
        """BAR1 (the CPU-visible window into GPU memory): a few MiB mapped per process using the GPU; a MIG
        device answers too (nvidia-smi lists its BAR1 use)."""
        sym = "nvmlDeviceGetBAR1MemoryInfo"
        t = self._target(handle, sym, allow_mig=True)
        bar1 = self._out(out, sym, 2, pynvml.c_nvmlBAR1Memory_t)
        total = int(t.gpu.get("bar1_total_mib", 131072))
        procs = t.gpu.get("processes", [])
        if t.is_mig:  # a MIG device has its share of the window, by memory slices
            gi = self._find_gi(t.gpu, t.gi_id)
            total = total * int(gi.get("size", 1)) // 8
            procs = [p for p in procs if p.get("gi_id") == t.gi_id]
        used = min(total, 1 + 2 * len(procs))
        bar1.bar1Total, bar1.bar1Used, bar1.bar1Free = total * _MIB, used * _MIB, (total - used) * _MIB

    def c_nvmlDeviceGetConfComputeMemSizeInfo(self, handle: Any, out: Any) -> None:
        """Confidential computing is off: nothing protected, the whole memory unprotected."""
        sym = "nvmlDeviceGetConfComputeMemSizeInfo"
        t = self._target(handle, sym)
        info = self._out(out, sym, 2, pynvml.c_nvmlConfComputeMemSizeInfo_t)
        info.protectedMemSizeKib = 0
        info.unprotectedMemSizeKib = int(t.gpu.get("memory_total_mib", 0)) * 1024

    # -- modes and states -----------------------------------------------------------------------------
    def c_nvmlDeviceGetComputeMode(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetComputeMode"
        t = self._target(handle, sym)
        self._out(out, sym, 2).value = int(t.gpu.get("compute_mode", pynvml.NVML_COMPUTEMODE_DEFAULT))

    def c_nvmlDeviceGetDisplayActive(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetDisplayActive"
        self._target(handle, sym)
        self._out(out, sym, 2).value = pynvml.NVML_FEATURE_DISABLED

    def c_nvmlDeviceGetDisplayMode(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetDisplayMode"
        self._target(handle, sym)
        self._out(out, sym, 2).value = pynvml.NVML_FEATURE_DISABLED

    def c_nvmlDeviceGetDriverModel(self, handle: Any, current: Any, pending: Any) -> None:
        self._target(handle, "nvmlDeviceGetDriverModel")
        raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)  # WDDM/TCC: Windows only

    def c_nvmlDeviceGetDriverModel_v2(self, handle: Any, current: Any, pending: Any) -> None:
        self._target(handle, "nvmlDeviceGetDriverModel_v2")
        raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)

    def c_nvmlDeviceGetPerformanceState(self, handle: Any, out: Any) -> None:
        """P0: a data-center board with persistence mode stays in P0, idle or not."""
        sym = "nvmlDeviceGetPerformanceState"
        self._target(handle, sym)
        self._out(out, sym, 2).value = pynvml.NVML_PSTATE_0

    def c_nvmlDeviceGetIndex(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetIndex"
        t = self._target(handle, sym)
        self._out(out, sym, 2).value = self._enum.index(t.pos)

    def c_nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> None:
        sym = "nvmlDeviceGetCudaComputeCapability"
        t = self._target(handle, sym, allow_mig=True)
        cap = t.gpu.get("cuda_capability", [9, 0])
        self._out(major, sym, 2, ctypes.c_int).value = int(cap[0])
        self._out(minor, sym, 3, ctypes.c_int).value = int(cap[1])

    # -- fans -----------------------------------------------------------------------------------------
    def c_nvmlDeviceGetFanSpeed(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetFanSpeed"
        t = self._target(handle, sym)
        self._out(out, sym, 2).value = int(t.gpu.get("fan_percent", 30 + load_percent(t.gpu, self.clock()) // 2))

    def c_nvmlDeviceGetFanSpeed_v2(self, handle: Any, fan: Any, out: Any) -> None:
        sym = "nvmlDeviceGetFanSpeed_v2"
        t = self._target(handle, sym)
        if in_int(fan, sym, 2) != 0:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._out(out, sym, 3).value = int(t.gpu.get("fan_percent", 30 + load_percent(t.gpu, self.clock()) // 2))

    def c_nvmlDeviceGetNumFans(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetNumFans"
        self._target(handle, sym)
        self._out(out, sym, 2).value = 1

    # -- power ----------------------------------------------------------------------------------------
    def _limit_mw(self, gpu: dict[str, Any]) -> int:
        if not gpu.get("power_limit_w"):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        return int(float(gpu["power_limit_w"]) * 1000)

    def c_nvmlDeviceGetPowerManagementLimit(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetPowerManagementLimit"
        t = self._target(handle, sym)
        self._out(out, sym, 2).value = self._limit_mw(t.gpu)

    def c_nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetPowerManagementDefaultLimit"
        t = self._target(handle, sym)
        self._out(out, sym, 2).value = self._limit_mw(t.gpu)

    def c_nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any, low: Any, high: Any) -> None:
        sym = "nvmlDeviceGetPowerManagementLimitConstraints"
        t = self._target(handle, sym)
        top = self._limit_mw(t.gpu)
        self._out(low, sym, 2).value = int(float(t.gpu.get("power_min_w", 200)) * 1000)
        self._out(high, sym, 3).value = top

    # -- utilization ----------------------------------------------------------------------------------
    def _codec(self, handle: Any, util: Any, period: Any, sym: str) -> None:
        t = self._target(handle, sym)
        if (t.gpu.get("mig") or {}).get("current"):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)  # like the GPU's utilization in MIG mode
        self._out(util, sym, 2).value = 0  # nothing decodes or encodes video on these hosts
        self._out(period, sym, 3).value = SAMPLING_US

    def c_nvmlDeviceGetDecoderUtilization(self, handle: Any, util: Any, period: Any) -> None:
        self._codec(handle, util, period, "nvmlDeviceGetDecoderUtilization")

    def c_nvmlDeviceGetEncoderUtilization(self, handle: Any, util: Any, period: Any) -> None:
        self._codec(handle, util, period, "nvmlDeviceGetEncoderUtilization")

    def c_nvmlDeviceGetProcessUtilization(self, handle: Any, samples: Any, count: Any, last_seen: Any) -> int | None:
        """One sample per compute process, its share of the GPU's load by memory used; NOT_FOUND when
        nothing ran since `last_seen` (µs), NOT_SUPPORTED in MIG mode."""
        sym = "nvmlDeviceGetProcessUtilization"
        t = self._target(handle, sym)
        if (t.gpu.get("mig") or {}).get("current"):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        cnt = self._out(count, sym, 3)
        now_us = int(self.clock() * 1_000_000)
        procs = [p for p in t.gpu.get("processes", []) if "compute" in p.get("type", "compute")]
        if not procs or in_int(last_seen, sym, 4) >= now_us:
            raise NvmlReturn(NVML_ERROR_NOT_FOUND)
        arr = out_array(samples, pynvml.c_nvmlProcessUtilizationSample_t, sym, 2)
        if arr is None or cnt.value < len(procs):
            cnt.value = len(procs)
            return NVML_ERROR_INSUFFICIENT_SIZE
        busy = load_percent(t.gpu, self.clock())
        total = sum(int(p.get("used_mib", 0)) for p in procs) or 1
        values = []
        for p in procs:
            s = pynvml.c_nvmlProcessUtilizationSample_t()
            share = int(p.get("used_mib", 0)) / total
            s.pid, s.timeStamp = int(p["pid"]), now_us
            s.smUtil, s.memUtil = round(busy * share), round(busy * 0.55 * share)
            s.encUtil = s.decUtil = 0
            values.append(s)
        fill_array(arr, values, sym)
        cnt.value = len(procs)
        return None

    # -- processes ------------------------------------------------------------------------------------
    def c_nvmlDeviceGetRunningProcessDetailList(self, handle: Any, out: Any) -> int | None:
        """Compute, graphics or MPS processes (the list's `mode` 0, 1, 2) with their memory; the caller
        sets `procArray` to an array of numProcArrayEntries entries."""
        sym = "nvmlDeviceGetRunningProcessDetailList"
        t = self._target(handle, sym, allow_mig=True)
        lst = self._out(out, sym, 2, pynvml.c_nvmlProcessDetailList_v1_t)
        if lst.version != pynvml.nvmlProcessDetailList_v1:
            raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        kind = {0: "compute", 1: "graphics", 2: "mps"}.get(int(lst.mode))
        if kind is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        procs = [p for p in t.gpu.get("processes", []) if kind in p.get("type", "compute")
                 and (not t.is_mig or p.get("gi_id") == t.gi_id)]
        if not procs:
            lst.numProcArrayEntries = 0
            return None
        if lst.numProcArrayEntries < len(procs) or not lst.procArray:
            lst.numProcArrayEntries = len(procs)
            return NVML_ERROR_INSUFFICIENT_SIZE
        if not isinstance(lst.procArray, ctypes._Pointer):
            raise NvmlAbiError(f"{sym}: procArray must point to c_nvmlProcessDetail_v1_t entries")
        for i, p in enumerate(procs):
            entry = lst.procArray[i]
            used = p.get("used_mib")
            entry.pid = int(p["pid"])
            entry.usedGpuMemory = _NOT_AVAILABLE_U64 if used is None else int(used) * _MIB
            entry.gpuInstanceId = int(p.get("gi_id", _NOT_AVAILABLE_U32))
            entry.computeInstanceId = int(p.get("ci_id", _NOT_AVAILABLE_U32))
            entry.usedGpuCcProtectedMemory = 0
        lst.numProcArrayEntries = len(procs)
        return None

    def c_nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: Any, count: Any, infos: Any) -> None:
        """No MPS server runs on these hosts: no processes."""
        sym = "nvmlDeviceGetMPSComputeRunningProcesses_v3"
        self._target(handle, sym, allow_mig=True)
        self._out(count, sym, 2).value = 0

    # -- field values ---------------------------------------------------------------------------------
    def c_nvmlDeviceGetFieldValues(self, handle: Any, count: Any, values: Any) -> None:
        """NVLink link count, each link's state (scoped by link) and throughput counters, the PCIe replay
        counter; every other field answers NOT_SUPPORTED in its own nvmlReturn (the call itself succeeds,
        as the library's does), a link past the GPU's last INVALID_ARGUMENT."""
        sym = "nvmlDeviceGetFieldValues"
        t = self._target(handle, sym)
        n = in_int(count, sym, 2)
        arr = out_array(values, pynvml.c_nvmlFieldValue_t, sym, 3)
        if arr is None or n < 0:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        if n > len(arr):
            raise NvmlAbiError(f"{sym}: count {n} but the array holds {len(arr)} (the library would read past it)")
        now = self.clock()
        nv = t.gpu.get("nvlink") or {}
        links = len(nv.get("remotes", ()))
        for i in range(n):
            fv = arr[i]
            fv.timestamp, fv.latencyUsec = int(now * 1_000_000), 0
            fid = int(fv.fieldId)
            if fid == _FI_LINK_COUNT and links:
                fv.valueType, fv.nvmlReturn = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 0
                fv.value.uiVal = links
            elif fid == _FI_LINK_STATE and links:
                link = int(fv.scopeId)
                if link >= links:
                    fv.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT
                else:
                    fv.valueType, fv.nvmlReturn = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 0
                    fv.value.uiVal = _LINK_INACTIVE if link in nv.get("down", ()) else _LINK_ACTIVE
            elif fid in _FI_THROUGHPUT and links:
                # KiB moved since boot: grows with the load (SM clock as a stand-in for activity)
                fv.valueType, fv.nvmlReturn = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 0
                fv.value.ullVal = int(now) * clock_mhz(t.gpu, "sm", now) * (2 if fid in _FI_THROUGHPUT[2:] else 1)
            elif fid == _FI_REPLAY:
                fv.valueType, fv.nvmlReturn = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 0
                fv.value.uiVal = int(t.gpu.get("pcie_replay", 0))
            else:
                fv.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
