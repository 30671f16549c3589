"""System symbols of the simulated NVML library: driver, NVML and CUDA versions, and the device count."""
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
