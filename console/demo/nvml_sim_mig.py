"""MIG symbols of the simulated NVML library.

Rules kept from the driver (REFERENCE.md §3): profile info by NVML enum, everything else by profile id;
placements in memory slices; a GPU instance created without a placement goes to the first free placement
in the driver's order, highest start first — so creating 1g, 1g, 2g and then 3g fails with
INSUFFICIENT_RESOURCES while the same layout with explicit placements fits. GPU instance ids follow the
placement (the slice tree: 0 = whole GPU, 1-2 halves, 3-6 quarters, 7-14 eighths on 8-slice GPUs);
compute instance ids are the lowest free. Changes need privilege (NO_PERMISSION otherwise) and are
written back to the state file.

MIG mode: SetMigMode returns SUCCESS and reports the activation in `activationStatus`: IN_USE while the
GPU runs processes or vGPUs (or still has instances when disabling), RESET_REQUIRED when the GPU needs a
reset to apply it (Hopper by default; "mig.reset_required" overrides) — the pending mode then becomes
current at `reset_gpu()`.
"""
from __future__ import annotations

import ctypes
import uuid as uuidlib
from collections.abc import Sequence
from typing import Any

import pynvml
from pynvml import (
    NVML_ERROR_IN_USE,
    NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_RESET_REQUIRED,
    NVML_SUCCESS,
)

from nodeconsole.console.demo.nvml_abi import (
    NvmlAbiError,
    NvmlReturn,
    handle_value,
    in_int,
    out_array,
    out_handle,
    out_ref,
    set_handle,
)
from nodeconsole.console.demo.nvml_sim_base import KIND_GI, NvmlSimBase, Target
from nodeconsole.console.mig_profiles import (
    CI_PROFILE_SLICES,
    CiProfile,
    GiProfile,
    GpuMigTable,
    Placement,
    ci_profiles_for,
    table_for_model,
    table_for_pci_device_id,
)

_HOPPER = ("H100", "H200", "GH100", "GH200")


