"""System symbols of the simulated NVML library: driver, NVML and CUDA versions, the device count, and the
driver's persistence mode per GPU (nvml.json `persistence_mode`)."""
from __future__ import annotations

import ctypes
from typing import Any

from pynvml import NVML_ERROR_INVALID_ARGUMENT

from nodeconsole.console.demo.nvml_abi import NvmlReturn, in_int, out_ref, write_str
from nodeconsole.console.demo.nvml_sim_base import NvmlSimBase


class SystemSymbols(NvmlSimBase):
    """Mixin of SimulatedNvml (uses its state and _enum)."""

    def _system_string(self, buf: Any, length: Any, text: str, symbol: str) -> None:
        write_str(buf, text, in_int(length, symbol, 2), symbol)

    def c_nvmlSystemGetDriverVersion(self, buf: Any, length: Any) -> None:
        self._system_string(buf, length, self.state.get("driver_version", "550.90.07"),
                            "nvmlSystemGetDriverVersion")

    def c_nvmlSystemGetNVMLVersion(self, buf: Any, length: Any) -> None:
        cuda = int(self.state.get("cuda_driver_version", 12040))
        text = f"{cuda // 1000}.{self.state.get('driver_version', '550.90.07')}"
        self._system_string(buf, length, text, "nvmlSystemGetNVMLVersion")

    def c_nvmlSystemGetCudaDriverVersion(self, out: Any) -> None:
        obj = out_ref(out, ctypes.c_int, "nvmlSystemGetCudaDriverVersion", 1)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = int(self.state.get("cuda_driver_version", 12040))

    def c_nvmlSystemGetCudaDriverVersion_v2(self, out: Any) -> None:
        self.c_nvmlSystemGetCudaDriverVersion(out)

    def c_nvmlDeviceGetCount_v2(self, out: Any) -> None:
        obj = out_ref(out, ctypes.c_uint, "nvmlDeviceGetCount_v2", 1)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = len(self._enum)

    def c_nvmlDeviceGetPersistenceMode(self, handle: Any, mode: Any) -> None:
        sym = "nvmlDeviceGetPersistenceMode"
        t = self._target(handle, sym)
        obj = out_ref(mode, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = 1 if t.gpu.get("persistence_mode") else 0

    def c_nvmlDeviceSetPersistenceMode(self, handle: Any, mode: Any) -> None:
        """Root only (NO_PERMISSION otherwise), 0 or 1; kept in the state file like other changes."""
        sym = "nvmlDeviceSetPersistenceMode"
        self.reload_if_changed()  # another process may have changed the state: write over the latest
        t = self._target(handle, sym)
        want = in_int(mode, sym, 2)
        if want not in (0, 1):
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._require_privilege()
        t.gpu["persistence_mode"] = want
        self.save()
