"""Device symbols of the simulated NVML library: handles, identity, PCI, memory, utilization, thermals,
power, ECC, retired pages / remapped rows, PCIe link, running processes. Values that move (utilization,
memory used, temperature, power) are pure functions of the GPU's "load" spec and the library's clock, so
a given clock value always reads the same numbers. A GPU's "captured" values (a capture of a real host's
NVML) replace them: those are the numbers the driver answered when the capture was taken."""
from __future__ import annotations

import ctypes
import math
import zlib
from typing import Any

import pynvml
from pynvml import (
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
)

from nodeconsole.console.demo.nvml_abi import (
    NvmlReturn,
    fill_array,
    in_int,
    in_str,
    out_array,
    out_handle,
    out_ref,
    set_handle,
    write_str,
)
from nodeconsole.console.demo.nvml_sim_base import NvmlSimBase
from nodeconsole.console.mig_profiles import table_for_model
from nodeconsole.console.pciaddr import parse_pci_address

_NOT_AVAILABLE_U32 = 0xFFFFFFFF
_MIB = 1024 * 1024


_PHASES: dict[str, float] = {}  # a GPU's address → its load's phase


def load_percent(gpu: dict[str, Any], t: float) -> float:
    """GPU busy percent at time `t`: base + amplitude·sin, phase-shifted per GPU so GPUs differ."""
    spec = gpu.get("load") or {}
    if not spec:
        return 0.0
    period = float(spec.get("period_s", 60)) or 60.0
    address = gpu["address"]
    phase = _PHASES.get(address)
    if phase is None:
        phase = _PHASES[address] = zlib.crc32(address.encode()) / 2**32 * 2 * math.pi
    value = float(spec.get("base", 0)) + float(spec.get("amplitude", 0)) * math.sin(
        2 * math.pi * t / period + phase)
    return min(100.0, max(0.0, value))


def vgpu_framebuffer_mib(state: dict[str, Any], gpu: dict[str, Any]) -> int:
    types = state.get("vgpu_types", {})
    return sum(int(types.get(str(v["type_id"]), {}).get("framebuffer_mib", 0))
               for v in (gpu.get("vgpu") or {}).get("active", []))


def memory_used_mib(state: dict[str, Any], gpu: dict[str, Any], t: float) -> int:
    """Processes + vGPU framebuffers + a load-driven share ("load.memory_mib", default 10% of total)."""
    total = int(gpu.get("memory_total_mib", 0))
    captured = (gpu.get("captured") or {}).get("memory_used_mib")
    if captured is not None:
        return min(total, int(captured))
    used = sum(int(p.get("used_mib", 0)) for p in gpu.get("processes", []))
    used += vgpu_framebuffer_mib(state, gpu)
    spec = gpu.get("load") or {}
    if spec:
        used += round(float(spec.get("memory_mib", total * 0.1)) * load_percent(gpu, t) / 100)
    return min(total, used)


