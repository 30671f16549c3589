"""MIG compute instances and MIG devices of the simulated NVML library (see nvml_sim_mig for the rules).

Compute instances live inside a GPU instance, placed in its compute slices; created without a placement
they take the lowest free one; ids are the lowest free. Every compute instance is a MIG device with its
own handle and UUID (the first one of a GPU instance carries the instance's "uuid" from the state).
"""
from __future__ import annotations

import ctypes
from typing import Any

import pynvml
from pynvml import (
    NVML_ERROR_IN_USE,
    NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
)

from nodeconsole.console.demo.nvml_abi import (
    NvmlReturn,
    handle_value,
    in_int,
    out_array,
    out_handle,
    out_ref,
    set_handle,
)
from nodeconsole.console.demo.nvml_sim_base import KIND_CI, NvmlSimBase, Target
from nodeconsole.console.demo.nvml_sim_mig import overlaps
from nodeconsole.console.mig_profiles import CiProfile, Placement


class MigComputeSymbols(NvmlSimBase):
    """Mixin of SimulatedNvml."""

    # -- compute instances ----------------------------------------------------------------------------
    def _ci_profile_info(self, gi_handle: Any, profile: Any, eng: Any, out: Any, sym: str,
                         struct: type) -> None:
        t, gi = self._gi_target(gi_handle, sym)
        enum = in_int(profile, sym, 2)
        in_int(eng, sym, 3)
        info = out_ref(out, struct, sym, 4)
        if info is None or not 0 <= enum < pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        if getattr(info, "version", pynvml.nvmlComputeInstanceProfileInfo_v2) != \
                pynvml.nvmlComputeInstanceProfileInfo_v2:
            raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        ci = next((c for c in self._ci_profiles(t.gpu, gi) if c.enum == enum), None)
        if ci is None:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        gp = self._gi_profile(t.gpu, gi["profile_id"])
        info.id, info.sliceCount, info.instanceCount = ci.enum, ci.slice_count, ci.max_instances
        info.multiprocessorCount = gp.sm_count * ci.slice_count // gp.slice_count
        info.sharedCopyEngineCount = gp.ce if gp.ce is not None else gp.slice_count
        info.sharedDecoderCount, info.sharedEncoderCount = gp.dec or 0, 0
        info.sharedJpegCount, info.sharedOfaCount = gp.jpeg or 0, gp.ofa or 0
        if hasattr(info, "name"):
            full = ci.slice_count == gp.slice_count
            info.name = f"MIG {gp.name if full else f'{ci.slice_count}c.{gp.name}'}".encode()

    def c_nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi: Any, profile: Any, eng: Any,
                                                       out: Any) -> None:
        self._ci_profile_info(gi, profile, eng, out, "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                              pynvml.c_nvmlComputeInstanceProfileInfo_t)

    def c_nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, gi: Any, profile: Any, eng: Any,
                                                        out: Any) -> None:
        self._ci_profile_info(gi, profile, eng, out, "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
                              pynvml.c_nvmlComputeInstanceProfileInfo_v2_t)

    def _ci_profile(self, t: Target, gi: dict[str, Any], profile_id: Any,
                    sym: str) -> tuple[CiProfile, list[Placement]]:
        """The CI profile and its placements inside this GI (the whole range when the table has none)."""
        pid = in_int(profile_id, sym, 2)
        ci = next((c for c in self._ci_profiles(t.gpu, gi) if c.enum == pid), None)
        if ci is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return ci, list(ci.placements) if ci.placements else [(0, ci.slice_count)]

    def _free_ci_placements(self, t: Target, gi: dict[str, Any], ci: CiProfile,
                            places: list[Placement]) -> list[Placement]:
        cis = gi.get("compute_instances", [])
        taken = [self._ci_place(t.gpu, gi, c) for c in cis]
        if sum(1 for c in cis if int(c["profile_id"]) == ci.enum) >= ci.max_instances:
            return []
        return [p for p in places if not any(overlaps(p, q) for q in taken)]

    def c_nvmlGpuInstanceGetComputeInstanceRemainingCapacity(self, gi_h: Any, profile_id: Any,
                                                             count: Any) -> None:
        sym = "nvmlGpuInstanceGetComputeInstanceRemainingCapacity"
        t, gi = self._gi_target(gi_h, sym)
        ci, places = self._ci_profile(t, gi, profile_id, sym)
        cnt = out_ref(count, ctypes.c_uint, sym, 3)
        if cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        free = self._free_ci_placements(t, gi, ci, places)
        same = sum(1 for c in gi.get("compute_instances", []) if int(c["profile_id"]) == ci.enum)
        cnt.value = min(len(free), ci.max_instances - same)

    def c_nvmlGpuInstanceGetComputeInstancePossiblePlacements(self, gi_h: Any, profile_id: Any,
                                                              placements: Any, count: Any) -> None:
        sym = "nvmlGpuInstanceGetComputeInstancePossiblePlacements"
        t, gi = self._gi_target(gi_h, sym)
        _, places = self._ci_profile(t, gi, profile_id, sym)
        cnt = out_ref(count, ctypes.c_uint, sym, 4)
        if cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._write_placements(placements, pynvml.c_nvmlComputeInstancePlacement_t, places, cnt, sym)

    def _create_ci(self, gi_h: Any, profile_id: Any, placement: Placement | None, out: Any,
                   sym: str) -> None:
        self.reload_if_changed()
        t, gi = self._gi_target(gi_h, sym)
        ci, places = self._ci_profile(t, gi, profile_id, sym)
        obj = out_handle(out, pynvml.c_nvmlComputeInstance_t, sym, 4 if placement else 3)
        if placement is not None and placement not in places:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._require_privilege()
        free = self._free_ci_placements(t, gi, ci, places)
        if placement is None:
            chosen = free[0] if free else None  # lowest free start
        else:
            chosen = placement if placement in free else None
        if chosen is None:
            raise NvmlReturn(NVML_ERROR_INSUFFICIENT_RESOURCES)
        cis = gi.setdefault("compute_instances", [])
        used = {c["ci_id"] for c in cis}
        ci_id = next(i for i in range(256) if i not in used)
        mig = t.gpu["mig"]
        seq = int(mig.get("uuid_seq", 0)) + 1
        mig["uuid_seq"] = seq
        entry: dict[str, int | str] = {"ci_id": ci_id, "profile_id": ci.enum, "start": chosen[0],
                                       "size": chosen[1]}
        if cis:  # the first CI of a GI takes the GI's MIG device uuid
            entry["uuid"] = self._derived_uuid(t.gpu, gi["gi_id"], ci_id, seq)
        cis.append(entry)
        cis.sort(key=lambda c: c["ci_id"])
        set_handle(obj, self._ci_handle(t.pos, gi["gi_id"], ci_id))
        self.save()

    def c_nvmlGpuInstanceCreateComputeInstance(self, gi_h: Any, profile_id: Any, out: Any) -> None:
        self._create_ci(gi_h, profile_id, None, out, "nvmlGpuInstanceCreateComputeInstance")

    def c_nvmlGpuInstanceCreateComputeInstanceWithPlacement(self, gi_h: Any, profile_id: Any, placement: Any,
                                                            out: Any) -> None:
        sym = "nvmlGpuInstanceCreateComputeInstanceWithPlacement"
        place = out_ref(placement, pynvml.c_nvmlComputeInstancePlacement_t, sym, 3)
        if place is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._create_ci(gi_h, profile_id, (int(place.start), int(place.size)), out, sym)

    def c_nvmlGpuInstanceGetComputeInstances(self, gi_h: Any, profile_id: Any, instances: Any,
                                             count: Any) -> None:
        sym = "nvmlGpuInstanceGetComputeInstances"
        t, gi = self._gi_target(gi_h, sym)
        ci, _ = self._ci_profile(t, gi, profile_id, sym)
        arr = out_array(instances, pynvml.c_nvmlComputeInstance_t, sym, 3)
        cnt = out_ref(count, ctypes.c_uint, sym, 4)
        if arr is None or cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        ids = [c["ci_id"] for c in gi.get("compute_instances", []) if int(c["profile_id"]) == ci.enum]
        self._fill_handles(arr, [self._ci_handle(t.pos, gi["gi_id"], i) for i in ids], sym)
        cnt.value = len(ids)

    def c_nvmlGpuInstanceGetComputeInstanceById(self, gi_h: Any, ci_id: Any, out: Any) -> None:
        sym = "nvmlGpuInstanceGetComputeInstanceById"
        t, gi = self._gi_target(gi_h, sym)
        want = in_int(ci_id, sym, 2)
        obj = out_handle(out, pynvml.c_nvmlComputeInstance_t, sym, 3)
        if not any(c["ci_id"] == want for c in gi.get("compute_instances", [])):
            raise NvmlReturn(NVML_ERROR_NOT_FOUND)
        set_handle(obj, self._ci_handle(t.pos, gi["gi_id"], want))

    def _ci_target(self, handle: Any, sym: str) -> tuple[Target, dict[str, Any], dict[str, Any]]:
        value = handle_value(handle, sym, 1)
        if value is None or value >> 24 != KIND_CI:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        gi_value = ctypes.cast(ctypes.c_void_p(self._gi_handle((value >> 16) & 0xFF, (value >> 8) & 0xFF)),
                               pynvml.c_nvmlGpuInstance_t)
        t, gi = self._gi_target(gi_value, sym)
        ci = next((c for c in gi.get("compute_instances", []) if c["ci_id"] == value & 0xFF), None)
        if ci is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return t, gi, ci

    def c_nvmlComputeInstanceGetInfo_v2(self, ci_h: Any, out: Any) -> None:
        sym = "nvmlComputeInstanceGetInfo_v2"
        t, gi, ci = self._ci_target(ci_h, sym)
        info = out_ref(out, pynvml.c_nvmlComputeInstanceInfo_t, sym, 2)
        if info is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        info.device = self._as_device(self._device_handle(t.pos))
        info.gpuInstance = ctypes.cast(ctypes.c_void_p(self._gi_handle(t.pos, gi["gi_id"])),
                                       pynvml.c_nvmlGpuInstance_t)
        info.id, info.profileId = ci["ci_id"], int(ci["profile_id"])
        info.placement.start, info.placement.size = self._ci_place(t.gpu, gi, ci)

    def c_nvmlComputeInstanceDestroy(self, ci_h: Any) -> None:
        sym = "nvmlComputeInstanceDestroy"
        self.reload_if_changed()
        t, gi, ci = self._ci_target(ci_h, sym)
        self._require_privilege()
        if any(p.get("gi_id") == gi["gi_id"] and p.get("ci_id", ci["ci_id"]) == ci["ci_id"]
               for p in t.gpu.get("processes", [])):
            raise NvmlReturn(NVML_ERROR_IN_USE)
        gi["compute_instances"].remove(ci)
        self.save()

    # -- MIG devices ----------------------------------------------------------------------------------
    def c_nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, count: Any) -> None:
        sym = "nvmlDeviceGetMaxMigDeviceCount"
        t = self._target(handle, sym)
        cnt = out_ref(count, ctypes.c_uint, sym, 2)
        if cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        try:
            _, table = self._mig_enabled(t.gpu)
        except NvmlReturn:
            cnt.value = 0  # "zero if MIG is not supported or enabled"
            return
        cnt.value = table.compute_slices

    def c_nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, out: Any) -> None:
        sym = "nvmlDeviceGetMigDeviceHandleByIndex"
        t = self._target(handle, sym)
        _, table = self._mig_state(t.gpu)
        i = in_int(index, sym, 2)
        obj = out_handle(out, pynvml.c_nvmlDevice_t, sym, 3)
        devices = self._mig_devices(t.gpu)
        if not (t.gpu["mig"].get("current") and 0 <= i < table.compute_slices):
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        if i >= len(devices):
            raise NvmlReturn(NVML_ERROR_NOT_FOUND)
        set_handle(obj, self._mig_handle(t.pos, devices[i][0], devices[i][1]))

    def c_nvmlDeviceIsMigDeviceHandle(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceIsMigDeviceHandle"
        t = self._target(handle, sym, allow_mig=True)
        obj = out_ref(out, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        obj.value = int(t.is_mig)

    def _mig_id(self, handle: Any, out: Any, sym: str, which: str) -> None:
        t = self._target(handle, sym, allow_mig=True)
        obj = out_ref(out, ctypes.c_uint, sym, 2)
        if obj is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        if not t.is_mig:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        obj.value = t.gi_id if which == "gi" else t.ci_id

    def c_nvmlDeviceGetGpuInstanceId(self, handle: Any, out: Any) -> None:
        self._mig_id(handle, out, "nvmlDeviceGetGpuInstanceId", "gi")

    def c_nvmlDeviceGetComputeInstanceId(self, handle: Any, out: Any) -> None:
        self._mig_id(handle, out, "nvmlDeviceGetComputeInstanceId", "ci")

    def c_nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any, out: Any) -> None:
        sym = "nvmlDeviceGetDeviceHandleFromMigDeviceHandle"
        t = self._target(handle, sym, allow_mig=True)
        obj = out_handle(out, pynvml.c_nvmlDevice_t, sym, 2)
        if not t.is_mig:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        set_handle(obj, self._device_handle(t.pos))