def gi_id_for(table: GpuMigTable, start: int, size: int) -> int:
    """GPU instance id from its placement: the node of the slice tree it occupies."""
    return (table.memory_slices // size - 1) + start // size


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two (start, size) ranges share a slice."""
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


class MigSymbols(NvmlSimBase):
    """Mixin of SimulatedNvml."""

    # -- state helpers --------------------------------------------------------------------------------
    def _table(self, gpu: dict[str, Any]) -> GpuMigTable | None:
        from nodeconsole.console.demo.nvml_sim_device import pci_device_id
        return table_for_model(gpu.get("model", "")) or table_for_pci_device_id(pci_device_id(gpu))

    def _mig_state(self, gpu: dict[str, Any]) -> tuple[dict[str, Any], GpuMigTable]:
        """The GPU's MIG state and profile table; NOT_SUPPORTED when the GPU is not MIG capable."""
        mig, table = gpu.get("mig"), self._table(gpu)
        if not mig or not mig.get("capable", True) or table is None or "mig" in gpu.get("not_supported", ()):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        mig.setdefault("instances", [])
        return mig, table

    def _mig_enabled(self, gpu: dict[str, Any]) -> tuple[dict[str, Any], GpuMigTable]:
        mig, table = self._mig_state(gpu)
        if not mig.get("current"):
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        return mig, table

    def _find_gi(self, gpu: dict[str, Any], gi_id: int | None) -> dict[str, Any]:
        for gi in (gpu.get("mig") or {}).get("instances", []):
            if gi["gi_id"] == gi_id:
                return gi
        raise NvmlReturn(NVML_ERROR_NOT_FOUND)

    def _gi_profile(self, gpu: dict[str, Any], profile_id: int) -> GiProfile:
        table = self._table(gpu)
        prof = table.by_id(profile_id) if table else None
        if prof is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return prof

    def _gi_place(self, gpu: dict[str, Any], gi: dict[str, Any]) -> Placement:
        if "start" in gi and "size" in gi:
            return int(gi["start"]), int(gi["size"])
        start, size = self._gi_profile(gpu, gi["profile_id"]).placements[0]
        return start, size

    def _ci_place(self, gpu: dict[str, Any], gi: dict[str, Any], ci: dict[str, Any]) -> Placement:
        if "start" in ci and "size" in ci:
            return int(ci["start"]), int(ci["size"])
        return 0, CI_PROFILE_SLICES.get(int(ci["profile_id"]), 1)

    def _ci_profiles(self, gpu: dict[str, Any], gi: dict[str, Any]) -> tuple[CiProfile, ...]:
        return ci_profiles_for(self._gi_profile(gpu, gi["profile_id"]).slice_count)

    def _mig_devices(self, gpu: dict[str, Any]) -> list[tuple[int, int, str]]:
        """(gi_id, ci_id, uuid) of every MIG device (one per compute instance), in index order."""
        out: list[tuple[int, int, str]] = []
        mig = gpu.get("mig") or {}
        if not mig.get("current"):
            return out
        for gi in sorted(mig.get("instances", []), key=lambda g: g["gi_id"]):
            cis = sorted(gi.get("compute_instances", []), key=lambda c: c["ci_id"])
            for k, ci in enumerate(cis):
                uuid = ci.get("uuid") or (gi.get("uuid") if k == 0 else None) or self._derived_uuid(
                    gpu, gi["gi_id"], ci["ci_id"], 0)
                out.append((gi["gi_id"], ci["ci_id"], uuid))
        return out

    @staticmethod
    def _derived_uuid(gpu: dict[str, Any], gi_id: int, ci_id: int, seq: int) -> str:
        return "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{gpu.get('uuid')}/{gi_id}/{ci_id}/{seq}"))

    def _mig_device_profile_name(self, gpu: dict[str, Any], gi_id: int | None, ci_id: int | None) -> str:
        gi = self._find_gi(gpu, gi_id)
        name = self._gi_profile(gpu, gi["profile_id"]).name
        ci = next(c for c in gi.get("compute_instances", []) if c["ci_id"] == ci_id)
        ci_slices = CI_PROFILE_SLICES.get(int(ci["profile_id"]), 0)
        gi_slices = self._gi_profile(gpu, gi["profile_id"]).slice_count
        return name if ci_slices == gi_slices else f"{ci_slices}c.{name}"

    def _busy(self, gpu: dict[str, Any]) -> bool:
        return bool(gpu.get("processes")) or bool((gpu.get("vgpu") or {}).get("active"))

    def _require_privilege(self) -> None:
        if not self.privileged:
            raise NvmlReturn(NVML_ERROR_NO_PERMISSION)

    def _gpu_for_change(self, handle: Any, sym: str) -> Target:
        # another process may have changed the layout since we last looked: re-read before writing
        self.reload_if_changed()
        return self._target(handle, sym)

    # -- MIG mode -------------------------------------------------------------------------------------
    def c_nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> None:
        sym = "nvmlDeviceGetMigMode"
        t = self._target(handle, sym)
        mig, _ = self._mig_state(t.gpu)
        cur, pend = out_ref(current, ctypes.c_uint, sym, 2), out_ref(pending, ctypes.c_uint, sym, 3)
        if cur is None or pend is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        cur.value = int(mig.get("current", 0))
        pend.value = int(mig.get("pending", mig.get("current", 0)))

    def c_nvmlDeviceSetMigMode(self, handle: Any, mode: Any, status: Any) -> None:
        sym = "nvmlDeviceSetMigMode"
        t = self._gpu_for_change(handle, sym)
        mig, _ = self._mig_state(t.gpu)
        want = in_int(mode, sym, 2)
        st = out_ref(status, ctypes.c_uint, sym, 3)
        if want not in (0, 1) or st is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._require_privilege()
        current = int(mig.get("current", 0))
        mig["pending"] = want
        if want == current:
            st.value = NVML_SUCCESS
        elif self._busy(t.gpu) or (want == 0 and mig.get("instances")):
            st.value = NVML_ERROR_IN_USE
        elif mig.get("reset_required", any(h in t.gpu.get("model", "") for h in _HOPPER)):
            st.value = NVML_ERROR_RESET_REQUIRED
        else:
            mig["current"] = want
            st.value = NVML_SUCCESS
        self.save()

    def reset_gpu(self, address: str) -> None:
        """Reset one GPU (what `nvidia-smi -r` does): a pending MIG mode becomes current and GPU
        instances are gone. Refused with RuntimeError while the GPU is in use."""
        self.reload_if_changed()
        gpu = self.gpu_state(address)
        if self._busy(gpu):
            raise RuntimeError(f"GPU {address} is in use; cannot reset")
        mig = gpu.get("mig")
        if mig:
            mig["current"] = int(mig.get("pending", mig.get("current", 0)))
            mig["instances"] = []
        self.save()

    # -- GPU instance profiles ------------------------------------------------------------------------
    def _fill_gi_profile(self, info: Any, prof: GiProfile) -> None:
        info.id, info.isP2pSupported, info.sliceCount = prof.profile_id, 0, prof.slice_count
        info.instanceCount, info.multiprocessorCount = prof.max_instances, prof.sm_count
        info.copyEngineCount = prof.ce if prof.ce is not None else prof.slice_count
        info.decoderCount, info.encoderCount = prof.dec or 0, 0
        info.jpegCount, info.ofaCount, info.memorySizeMB = prof.jpeg or 0, prof.ofa or 0, prof.memory_mib

    def _gi_profile_info(self, handle: Any, profile: Any, out: Any, sym: str, struct: type) -> None:
        t = self._target(handle, sym)
        _, table = self._mig_enabled(t.gpu)
        enum = in_int(profile, sym, 2)
        info = out_ref(out, struct, sym, 3)
        if info is None or not 0 <= enum < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        want = pynvml.nvmlGpuInstanceProfileInfo_v2
        if getattr(info, "version", want) != want:  # v1 structs carry no version
            raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        prof = table.by_enum(enum)
        if prof is None:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        self._fill_gi_profile(info, prof)
        if hasattr(info, "name"):
            info.name = f"MIG {prof.name}".encode()

    def c_nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: Any, out: Any) -> None:
        self._gi_profile_info(handle, profile, out, "nvmlDeviceGetGpuInstanceProfileInfo",
                              pynvml.c_nvmlGpuInstanceProfileInfo_t)

    def c_nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, profile: Any, out: Any) -> None:
        self._gi_profile_info(handle, profile, out, "nvmlDeviceGetGpuInstanceProfileInfoV",
                              pynvml.c_nvmlGpuInstanceProfileInfo_v2_t)

    def _profile_by_id(self, table: GpuMigTable, profile_id: Any, sym: str) -> GiProfile:
        prof = table.by_id(in_int(profile_id, sym, 2))
        if prof is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        return prof

    def c_nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, handle: Any, profile_id: Any, placements: Any,
                                                         count: Any) -> None:
        sym = "nvmlDeviceGetGpuInstancePossiblePlacements_v2"
        t = self._target(handle, sym)
        _, table = self._mig_enabled(t.gpu)
        prof = self._profile_by_id(table, profile_id, sym)
        cnt = out_ref(count, ctypes.c_uint, sym, 4)
        if cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._write_placements(placements, pynvml.c_nvmlGpuInstancePlacement_t, prof.placements, cnt, sym)

    def _write_placements(self, arr_arg: Any, elem: type, places: Sequence[Placement], cnt: Any,
                          sym: str) -> None:
        arr = out_array(arr_arg, elem, sym, 3)
        if arr is not None:
            if len(arr) < len(places):
                raise NvmlAbiError(f"{sym}: caller array holds {len(arr)} placements, the profile has "
                                   f"{len(places)} (buffer overrun)")
            for i, (start, size) in enumerate(places):
                arr[i].start, arr[i].size = start, size
        cnt.value = len(places)

    # -- GPU instances --------------------------------------------------------------------------------
    def _free_gi_placements(self, gpu: dict[str, Any], table: GpuMigTable,
                            prof: GiProfile) -> list[Placement]:
        mig = gpu["mig"]
        taken = [self._gi_place(gpu, gi) for gi in mig["instances"]]
        used_compute = sum(self._gi_profile(gpu, gi["profile_id"]).slice_count for gi in mig["instances"])
        same = sum(1 for gi in mig["instances"] if gi["profile_id"] == prof.profile_id)
        if same >= prof.max_instances or used_compute + prof.slice_count > table.compute_slices:
            return []
        return [p for p in prof.placements if not any(overlaps(p, q) for q in taken)]

    def c_nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle: Any, profile_id: Any, count: Any) -> None:
        sym = "nvmlDeviceGetGpuInstanceRemainingCapacity"
        t = self._target(handle, sym)
        mig, table = self._mig_enabled(t.gpu)
        prof = self._profile_by_id(table, profile_id, sym)
        cnt = out_ref(count, ctypes.c_uint, sym, 3)
        if cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        same = sum(1 for gi in mig["instances"] if gi["profile_id"] == prof.profile_id)
        used = sum(self._gi_profile(t.gpu, gi["profile_id"]).slice_count for gi in mig["instances"])
        # placements of one profile never overlap each other, so every free one can be used
        cnt.value = min(len(self._free_gi_placements(t.gpu, table, prof)), prof.max_instances - same,
                        (table.compute_slices - used) // prof.slice_count)

    def _create_gi(self, handle: Any, profile_id: Any, placement: Placement | None, out: Any,
                   sym: str) -> None:
        t = self._gpu_for_change(handle, sym)
        mig, table = self._mig_enabled(t.gpu)
        prof = self._profile_by_id(table, profile_id, sym)
        obj = out_handle(out, pynvml.c_nvmlGpuInstance_t, sym, 4 if placement else 3)
        if placement is not None and placement not in prof.placements:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._require_privilege()
        free = self._free_gi_placements(t.gpu, table, prof)
        if placement is None:
            # the driver's own choice: highest free start first
            chosen = next(iter(sorted(free, key=lambda p: -p[0])), None)
        else:
            chosen = placement if placement in free else None
        if chosen is None:
            raise NvmlReturn(NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi_id = gi_id_for(table, *chosen)
        seq = int(mig.get("uuid_seq", 0)) + 1
        mig["uuid_seq"] = seq
        mig["instances"].append({"gi_id": gi_id, "profile_id": prof.profile_id, "start": chosen[0],
                                 "size": chosen[1], "uuid": self._derived_uuid(t.gpu, gi_id, 0, seq),
                                 "compute_instances": []})
        mig["instances"].sort(key=lambda g: g["gi_id"])
        set_handle(obj, self._gi_handle(t.pos, gi_id))
        self.save()

    def c_nvmlDeviceCreateGpuInstance(self, handle: Any, profile_id: Any, out: Any) -> None:
        self._create_gi(handle, profile_id, None, out, "nvmlDeviceCreateGpuInstance")

    def c_nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: Any, profile_id: Any, placement: Any,
                                                   out: Any) -> None:
        sym = "nvmlDeviceCreateGpuInstanceWithPlacement"
        place = out_ref(placement, pynvml.c_nvmlGpuInstancePlacement_t, sym, 3)
        if place is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        self._create_gi(handle, profile_id, (int(place.start), int(place.size)), out, sym)

    def c_nvmlDeviceGetGpuInstances(self, handle: Any, profile_id: Any, instances: Any, count: Any) -> None:
        sym = "nvmlDeviceGetGpuInstances"
        t = self._target(handle, sym)
        mig, table = self._mig_enabled(t.gpu)
        prof = self._profile_by_id(table, profile_id, sym)
        arr = out_array(instances, pynvml.c_nvmlGpuInstance_t, sym, 3)
        cnt = out_ref(count, ctypes.c_uint, sym, 4)
        if arr is None or cnt is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        ids = [gi["gi_id"] for gi in mig["instances"] if gi["profile_id"] == prof.profile_id]
        self._fill_handles(arr, [self._gi_handle(t.pos, i) for i in ids], sym)
        cnt.value = len(ids)

    def _fill_handles(self, arr: Any, values: list[int], sym: str) -> None:
        if len(arr) < len(values):
            raise NvmlAbiError(f"{sym}: caller array holds {len(arr)} handles, the library writes "
                               f"{len(values)} (buffer overrun)")
        size = ctypes.sizeof(ctypes.c_void_p)
        for i, v in enumerate(values):
            ctypes.c_void_p.from_buffer(arr, i * size).value = v

    def c_nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: Any, out: Any) -> None:
        sym = "nvmlDeviceGetGpuInstanceById"
        t = self._target(handle, sym)
        self._mig_enabled(t.gpu)
        obj = out_handle(out, pynvml.c_nvmlGpuInstance_t, sym, 3)
        gi = self._find_gi(t.gpu, in_int(gi_id, sym, 2))
        set_handle(obj, self._gi_handle(t.pos, gi["gi_id"]))

    def _gi_target(self, handle: Any, sym: str) -> tuple[Target, dict[str, Any]]:
        """(Target of the parent GPU, GI state) for a GPU instance handle."""
        value = handle_value(handle, sym, 1)
        if value is None or value >> 24 != KIND_GI:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        t = self._target(self._as_device(value), sym)
        self._mig_enabled(t.gpu)
        try:
            return t, self._find_gi(t.gpu, (value >> 8) & 0xFF)
        except NvmlReturn:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT) from None  # destroyed instance

    def _as_device(self, value: int) -> Any:
        return ctypes.cast(ctypes.c_void_p(self._device_handle((value >> 16) & 0xFF)), pynvml.c_nvmlDevice_t)

    def c_nvmlGpuInstanceGetInfo(self, gi_handle: Any, out: Any) -> None:
        sym = "nvmlGpuInstanceGetInfo"
        t, gi = self._gi_target(gi_handle, sym)
        info = out_ref(out, pynvml.c_nvmlGpuInstanceInfo_t, sym, 2)
        if info is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        info.device = self._as_device(self._device_handle(t.pos))
        info.id, info.profileId = gi["gi_id"], gi["profile_id"]
        info.placement.start, info.placement.size = self._gi_place(t.gpu, gi)

    def c_nvmlGpuInstanceDestroy(self, gi_handle: Any) -> None:
        sym = "nvmlGpuInstanceDestroy"
        self.reload_if_changed()
        t, gi = self._gi_target(gi_handle, sym)
        self._require_privilege()
        in_gi = [p for p in t.gpu.get("processes", []) if p.get("gi_id") == gi["gi_id"]]
        vgpus = [v for v in (t.gpu.get("vgpu") or {}).get("active", []) if v.get("gi_id") == gi["gi_id"]]
        if gi.get("compute_instances") or in_gi or vgpus:
            raise NvmlReturn(NVML_ERROR_IN_USE)
        t.gpu["mig"]["instances"].remove(gi)
        self.save()
