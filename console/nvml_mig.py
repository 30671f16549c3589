"""Headless MIG helpers over pynvml: profile tables, placements, instances, and create calls with the
argument passing the C library needs (placements by reference). Used by the NVML source and by MIG
actions; they work on any library installed underneath pynvml (libnvidia-ml or the simulated one).

All of them need MIG mode enabled on the GPU: NVML answers NOT_SUPPORTED otherwise (raised as
pynvml.NVMLError_NotSupported). For planning before MIG is on, use the bundled tables in
console/mig_profiles.py.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import pynvml

from nodeconsole.console.mig_profiles import table_for_pci_device_id

Placement = tuple[int, int]  # (start, size)


@dataclass(frozen=True)
class GiProfileInfo:
    name: str  # as nvidia-smi shows it, e.g. "3g.40gb"
    profile_id: int  # what create calls take
    enum: int  # NVML_GPU_INSTANCE_PROFILE_* it was read with
    slice_count: int
    memory_mib: int
    max_instances: int
    sm_count: int
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class CiProfileInfo:
    name: str  # e.g. "1c.3g.40gb", or the GI profile name for a CI spanning the whole GI
    profile_id: int
    slice_count: int
    max_instances: int


@dataclass(frozen=True)
class GpuInstance:
    gi_id: int
    profile_id: int
    start: int
    size: int
    handle: Any  # c_nvmlGpuInstance_t


@dataclass(frozen=True)
class ComputeInstance:
    ci_id: int
    profile_id: int
    start: int
    size: int
    handle: Any  # c_nvmlComputeInstance_t


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def profile_name(info: Any, pci_device_id: int | None = None) -> str:
    """nvidia-smi's name for a GI profile info struct: the v2 struct's name without its "MIG " prefix;
    for v1 structs the bundled table (by PCI device id and profile id), else "<slices>g.<GiB>gb"."""
    name = _text(getattr(info, "name", "") or "")
    if name:
        return name[4:] if name.startswith("MIG ") else name
    table = table_for_pci_device_id(pci_device_id) if pci_device_id else None
    prof = table.by_id(info.id) if table else None
    if prof is not None:
        return prof.name
    return f"{info.sliceCount}g.{round(info.memorySizeMB / 1024)}gb"


def _gi_profile_info(handle: Any, enum: int) -> Any:
    try:
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum, version=2)
    except pynvml.NVMLError_FunctionNotFound:  # drivers before the V variant
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum, version=1)


def possible_placements(handle: Any, profile_id: int) -> tuple[Placement, ...]:
    """Placements the driver allows for a GI profile id (two calls: count, then a sized array)."""
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    if count.value == 0:
        return ()
    arr = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, arr, ctypes.byref(count))
    return tuple((arr[i].start, arr[i].size) for i in range(count.value))


def gi_profiles(handle: Any, pci_device_id: int | None = None) -> list[GiProfileInfo]:
    """Every GPU instance profile the GPU offers, with its possible placements."""
    out: list[GiProfileInfo] = []
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = _gi_profile_info(handle, enum)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            continue
        if any(p.profile_id == info.id for p in out):
            continue
        out.append(GiProfileInfo(profile_name(info, pci_device_id), info.id, enum, info.sliceCount,
                                 info.memorySizeMB, info.instanceCount, info.multiprocessorCount,
                                 possible_placements(handle, info.id)))
    return out


def gpu_instances(handle: Any, profiles: list[GiProfileInfo]) -> list[GpuInstance]:
    """The GPU instances that exist, sorted by placement start."""
    out: list[GpuInstance] = []
    for prof in profiles:
        arr = (pynvml.c_nvmlGpuInstance_t * max(1, prof.max_instances))()
        count = ctypes.c_uint(0)
        pynvml.nvmlDeviceGetGpuInstances(handle, prof.profile_id, arr, ctypes.byref(count))
        for i in range(count.value):
            info = pynvml.nvmlGpuInstanceGetInfo(arr[i])
            out.append(GpuInstance(info.id, info.profileId, info.placement.start, info.placement.size,
                                   arr[i]))
    return sorted(out, key=lambda g: (g.start, g.gi_id))


def ci_profiles(gi_handle: Any) -> list[CiProfileInfo]:
    """Compute instance profiles available inside one GPU instance."""
    out: list[CiProfileInfo] = []
    eng = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            try:
                info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi_handle, enum, eng, version=2)
                name = _text(info.name)
            except pynvml.NVMLError_FunctionNotFound:
                info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi_handle, enum, eng, version=1)
                name = f"{info.sliceCount}c"
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            continue
        out.append(CiProfileInfo(name[4:] if name.startswith("MIG ") else name, info.id, info.sliceCount,
                                 info.instanceCount))
    return out


def compute_instances(gi_handle: Any, profiles: list[CiProfileInfo]) -> list[ComputeInstance]:
    """The compute instances inside one GPU instance, sorted by placement start."""
    out: list[ComputeInstance] = []
    for prof in profiles:
        arr = (pynvml.c_nvmlComputeInstance_t * max(1, prof.max_instances))()
        count = ctypes.c_uint(0)
        pynvml.nvmlGpuInstanceGetComputeInstances(gi_handle, prof.profile_id, arr, ctypes.byref(count))
        for i in range(count.value):
            info = pynvml.nvmlComputeInstanceGetInfo(arr[i])
            out.append(ComputeInstance(info.id, info.profileId, info.placement.start, info.placement.size,
                                       arr[i]))
    return sorted(out, key=lambda c: (c.start, c.ci_id))


def mig_device_uuids(handle: Any) -> dict[tuple[int, int], str]:
    """(gi_id, ci_id) → MIG device UUID for every MIG device of a GPU."""
    out: dict[tuple[int, int], str] = {}
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError_NotFound:  # indices need not be dense
            continue
        key = (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig))
        out[key] = _text(pynvml.nvmlDeviceGetUUID(mig))
    return out


def create_gpu_instance(handle: Any, profile_id: int, placement: Placement | None = None) -> Any:
    """Create a GPU instance; without `placement` the driver picks one (order dependent: plan layouts
    with explicit placements). Returns the GI handle."""
    if placement is None:
        return pynvml.nvmlDeviceCreateGpuInstance(handle, profile_id)
    place = pynvml.c_nvmlGpuInstancePlacement_t(placement[0], placement[1])
    # the C function takes a pointer: passing the struct by value crashes the process
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(place))


def create_compute_instance(gi_handle: Any, profile_id: int, placement: Placement | None = None) -> Any:
    """Create a compute instance inside a GPU instance. Returns the CI handle."""
    if placement is None:
        return pynvml.nvmlGpuInstanceCreateComputeInstance(gi_handle, profile_id)
    place = pynvml.c_nvmlComputeInstancePlacement_t(placement[0], placement[1])
    return pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi_handle, profile_id,
                                                                    ctypes.byref(place))


def full_ci_profile(gi_handle: Any) -> CiProfileInfo | None:
    """The CI profile that spans the whole GPU instance (what `nvidia-smi mig -cgi ... -C` creates)."""
    profiles = ci_profiles(gi_handle)
    return max(profiles, key=lambda p: p.slice_count) if profiles else None


def destroy_gpu_instance(gi_handle: Any) -> None:
    """Destroy a GPU instance and its compute instances first (NVML refuses with IN_USE otherwise)."""
    for ci in compute_instances(gi_handle, ci_profiles(gi_handle)):
        pynvml.nvmlComputeInstanceDestroy(ci.handle)
    pynvml.nvmlGpuInstanceDestroy(gi_handle)
