"""The NVML state of a host in the simulated library's nvml.json format (docs/demo-host.md), read through
pynvml: every value the NVML source reads, per GPU, so the simulated library serves the same answers on
a replay. Metrics that move (utilization, memory used, temperature, power) are kept as the values read
(`captured`); a metric the driver does not support is listed in `not_supported`; a GPU that answered
GPU_IS_LOST is kept with `lost`.

The library under pynvml is chosen like the NVML source does it (`lib`: None for libnvidia-ml).
"""
from __future__ import annotations

import ctypes
import uuid
from collections.abc import Callable
from typing import Any

import pynvml

from nodeconsole.console import nvml_mig
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.sources.nvml_calls import MIB, nvml_text

_NA = object()  # NOT_SUPPORTED (or a symbol the driver lacks)


class _Lost(Exception):
    pass


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A value, _NA when not supported, None on another error; GPU_IS_LOST raises _Lost."""
    try:
        return fn(*args, **kwargs)
    except pynvml.NVMLError_GpuIsLost:
        raise _Lost() from None
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound, pynvml.NVMLLibraryMismatchError):
        return _NA
    except pynvml.NVMLError:
        return None


def dump_nvml(lib: object | None = None) -> dict[str, Any]:
    """Initialise NVML on `lib`, read every GPU, shut down. Raises pynvml.NVMLError when NVML cannot
    start (the capture records the reason)."""
    want = lib if lib is not None else (pynvml.nvmlLib if isinstance(pynvml.nvmlLib, ctypes.CDLL) else None)
    if pynvml.nvmlLib is not want:
        pynvml.nvmlLib = want
        pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlInit()
    try:
        state: dict[str, Any] = {"driver_version": nvml_text(pynvml.nvmlSystemGetDriverVersion())}
        cuda = _call(pynvml.nvmlSystemGetCudaDriverVersion)
        if isinstance(cuda, int):
            state["cuda_driver_version"] = cuda
        types: dict[str, dict[str, Any]] = {}
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpu = _gpu(index, types)
            if gpu is not None:
                gpus.append(gpu)
        state["gpus"] = gpus
        state["vgpu_types"] = dict(sorted(types.items(), key=lambda kv: int(kv[0])))
        return state
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _gpu(index: int, types: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pci = pynvml.nvmlDeviceGetPciInfo_v3(handle)
    except pynvml.NVMLError:
        return None  # nothing identifies it: the NVML source cannot place it either
    gpu: dict[str, Any] = {"address": parse_pci_address(nvml_text(pci.busId)),
                           "pci_device_id": int(pci.pciDeviceId), "pci_subsystem_id": int(pci.pciSubSystemId)}
    unsupported: list[str] = []
    try:
        _identity(handle, gpu)
        _metrics(handle, gpu, unsupported)
        _health(handle, gpu, unsupported)
        _mig(handle, gpu, unsupported)
        _vgpu(handle, gpu, types, unsupported)
        _processes(handle, gpu, unsupported)
    except _Lost:
        gpu["lost"] = True
    gpu["not_supported"] = unsupported
    return gpu


def _identity(handle: Any, gpu: dict[str, Any]) -> None:
    name = _call(pynvml.nvmlDeviceGetName, handle)
    if isinstance(name, (str, bytes)):
        gpu["name"] = nvml_text(name)
    uuid = _call(pynvml.nvmlDeviceGetUUID, handle)
    if isinstance(uuid, (str, bytes)):
        gpu["uuid"] = nvml_text(uuid)


def _metrics(handle: Any, gpu: dict[str, Any], unsupported: list[str]) -> None:
    captured: dict[str, Any] = {}
    util = _call(pynvml.nvmlDeviceGetUtilizationRates, handle)
    if util is _NA:
        unsupported.append("utilization")
    elif util is not None:
        captured["utilization_gpu"], captured["utilization_memory"] = int(util.gpu), int(util.memory)
    mem = _call(pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2)
    if mem is _NA or mem is None:
        mem = _call(pynvml.nvmlDeviceGetMemoryInfo, handle)
    if mem is _NA:
        unsupported.append("memory")
    elif mem is not None:
        gpu["memory_total_mib"] = int(mem.total) // MIB
        reserved = int(getattr(mem, "reserved", 0)) // MIB
        if reserved:
            gpu["memory_reserved_mib"] = reserved
        captured["memory_used_mib"] = int(mem.used) // MIB
    temp = _call(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    if temp is _NA:
        unsupported.append("temperature")
    elif isinstance(temp, int):
        captured["temperature_c"] = temp
    limit = _call(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    if isinstance(limit, int):
        gpu["power_limit_w"] = limit / 1000 if limit % 1000 else limit // 1000
    elif limit is _NA:
        unsupported.append("power_limit")
    power = _call(pynvml.nvmlDeviceGetPowerUsage, handle)
    if power is _NA:
        unsupported.append("power")
    elif isinstance(power, int):
        captured["power_mw"] = power
    pcie: dict[str, int] = {}
    for key, fn in (("gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
                    ("width", pynvml.nvmlDeviceGetCurrPcieLinkWidth),
                    ("max_gen", pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
                    ("max_width", pynvml.nvmlDeviceGetMaxPcieLinkWidth)):
        value = _call(fn, handle)
        if isinstance(value, int):
            pcie[key] = value
    gpu["pcie"] = pcie
    mode = _call(pynvml.nvmlDeviceGetPersistenceMode, handle)
    if isinstance(mode, int):
        gpu["persistence_mode"] = 1 if mode == pynvml.NVML_FEATURE_ENABLED else 0
    elif mode is _NA:
        unsupported.append("nvmlDeviceGetPersistenceMode")
    gpu["captured"] = captured


def _health(handle: Any, gpu: dict[str, Any], unsupported: list[str]) -> None:
    ecc: dict[str, int] = {}
    for scope, counter in (("volatile", pynvml.NVML_VOLATILE_ECC), ("aggregate", pynvml.NVML_AGGREGATE_ECC)):
        value = _call(pynvml.nvmlDeviceGetTotalEccErrors, handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                      counter)
        if value is _NA:
            unsupported.append("ecc")
            break
        if isinstance(value, int):
            ecc[f"{scope}_uncorrected"] = value
        value = _call(pynvml.nvmlDeviceGetTotalEccErrors, handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter)
        if isinstance(value, int):
            ecc[f"{scope}_corrected"] = value
    gpu["ecc"] = ecc
    _clocks_links(handle, gpu, unsupported)
    pages: dict[str, int] = {}
    for key, cause in (("single_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
                       ("double_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)):
        value = _call(pynvml.nvmlDeviceGetRetiredPages, handle, cause)
        if value is _NA:
            unsupported.append("retired_pages")
            break
        if isinstance(value, list):
            pages[key] = len(value)
    gpu["retired_pages"] = pages
    rows = _call(pynvml.nvmlDeviceGetRemappedRows, handle)
    if rows is _NA:
        unsupported.append("remapped_rows")
    elif isinstance(rows, tuple):
        gpu["remapped_rows"] = dict(zip(("correctable", "uncorrectable", "pending", "failure"), map(int, rows)))


def _clocks_links(handle: Any, gpu: dict[str, Any], unsupported: list[str]) -> None:
    """Clocks (maximum; the current ones and the clock-event mask as captured), the PCIe replay counter,
    NVLink (each link's remote end, state and error counters) and the fabric state."""
    _clocks(handle, gpu, unsupported)
    _nvlinks(handle, gpu)
    _fabric(handle, gpu)


def _clocks(handle: Any, gpu: dict[str, Any], unsupported: list[str]) -> None:
    """Maximum clocks; the current ones, the clock-event mask (under "captured"); the PCIe replay counter."""
    captured = gpu.setdefault("captured", {})
    clocks: dict[str, int] = {}
    for key, fn, domain in (("sm_max", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
                            ("mem_max", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_MEM),
                            ("video_max", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_VIDEO),
                            ("clock_sm_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
                            ("clock_mem_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM)):
        value = _call(fn, handle, domain)
        if value is _NA and "clocks" not in unsupported:
            unsupported.append("clocks")
        if isinstance(value, int):
            (captured if key.startswith("clock_") else clocks)[key] = value
    gpu["clocks"] = clocks
    mask = _call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
    if mask is _NA:
        mask = _call(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
    if mask is _NA:
        unsupported.append("clock_events")
    elif isinstance(mask, int):
        captured["clock_events_mask"] = mask
    replay = _call(pynvml.nvmlDeviceGetPcieReplayCounter, handle)
    if replay is _NA:
        unsupported.append("pcie_replay")
    elif isinstance(replay, int):
        gpu["pcie_replay"] = replay


def _nvlinks(handle: Any, gpu: dict[str, Any]) -> None:
    """Each NVLink's remote end and type, the links down and their nonzero error counters."""
    links: dict[str, Any] = {"remotes": [], "remote_types": [], "down": [], "errors": {}}
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError_GpuIsLost:
            raise _Lost() from None
        except pynvml.NVMLError:
            break  # NOT_SUPPORTED: no NVLink; INVALID_ARGUMENT: past the last link
        if "version" not in links:
            version = _call(pynvml.nvmlDeviceGetNvLinkVersion, handle, link)
            links["version"] = version if isinstance(version, int) else 0
        pci = _call(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        links["remotes"].append(nvml_text(pci.busId) if pci not in (_NA, None) else "")
        kind = _call(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        links["remote_types"].append({0: "gpu", 1: "ibmnpu", 2: "switch"}.get(kind, "unknown")
                                     if isinstance(kind, int) else "unknown")
        if state != pynvml.NVML_FEATURE_ENABLED:
            links["down"].append(link)
            continue
        errors = {name: value for c, name in enumerate(("replay", "recovery", "crc_flit", "crc_data"))
                  if isinstance(value := _call(pynvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, c), int)
                  and value}
        if errors:
            links["errors"][str(link)] = errors
    if links["remotes"]:
        gpu["nvlink"] = links


def _fabric(handle: Any, gpu: dict[str, Any]) -> None:
    """The GPU fabric's state (NVSwitch systems): the v2 call first, the older one where it is missing."""
    info: Any = pynvml.c_nvmlGpuFabricInfo_v2_t()
    got = _call(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info))
    if got is _NA:
        info = pynvml.c_nvmlGpuFabricInfo_t()
        got = _call(pynvml.nvmlDeviceGetGpuFabricInfo, handle, ctypes.byref(info))
    states = {1: "not_started", 2: "in_progress", 3: "completed"}
    if got not in (_NA, None) and int(info.state) in states:
        gpu["fabric"] = {"state": states[int(info.state)], "status": int(info.status),
                         "clique_id": int(info.cliqueId), "cluster_uuid": str(uuid.UUID(bytes=bytes(info.clusterUuid)))}


def _mig(handle: Any, gpu: dict[str, Any], unsupported: list[str]) -> None:
    modes = _call(pynvml.nvmlDeviceGetMigMode, handle)
    if not isinstance(modes, list):
        if modes is _NA:
            gpu["mig"] = {"capable": False}
        return
    current, pending = (1 if m == pynvml.NVML_DEVICE_MIG_ENABLE else 0 for m in modes)
    mig: dict[str, Any] = {"capable": True, "current": current, "pending": pending, "instances": []}
    gpu["mig"] = mig
    if not current:
        return
    try:
        profiles = nvml_mig.gi_profiles(handle, gpu["pci_device_id"])
        uuids = nvml_mig.mig_device_uuids(handle)
        for gi in nvml_mig.gpu_instances(handle, profiles):
            cis = []
            for ci in nvml_mig.compute_instances(gi.handle, nvml_mig.ci_profiles(gi.handle)):
                entry: dict[str, Any] = {"ci_id": ci.ci_id, "profile_id": ci.profile_id, "start": ci.start,
                                         "size": ci.size}
                if (gi.gi_id, ci.ci_id) in uuids:
                    entry["uuid"] = uuids[(gi.gi_id, ci.ci_id)]
                cis.append(entry)
            mig["instances"].append({"gi_id": gi.gi_id, "profile_id": gi.profile_id, "start": gi.start,
                                     "size": gi.size, "compute_instances": cis})
    except pynvml.NVMLError_GpuIsLost:
        raise _Lost() from None
    except pynvml.NVMLError:
        unsupported.append("nvmlDeviceGetGpuInstances")


def _vgpu(handle: Any, gpu: dict[str, Any], types: dict[str, dict[str, Any]], unsupported: list[str]) -> None:
    supported = _call(pynvml.nvmlDeviceGetSupportedVgpus, handle)
    if not isinstance(supported, list):
        return  # the plain driver: no "vgpu" entry answers NOT_SUPPORTED
    creatable = _call(pynvml.nvmlDeviceGetCreatableVgpus, handle)
    active = _call(pynvml.nvmlDeviceGetActiveVgpus, handle)
    vgpu: dict[str, Any] = {"supported_type_ids": [int(t) for t in supported],
                            "creatable_type_ids": [int(t) for t in creatable] if isinstance(creatable, list) else [],
                            "active": []}
    for type_id in supported:
        key = str(int(type_id))
        if key not in types:
            name = _call(pynvml.nvmlVgpuTypeGetName, type_id)
            fb = _call(pynvml.nvmlVgpuTypeGetFramebufferSize, type_id)
            most = _call(pynvml.nvmlVgpuTypeGetMaxInstances, handle, type_id)
            types[key] = {"name": nvml_text(name) if isinstance(name, (str, bytes)) else key,
                          "framebuffer_mib": fb // MIB if isinstance(fb, int) else 0,
                          "max_instances": most if isinstance(most, int) else 0}
    for inst in active if isinstance(active, list) else []:
        entry: dict[str, Any] = {"instance_id": int(inst)}
        type_id = _call(pynvml.nvmlVgpuInstanceGetType, inst)
        entry["type_id"] = int(type_id) if isinstance(type_id, int) else 0
        for key, fn in (("uuid", pynvml.nvmlVgpuInstanceGetUUID), ("mdev_uuid", pynvml.nvmlVgpuInstanceGetMdevUUID)):
            value = _call(fn, inst)
            entry[key] = nvml_text(value) if isinstance(value, (str, bytes)) else ""
        vm = _call(pynvml.nvmlVgpuInstanceGetVmID, inst)
        if isinstance(vm, tuple) and vm[0]:
            entry["vm_uuid" if vm[1] == pynvml.NVML_VGPU_VM_ID_UUID else "vm_id"] = nvml_text(vm[0])
        gi = _call(pynvml.nvmlVgpuInstanceGetGpuInstanceId, inst)
        entry["gi_id"] = gi if isinstance(gi, int) and gi != 0xFFFFFFFF else None
        vgpu["active"].append(entry)
    gpu["vgpu"] = vgpu


def _processes(handle: Any, gpu: dict[str, Any], unsupported: list[str]) -> None:
    found: dict[int, dict[str, Any]] = {}
    for kind, fn in (("compute", pynvml.nvmlDeviceGetComputeRunningProcesses),
                     ("graphics", pynvml.nvmlDeviceGetGraphicsRunningProcesses)):
        procs = _call(fn, handle)
        if procs is _NA:
            unsupported.append("processes")
            break
        for p in procs if isinstance(procs, list) else []:
            if p.pid in found:
                found[p.pid]["type"] = "compute+graphics"
                continue
            name = _call(pynvml.nvmlSystemGetProcessName, p.pid)
            entry: dict[str, Any] = {"pid": int(p.pid), "name": nvml_text(name) if isinstance(name, (str, bytes)) else "",
                                     "used_mib": None if p.usedGpuMemory is None else int(p.usedGpuMemory) // MIB,
                                     "type": kind}
            for key in ("gpuInstanceId", "computeInstanceId"):
                value = getattr(p, key, 0xFFFFFFFF)
                if isinstance(value, int) and value != 0xFFFFFFFF:
                    entry["gi_id" if key == "gpuInstanceId" else "ci_id"] = value
            found[p.pid] = entry
    gpu["processes"] = [found[pid] for pid in sorted(found)]
