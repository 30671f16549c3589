"""vGPU symbols of the simulated NVML library (host side: types a GPU offers, the instances running on
it). A GPU without a "vgpu" entry runs the plain driver: its vGPU calls answer NOT_SUPPORTED.

Creatable types follow the classic vGPU rule that one physical GPU runs instances of a single type: with
instances active only their type is creatable, and only while below its maximum ("creatable_type_ids"
in the state overrides this). The VM id is the VM's UUID (type NVML_VGPU_VM_ID_UUID) when the state
gives "vm_uuid", else "vm_id" as a domain id.
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

from nodeconsole.console.demo.nvml_abi import NvmlReturn, fill_array, in_int, out_array, out_ref, write_str
from nodeconsole.console.demo.nvml_sim_base import NvmlSimBase, Target

_INVALID_ID = 0xFFFFFFFF
_CLASSES = {"C": "Compute", "Q": "Quadro", "B": "NVS", "A": "GRID"}


class VgpuSymbols(NvmlSimBase):
    """Mixin of SimulatedNvml."""

    def _vgpu(self, handle: Any, sym: str) -> tuple[Target, dict[str, Any]]:
        t = self._target(handle, sym)
        vgpu = t.gpu.get("vgpu")
        if vgpu is None or "vgpu" in t.gpu.get("not_supported", ()):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        return t, vgpu

    def _vgpu_type(self, type_id: Any, sym: str, pos: int = 1) -> dict[str, Any]:
        spec = self.state.get("vgpu_types", {}).get(str(in_int(type_id, sym, pos)))
        if spec is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return spec

    def creatable_type_ids(self, gpu: dict[str, Any]) -> list[int]:
        """Type ids that can still be created on `gpu` (see module docstring)."""
        vgpu = gpu.get("vgpu") or {}
        if "creatable_type_ids" in vgpu:
            return [int(x) for x in vgpu["creatable_type_ids"]]
        active = vgpu.get("active", [])
        types = self.state.get("vgpu_types", {})
        out = []
        for tid in vgpu.get("supported_type_ids", []):
            tid = int(tid)
            if active and any(int(a["type_id"]) != tid for a in active):
                continue
            running = sum(1 for a in active if int(a["type_id"]) == tid)
            if running < int(types.get(str(tid), {}).get("max_instances", 0)):
                out.append(tid)
        return out

    def _id_list(self, count: Any, ids: Any, values: list[int], sym: str) -> int | None:
        """The two-call pattern: NULL array or a short count → INSUFFICIENT_SIZE with the count needed."""
        cnt = out_ref(count, ctypes.c_uint, sym, 2)
        if cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        arr = out_array(ids, ctypes.c_uint, sym, 3)
        if arr is None or cnt.value < len(values):
            cnt.value = len(values)
            return NVML_ERROR_INSUFFICIENT_SIZE if values else None
        fill_array(arr, values, sym)
        cnt.value = len(values)
        return None

    def c_nvmlDeviceGetSupportedVgpus(self, handle: Any, count: Any, ids: Any) -> int | None:
        sym = "nvmlDeviceGetSupportedVgpus"
        _, vgpu = self._vgpu(handle, sym)
        return self._id_list(count, ids, [int(x) for x in vgpu.get("supported_type_ids", [])], sym)

    def c_nvmlDeviceGetCreatableVgpus(self, handle: Any, count: Any, ids: Any) -> int | None:
        sym = "nvmlDeviceGetCreatableVgpus"
        t, _ = self._vgpu(handle, sym)
        return self._id_list(count, ids, self.creatable_type_ids(t.gpu), sym)

    def c_nvmlDeviceGetActiveVgpus(self, handle: Any, count: Any, ids: Any) -> int | None:
        sym = "nvmlDeviceGetActiveVgpus"
        _, vgpu = self._vgpu(handle, sym)
        return self._id_list(count, ids, [int(a["instance_id"]) for a in vgpu.get("active", [])], sym)

    # -- types ----------------------------------------------------------------------------------------
    def c_nvmlVgpuTypeGetName(self, type_id: Any, buf: Any, size: Any) -> None:
        sym = "nvmlVgpuTypeGetName"
        spec = self._vgpu_type(type_id, sym)
        n = out_ref(size, ctypes.c_uint, sym, 3)
        if n is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        name = spec.get("name", "")
        if n.value < len(name) + 1:
            n.value = len(name) + 1
            raise NvmlReturn(NVML_ERROR_INSUFFICIENT_SIZE)
        write_str(buf, name, n.value, sym)
        n.value = len(name) + 1

    def c_nvmlVgpuTypeGetClass(self, type_id: Any, buf: Any, size: Any) -> None:
        sym = "nvmlVgpuTypeGetClass"
        spec = self._vgpu_type(type_id, sym)
        n = out_ref(size, ctypes.c_uint, sym, 3)
        if n is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        cls = spec.get("class") or _CLASSES.get(spec.get("name", "")[-1:], "Compute")
        write_str(buf, cls, n.value, sym)

    def c_nvmlVgpuTypeGetFramebufferSize(self, type_id: Any, out: Any) -> None:
        sym = "nvmlVgpuTypeGetFramebufferSize"
        spec = self._vgpu_type(type_id, sym)
        obj = out_ref(out, ctypes.c_ulonglong, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = int(spec.get("framebuffer_mib", 0)) * 1024 * 1024

    def c_nvmlVgpuTypeGetMaxInstances(self, handle: Any, type_id: Any, out: Any) -> None:
        sym = "nvmlVgpuTypeGetMaxInstances"
        _, vgpu = self._vgpu(handle, sym)
        spec = self._vgpu_type(type_id, sym, 2)
        obj = out_ref(out, ctypes.c_uint, sym, 3)
        if obj is None or in_int(type_id, sym, 2) not in [int(x) for x in vgpu.get("supported_type_ids", [])]:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = int(spec.get("max_instances", 0))

    def c_nvmlVgpuTypeGetGpuInstanceProfileId(self, type_id: Any, out: Any) -> None:
        sym = "nvmlVgpuTypeGetGpuInstanceProfileId"
        spec = self._vgpu_type(type_id, sym)
        obj = out_ref(out, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = int(spec.get("gi_profile_id", _INVALID_ID))

    # -- instances ------------------------------------------------------------------------------------
    def _vgpu_instance(self, instance: Any, sym: str) -> tuple[dict[str, Any], dict[str, Any]]:
        want = in_int(instance, sym, 1)
        if want == 0:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        for pos in self._enum:
            gpu = self.state["gpus"][pos]
            for inst in (gpu.get("vgpu") or {}).get("active", []):
                if int(inst["instance_id"]) == want:
                    self._check_alive(gpu, sym)
                    return gpu, inst
        raise NvmlReturn(NVML_ERROR_NOT_FOUND)

    def c_nvmlVgpuInstanceGetVmID(self, instance: Any, buf: Any, size: Any, id_type: Any) -> None:
        sym = "nvmlVgpuInstanceGetVmID"
        _, inst = self._vgpu_instance(instance, sym)
        kind = out_ref(id_type, ctypes.c_uint, sym, 4)
        if kind is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        if inst.get("vm_uuid"):
            text, kind.value = inst["vm_uuid"], pynvml.NVML_VGPU_VM_ID_UUID
        else:
            text, kind.value = str(inst.get("vm_id", "")), pynvml.NVML_VGPU_VM_ID_DOMAIN_ID
        write_str(buf, text, in_int(size, sym, 3), sym)

    def c_nvmlVgpuInstanceGetUUID(self, instance: Any, buf: Any, size: Any) -> None:
        sym = "nvmlVgpuInstanceGetUUID"
        _, inst = self._vgpu_instance(instance, sym)
        write_str(buf, inst.get("uuid", ""), in_int(size, sym, 3), sym)

    def c_nvmlVgpuInstanceGetMdevUUID(self, instance: Any, buf: Any, size: Any) -> None:
        sym = "nvmlVgpuInstanceGetMdevUUID"
        _, inst = self._vgpu_instance(instance, sym)
        write_str(buf, inst.get("mdev_uuid") or "", in_int(size, sym, 3), sym)

    def c_nvmlVgpuInstanceGetType(self, instance: Any, out: Any) -> None:
        sym = "nvmlVgpuInstanceGetType"
        _, inst = self._vgpu_instance(instance, sym)
        obj = out_ref(out, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = int(inst["type_id"])

    def c_nvmlVgpuInstanceGetFbUsage(self, instance: Any, out: Any) -> None:
        sym = "nvmlVgpuInstanceGetFbUsage"
        _, inst = self._vgpu_instance(instance, sym)
        # the C API writes an unsigned long long; pynvml passes a c_uint, which truncates
        obj = out_ref(out, ctypes.c_ulonglong, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = int(inst.get("fb_used_mib", 0)) * 1024 * 1024

    def c_nvmlVgpuInstanceGetGpuInstanceId(self, instance: Any, out: Any) -> None:
        sym = "nvmlVgpuInstanceGetGpuInstanceId"
        _, inst = self._vgpu_instance(instance, sym)
        obj = out_ref(out, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        gi = inst.get("gi_id")
        obj.value = _INVALID_ID if gi is None else int(gi)