def split_address(address: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) of a PCI address."""
    canon = parse_pci_address(address)
    dom, bus, devfn = canon.rsplit(":", 2)
    dev, fn = devfn.split(".")
    return int(dom, 16), int(bus, 16), int(dev, 16), int(fn)


def pci_device_id(gpu: dict[str, Any]) -> int:
    raw = gpu.get("pci_device_id")
    if raw is not None:
        return int(raw, 16) if isinstance(raw, str) else int(raw)
    table = table_for_model(gpu.get("model", ""))
    return table.pci_device_id if table else 0


class DeviceSymbols(NvmlSimBase):
    """Mixin of SimulatedNvml (uses its state, clock, _enum and handle helpers)."""

    # -- handles --------------------------------------------------------------------------------------
    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> None:
        sym = "nvmlDeviceGetHandleByIndex_v2"
        i = in_int(index, sym, 1)
        obj = out_handle(out, pynvml.c_nvmlDevice_t, sym, 2)
        if not 0 <= i < len(self._enum):
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        pos = self._enum[i]
        self._check_alive(self.state["gpus"][pos], sym)
        set_handle(obj, self._device_handle(pos))

    def c_nvmlDeviceGetHandleByPciBusId_v2(self, bus_id: Any, out: Any) -> None:
        sym = "nvmlDeviceGetHandleByPciBusId_v2"
        text = in_str(bus_id, sym, 1)
        obj = out_handle(out, pynvml.c_nvmlDevice_t, sym, 2)
        try:
            want = parse_pci_address(text or "")
        except ValueError:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT) from None
        for pos in self._enum:
            gpu = self.state["gpus"][pos]
            if parse_pci_address(gpu["address"]) == want:
                self._check_alive(gpu, sym)
                set_handle(obj, self._device_handle(pos))
                return
        raise NvmlReturn(NVML_ERROR_NOT_FOUND)

    def c_nvmlDeviceGetHandleByUUID(self, uuid: Any, out: Any) -> None:
        sym = "nvmlDeviceGetHandleByUUID"
        text = in_str(uuid, sym, 1)
        obj = out_handle(out, pynvml.c_nvmlDevice_t, sym, 2)
        if not text:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        for pos in self._enum:
            gpu = self.state["gpus"][pos]
            if gpu.get("uuid") == text:
                self._check_alive(gpu, sym)
                set_handle(obj, self._device_handle(pos))
                return
            for gi_id, ci_id, mig_uuid in self._mig_devices(gpu):
                if mig_uuid == text:
                    self._check_alive(gpu, sym)
                    set_handle(obj, self._mig_handle(pos, gi_id, ci_id))
                    return
        raise NvmlReturn(NVML_ERROR_NOT_FOUND)

    # -- identity -------------------------------------------------------------------------------------
    def c_nvmlDeviceGetName(self, handle: Any, buf: Any, length: Any) -> None:
        sym = "nvmlDeviceGetName"
        t = self._target(handle, sym, allow_mig=True)
        name = t.gpu.get("name", "NVIDIA GPU")
        if t.is_mig:
            name = f"{name} MIG {self._mig_device_profile_name(t.gpu, t.gi_id, t.ci_id)}"
        write_str(buf, name, in_int(length, sym, 3), sym)

    def c_nvmlDeviceGetUUID(self, handle: Any, buf: Any, length: Any) -> None:
        sym = "nvmlDeviceGetUUID"
        t = self._target(handle, sym, allow_mig=True)
        if t.gi_id is None or t.ci_id is None:  # the physical GPU
            text = t.gpu.get("uuid", "")
        else:
            text = dict(((g, c), u) for g, c, u in self._mig_devices(t.gpu))[(t.gi_id, t.ci_id)]
        write_str(buf, text, in_int(length, sym, 3), sym)

    def c_nvmlDeviceGetSerial(self, handle: Any, buf: Any, length: Any) -> None:
        sym = "nvmlDeviceGetSerial"
        t = self._target(handle, sym)
        if not t.gpu.get("serial"):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        write_str(buf, str(t.gpu["serial"]), in_int(length, sym, 3), sym)

    def c_nvmlDeviceGetPciInfo_v3(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetPciInfo_v3"
        t = self._target(handle, sym)
        info = out_ref(out, pynvml.nvmlPciInfo_t, sym, 2)
        if info is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        domain, bus, dev, fn = split_address(t.gpu["address"])
        info.domain, info.bus, info.device = domain, bus, dev
        info.pciDeviceId = pci_device_id(t.gpu)
        info.pciSubSystemId = int(str(t.gpu.get("pci_subsystem_id", 0)), 0)
        # NVML spells the bus id in upper-case hex with an 8-digit domain; the legacy field keeps 4
        info.busId = f"{domain:08X}:{bus:02X}:{dev:02X}.{fn:X}".encode()
        info.busIdLegacy = f"{domain:04X}:{bus:02X}:{dev:02X}.{fn:X}".encode()

    # -- memory and load ------------------------------------------------------------------------------
    def _memory(self, handle: Any, sym: str) -> tuple[int, int, int]:
        """(total, reserved, used) in MiB for a GPU or a MIG device."""
        t = self._target(handle, sym, allow_mig=True)
        if t.is_mig:
            gi = self._find_gi(t.gpu, t.gi_id)
            total = self._gi_profile(t.gpu, gi["profile_id"]).memory_mib
            used = sum(int(p.get("used_mib", 0)) for p in t.gpu.get("processes", [])
                       if p.get("gi_id") == t.gi_id)
            return total, 0, min(total, used)
        return (int(t.gpu.get("memory_total_mib", 0)), int(t.gpu.get("memory_reserved_mib", 0)),
                memory_used_mib(self.state, t.gpu, self.clock()))

    def c_nvmlDeviceGetMemoryInfo(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetMemoryInfo"
        total, reserved, used = self._memory(handle, sym)
        mem = out_ref(out, pynvml.c_nvmlMemory_t, sym, 2)
        if mem is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        # v1 folds the driver's reservation into "used"
        mem.total, mem.used = total * _MIB, (used + reserved) * _MIB
        mem.free = max(0, total - used - reserved) * _MIB

    def c_nvmlDeviceGetMemoryInfo_v2(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetMemoryInfo_v2"
        total, reserved, used = self._memory(handle, sym)
        mem = out_ref(out, pynvml.c_nvmlMemory_v2_t, sym, 2)
        if mem is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        if mem.version != pynvml.nvmlMemory_v2:
            raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        mem.total, mem.reserved, mem.used = total * _MIB, reserved * _MIB, used * _MIB
        mem.free = max(0, total - used - reserved) * _MIB

    def c_nvmlDeviceGetUtilizationRates(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetUtilizationRates"
        t = self._target(handle, sym)
        if (t.gpu.get("mig") or {}).get("current"):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)  # NVML has no utilization in MIG mode
        util = out_ref(out, pynvml.c_nvmlUtilization_t, sym, 2)
        if util is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        captured = t.gpu.get("captured") or {}
        if "utilization_gpu" in captured:
            util.gpu, util.memory = int(captured["utilization_gpu"]), int(captured.get("utilization_memory", 0))
            return
        busy = load_percent(t.gpu, self.clock())
        util.gpu, util.memory = round(busy), round(busy * 0.55)

    def _temperature(self, gpu: dict[str, Any], sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        captured = (gpu.get("captured") or {}).get("temperature_c")
        if captured is not None:
            return int(captured)
        return int(gpu.get("temperature_idle_c", 32)) + round(load_percent(gpu, self.clock()) * 0.45)

    def c_nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, out: Any) -> None:
        sym = "nvmlDeviceGetTemperature"
        t = self._target(handle, sym)
        obj = out_ref(out, ctypes.c_uint, sym, 3)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = self._temperature(t.gpu, in_int(sensor, sym, 2))

    def c_nvmlDeviceGetTemperatureV(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetTemperatureV"
        t = self._target(handle, sym)
        obj = out_ref(out, pynvml.c_nvmlTemperature_v1_t, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        if obj.version != pynvml.nvmlTemperature_v1:
            raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        obj.temperature = self._temperature(t.gpu, obj.sensorType)

    def _power_limit_mw(self, gpu: dict[str, Any]) -> int:
        if not gpu.get("power_limit_w"):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        return int(float(gpu["power_limit_w"]) * 1000)

    def c_nvmlDeviceGetPowerUsage(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetPowerUsage"
        t = self._target(handle, sym)
        obj = out_ref(out, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        captured = (t.gpu.get("captured") or {}).get("power_mw")
        if captured is not None:
            obj.value = int(captured)
            return
        limit = self._power_limit_mw(t.gpu)
        obj.value = round(limit * (0.1 + 0.75 * load_percent(t.gpu, self.clock()) / 100))

    def c_nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetEnforcedPowerLimit"
        t = self._target(handle, sym)
        obj = out_ref(out, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = self._power_limit_mw(t.gpu)

    # -- memory errors --------------------------------------------------------------------------------
    def c_nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter: Any, out: Any) -> None:
        sym = "nvmlDeviceGetTotalEccErrors"
        t = self._target(handle, sym)
        kind = {0: "corrected", 1: "uncorrected"}.get(in_int(error_type, sym, 2))
        scope = {0: "volatile", 1: "aggregate"}.get(in_int(counter, sym, 3))
        obj = out_ref(out, ctypes.c_ulonglong, sym, 4)
        if kind is None or scope is None or obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = int((t.gpu.get("ecc") or {}).get(f"{scope}_{kind}", 0))

    def c_nvmlDeviceGetRetiredPages(self, handle: Any, cause: Any, count: Any, addresses: Any) -> int | None:
        sym = "nvmlDeviceGetRetiredPages"
        t = self._target(handle, sym)
        c = in_int(cause, sym, 2)
        cnt = out_ref(count, ctypes.c_uint, sym, 3)
        if c not in (0, 1) or cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        raw = t.gpu.get("retired_pages", 0)
        # an int counts double-bit-error pages; a dict splits the two causes
        n = int(raw.get("single_bit" if c == 0 else "double_bit", 0)) if isinstance(raw, dict) else (
            int(raw) if c == 1 else 0)
        arr = out_array(addresses, ctypes.c_ulonglong, sym, 4)
        if arr is None or cnt.value < n:
            cnt.value = n
            return NVML_ERROR_INSUFFICIENT_SIZE if n else None
        fill_array(arr, [0x7F0000 + 0x1000 * i + 0x100 * c for i in range(n)], sym)
        cnt.value = n
        return None

    def c_nvmlDeviceGetRemappedRows(self, handle: Any, corr: Any, unc: Any, pending: Any,
                                    failure: Any) -> None:
        sym = "nvmlDeviceGetRemappedRows"
        t = self._target(handle, sym)
        rows = t.gpu.get("remapped_rows") or {}
        outs = [out_ref(a, ctypes.c_uint, sym, i + 2) for i, a in enumerate((corr, unc, pending, failure))]
        if any(o is None for o in outs):
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        for o, key in zip(outs, ("correctable", "uncorrectable", "pending", "failure")):
            o.value = int(rows.get(key, 0))

    # -- PCIe link ------------------------------------------------------------------------------------
    def _pcie(self, handle: Any, out: Any, sym: str, key: str) -> None:
        t = self._target(handle, sym)
        obj = out_ref(out, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        pcie = t.gpu.get("pcie") or {}
        if key not in pcie:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        obj.value = int(pcie[key])

    def c_nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any, out: Any) -> None:
        self._pcie(handle, out, "nvmlDeviceGetCurrPcieLinkGeneration", "gen")

    def c_nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any, out: Any) -> None:
        self._pcie(handle, out, "nvmlDeviceGetCurrPcieLinkWidth", "width")

    def c_nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any, out: Any) -> None:
        self._pcie(handle, out, "nvmlDeviceGetMaxPcieLinkGeneration", "max_gen")

    def c_nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any, out: Any) -> None:
        self._pcie(handle, out, "nvmlDeviceGetMaxPcieLinkWidth", "max_width")

    # -- processes ------------------------------------------------------------------------------------
    def _processes(self, handle: Any, count: Any, infos: Any, sym: str, kind: str) -> int | None:
        t = self._target(handle, sym, allow_mig=True)
        cnt = out_ref(count, ctypes.c_uint, sym, 2)
        if cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        procs = [p for p in t.gpu.get("processes", []) if kind in p.get("type", "compute")
                 and (not t.is_mig or (p.get("gi_id") == t.gi_id and p.get("ci_id", t.ci_id) == t.ci_id))]
        arr = out_array(infos, pynvml.c_nvmlProcessInfo_v3_t, sym, 3)
        if arr is None or cnt.value < len(procs):
            cnt.value = len(procs)
            return NVML_ERROR_INSUFFICIENT_SIZE if procs else None
        values = []
        for p in procs:
            info = pynvml.c_nvmlProcessInfo_v3_t()
            info.pid = int(p["pid"])
            used = p.get("used_mib")
            info.usedGpuMemory = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None \
                else int(used) * _MIB
            info.gpuInstanceId = int(p.get("gi_id", _NOT_AVAILABLE_U32))
            info.computeInstanceId = int(p.get("ci_id", _NOT_AVAILABLE_U32))
            values.append(info)
        fill_array(arr, values, sym)
        cnt.value = len(procs)
        return None

    def c_nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, count: Any, infos: Any) -> int | None:
        return self._processes(handle, count, infos, "nvmlDeviceGetComputeRunningProcesses_v3", "compute")

    def c_nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any, count: Any, infos: Any) -> int | None:
        return self._processes(handle, count, infos, "nvmlDeviceGetGraphicsRunningProcesses_v3", "graphics")

    def c_nvmlSystemGetProcessName(self, pid: Any, buf: Any, length: Any) -> None:
        sym = "nvmlSystemGetProcessName"
        want = in_int(pid, sym, 1)
        for pos in self._enum:
            for p in self.state["gpus"][pos].get("processes", []):
                if int(p["pid"]) == want:
                    write_str(buf, p.get("name", ""), in_int(length, sym, 3), sym)
                    return
        raise NvmlReturn(NVML_ERROR_NOT_FOUND)
