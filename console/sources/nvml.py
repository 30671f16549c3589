"""The NVML source: what the NVIDIA driver reports about each GPU it can see, read through pynvml.

`NvmlSource(lib)` keeps NVML initialised between polls and caches static facts (name, UUID, max PCIe
link, MIG profile tables, vGPU type names) while fast facts (utilization, memory, power, MIG layout,
processes) are read on every `read()`. `lib` is the library object placed under pynvml
(`pynvml.nvmlLib`): None for the real libnvidia-ml, or a simulated one. Only pynvml wrapper functions are
called, so the same code runs against both.

Conventions: NOT_SUPPORTED (or a symbol the driver lacks) → NA, never 0; a GPU answering GPU_IS_LOST is
reported with `error` and no metrics while the others are still read; a library that cannot start raises
SourceError with the reason an admin can act on.
"""
from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from nodeconsole.console import nvml_mig
from nodeconsole.console.mig_profiles import table_for_pci_device_id
from nodeconsole.console.model import (
    LINKS_READ,
    NA,
    GpuProcess,
    Metric,
    Mig,
    MigInstance,
    VgpuInstance,
    VgpuType,
)
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.sources.nvml_calls import MIB, GpuLost, nvml_call, nvml_text, watts
from nodeconsole.console.sources.nvml_links import NvLinkReader, clock_events, fabric, link_ends
from nodeconsole.console.sources.types import NvmlData, NvmlGpu, SourceError

_INIT_ERRORS: dict[int, str] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded (the nvidia kernel module is not loaded)",
    pynvml.NVML_ERROR_NO_PERMISSION: "no permission to use the NVIDIA driver (cannot open /dev/nvidia*)",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "NVML library and nvidia kernel module versions differ "
                                               "(reboot, or reload the nvidia module)",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "libnvidia-ml is too old (nvmlInitWithFlags missing)",
}


@dataclass
class _Static:
    """Facts that do not change while NVML stays initialised."""
    address: str
    name: str
    uuid: str | None
    pci_device_id: int
    max_gen: Metric = None
    max_width: Metric = None
    mig_profiles: dict[int, list[nvml_mig.GiProfileInfo]] = field(default_factory=dict)  # by MIG mode
    ci_profiles: dict[int, list[nvml_mig.CiProfileInfo]] = field(default_factory=dict)  # by GI profile id
    vgpu_max: dict[int, Metric] = field(default_factory=dict)
    clock_sm_max: Metric = None
    clock_mem_max: Metric = None
    # NVLink: NA without NVLink, else per link (link, version, remote PCI address, remote type) — the remote
    # end does not change while NVML stays initialised; None until read
    nvlinks: tuple[tuple[int, Metric, str | None, str], ...] | str | None = None


class NvmlSource:
    """Reads NvmlData; see the module docstring. `rescan_s`: NVML is re-initialised this often (and a few
    seconds after a GPU got lost) so GPUs bound back to the nvidia driver appear; `invalidate()` forces
    it, e.g. after an action changed drivers."""

    def __init__(self, lib: object | None = None, rescan_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, slow_s: float = 5.0,
                 nvlink_counters_s: float = 30.0) -> None:
        self.lib = lib
        self.rescan_s = rescan_s
        # Health counters, PCIe link, MIG layout and vGPU change rarely: read every `slow_s` (and after
        # invalidate()), not every tick — most of a poll's NVML calls otherwise.
        self.slow_s = slow_s
        self._slow: dict[str, tuple[float, dict[str, Any]]] = {}
        # NVLink error counters (four per link, up to 18 links a GPU: most of a slow read's calls) are
        # cumulative: read every `nvlink_counters_s`; the links' states every slow read
        self.links = NvLinkReader(nvlink_counters_s, clock)
        self._clock = clock
        self._lock = threading.Lock()
        self._initialised = False
        self._loaded: object | None = None  # the library pynvml held when we initialised
        self._init_at = 0.0
        self._rescan_soon = False
        self._failed: set[str] = set()  # addresses that answered with an error on the last read
        self._static: dict[int, _Static] = {}
        # device handles by index: valid until NVML shuts down (as the static facts)
        self._handles: dict[int, Any] = {}
        self._vgpu_types: dict[int, tuple[str, Metric]] = {}  # type id → (name, framebuffer MiB)
        self._driver: str | None = None
        self._mem_v2 = True
        self._temp_v = True

    # -- lifetime -------------------------------------------------------------------------------------
    def invalidate(self) -> None:
        """Re-initialise NVML and re-read static facts on the next read."""
        self._rescan_soon = True
        self._init_at = -1e18
        self._slow.clear()
        self.links.forget()

    def close(self) -> None:
        """Shut NVML down (releases /dev/nvidia* — needed before unbinding a GPU from the driver)."""
        with self._lock:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._initialised and pynvml.nvmlLib is self._loaded:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
        self._initialised = False
        self._static.clear()
        self._handles.clear()
        self._vgpu_types.clear()

    def _ensure(self) -> None:
        if self.lib is not None:
            want = self.lib
        else:
            # the real library: whatever CDLL pynvml loaded, never a stand-in left by someone else
            want = pynvml.nvmlLib if isinstance(pynvml.nvmlLib, ctypes.CDLL) else None
        if self._initialised and pynvml.nvmlLib is not self._loaded:
            self._initialised = False  # someone swapped the library underneath: our init is void
            self._static.clear()
        if pynvml.nvmlLib is not want:
            pynvml.nvmlLib = want
            pynvml._nvmlGetFunctionPointer_cache.clear()
        interval = 5.0 if self._rescan_soon else self.rescan_s
        if self._initialised and self._clock() - self._init_at >= interval:
            self._shutdown()
        if self._initialised:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise SourceError(_INIT_ERRORS.get(e.value, f"NVML initialisation failed: {e}")) from None
        self._initialised, self._loaded = True, pynvml.nvmlLib
        self._handles.clear()  # a new session may number the GPUs differently
        self._init_at, self._rescan_soon = self._clock(), False
        self._mem_v2 = self._temp_v = self.links.fi_link_state = True
        try:
            self._driver = nvml_text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self._driver = None

    # -- reading --------------------------------------------------------------------------------------
    def read(self) -> NvmlData:
        """One poll of every GPU NVML sees."""
        with self._lock:
            self._ensure()
            try:
                count = pynvml.nvmlDeviceGetCount()
            except pynvml.NVMLError_Uninitialized:
                self._initialised = False  # shut down behind our back: start again once
                self._ensure()
                count = pynvml.nvmlDeviceGetCount()
            except pynvml.NVMLError as e:
                raise SourceError(f"NVML cannot list GPUs: {e}") from None
            gpus = [g for g in (self._read_gpu(i) for i in range(count)) if g is not None]
            failed = {g.address for g in gpus if g.error}
            if failed - self._failed:  # newly failed (e.g. taken from the driver): look again soon, once
                self._rescan_soon = True
            self._failed = failed
            return NvmlData(driver_version=self._driver, gpus=tuple(gpus))

    def _read_gpu(self, index: int) -> NvmlGpu | None:
        static = self._static.get(index)
        try:
            handle = self._handles.get(index)
            if handle is None:
                handle = self._handles[index] = pynvml.nvmlDeviceGetHandleByIndex(index)
            if static is None:
                static = self._read_static(index, handle)
            return self._read_fast(index, handle, static)
        except (GpuLost, pynvml.NVMLError_GpuIsLost):
            error = "GPU is lost"
        except pynvml.NVMLError as e:  # the handle or the identity could not be read
            error = str(e)
        static = self._static.get(index)
        if static is None:
            return None  # nothing identifies it; it cannot be matched to a PCI device
        return NvmlGpu(address=static.address, nvml_index=index, name=static.name, uuid=static.uuid,
                       error=error)

    def _read_static(self, index: int, handle: Any) -> _Static:
        pci = pynvml.nvmlDeviceGetPciInfo_v3(handle)
        static = _Static(address=parse_pci_address(nvml_text(pci.busId)), name="", uuid=None,
                         pci_device_id=int(pci.pciDeviceId))
        self._static[index] = static  # known from here on, even if the GPU gets lost mid-read
        static.name = nvml_text(nvml_call(pynvml.nvmlDeviceGetName, handle) or "")
        uuid = nvml_call(pynvml.nvmlDeviceGetUUID, handle)
        static.uuid = nvml_text(uuid) if isinstance(uuid, (str, bytes)) and uuid != NA else None
        static.max_gen = nvml_call(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
        static.max_width = nvml_call(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
        static.clock_sm_max = nvml_call(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM)
        static.clock_mem_max = nvml_call(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM)
        return static

    def _memory(self, handle: Any) -> tuple[Metric, Metric]:
        mem: Any = None
        if self._mem_v2:
            try:
                mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch):
                self._mem_v2 = False  # an older driver: v1 from now on
            except pynvml.NVMLError_GpuIsLost:
                raise GpuLost() from None
            except pynvml.NVMLError_NotSupported:
                return NA, NA
            except pynvml.NVMLError:
                return None, None
        if mem is None:
            mem = nvml_call(pynvml.nvmlDeviceGetMemoryInfo, handle)
            if mem is NA or mem is None:
                return mem, mem
        return mem.total // MIB, mem.used // MIB

    def _temperature(self, handle: Any) -> Metric:
        if self._temp_v:
            try:
                return pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU)
            except pynvml.NVMLError_FunctionNotFound:
                self._temp_v = False
            except pynvml.NVMLError_GpuIsLost:
                raise GpuLost() from None
            except pynvml.NVMLError_NotSupported:
                return NA
            except pynvml.NVMLError:
                return None
        return nvml_call(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)

    def _read_fast(self, index: int, handle: Any, static: _Static) -> NvmlGpu:
        util = nvml_call(pynvml.nvmlDeviceGetUtilizationRates, handle)
        util_gpu, util_mem = (util.gpu, util.memory) if util not in (NA, None) else (util, util)
        total, used = self._memory(handle)
        slow = self._read_slow(handle, static)
        return NvmlGpu(
            address=static.address, nvml_index=index, name=static.name, uuid=static.uuid,
            memory_total_mib=total, memory_used_mib=used, utilization_gpu=util_gpu,
            utilization_memory=util_mem, temperature_c=self._temperature(handle),
            power_w=watts(nvml_call(pynvml.nvmlDeviceGetPowerUsage, handle)),
            pcie_max_gen=static.max_gen, pcie_max_width=static.max_width,
            processes=self._processes(handle), **slow)

    def _read_slow(self, handle: Any, static: _Static) -> dict[str, Any]:
        now = self._clock()
        hit = self._slow.get(static.address)
        if hit is not None and now - hit[0] < self.slow_s:
            return hit[1]
        ecc_v = nvml_call(pynvml.nvmlDeviceGetTotalEccErrors, handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                      pynvml.NVML_VOLATILE_ECC)
        ecc_a = nvml_call(pynvml.nvmlDeviceGetTotalEccErrors, handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                      pynvml.NVML_AGGREGATE_ECC)
        rows = nvml_call(pynvml.nvmlDeviceGetRemappedRows, handle)
        rows_pending, rows_failure = (rows[2], rows[3]) if isinstance(rows, tuple) else (rows, rows)
        vgpu_types, vgpu_instances, gi_vms = self._vgpu(handle, static)
        slow = dict(
            power_limit_w=watts(nvml_call(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)),
            ecc_volatile_uncorrected=ecc_v, ecc_aggregate_uncorrected=ecc_a,
            retired_pages=self._retired_pages(handle), remapped_rows_pending=rows_pending,
            remapped_rows_failure=rows_failure,
            pcie_gen=nvml_call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            pcie_width=nvml_call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
            persistence_mode=_persistence(nvml_call(pynvml.nvmlDeviceGetPersistenceMode, handle)),
            mig=self._mig(handle, static, gi_vms), vgpu_types=vgpu_types, vgpu_instances=vgpu_instances,
            **self._health(handle, static, rows))
        self._slow[static.address] = (now, slow)
        return slow

    # -- health (slow cadence) -------------------------------------------------------------------------
    def _health(self, handle: Any, static: _Static, rows: Any) -> dict[str, Any]:
        """Clocks, clock-event reasons, corrected ECC, remapped row counts, PCIe replays, NVLink, fabric."""
        ecc = {f"ecc_{scope}_corrected": nvml_call(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                                   pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter)
               for scope, counter in (("volatile", pynvml.NVML_VOLATILE_ECC), ("aggregate", pynvml.NVML_AGGREGATE_ECC))}
        return dict(
            clock_sm_mhz=nvml_call(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
            clock_mem_mhz=nvml_call(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
            clock_sm_max_mhz=static.clock_sm_max, clock_mem_max_mhz=static.clock_mem_max,
            clock_events=clock_events(handle),
            remapped_rows_correctable=rows[0] if isinstance(rows, tuple) else rows,
            remapped_rows_uncorrectable=rows[1] if isinstance(rows, tuple) else rows,
            pcie_replay_count=nvml_call(pynvml.nvmlDeviceGetPcieReplayCounter, handle),
            **self._nvlinks(handle, static), **ecc, **fabric(handle))

    def _nvlinks(self, handle: Any, static: _Static) -> dict[str, Any]:
        """The GPU's `nvlinks` and `nvlink_state`."""
        if static.nvlinks is None:
            static.nvlinks = link_ends(handle)
        if not isinstance(static.nvlinks, tuple):
            return dict(nvlinks=(), nvlink_state=static.nvlinks)
        return dict(nvlinks=self.links.read(handle, static.address, static.nvlinks), nvlink_state=LINKS_READ)

    def _retired_pages(self, handle: Any) -> Metric:
        total = 0
        for cause in (pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                      pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR):
            pages = nvml_call(pynvml.nvmlDeviceGetRetiredPages, handle, cause)
            if not isinstance(pages, list):
                return pages
            total += len(pages)
        return total

    # -- MIG ------------------------------------------------------------------------------------------
    def _mig(self, handle: Any, static: _Static, gi_vms: dict[int, str]) -> Mig:
        """MIG mode and layout; `gi_vms` maps GPU instance ids to the VM of the vGPU running in them."""
        modes = nvml_call(pynvml.nvmlDeviceGetMigMode, handle)
        if not isinstance(modes, list):
            return Mig()  # not MIG capable (NA) or unreadable
        mode, pending = (("enabled" if m == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled") for m in modes)
        table = table_for_pci_device_id(static.pci_device_id)
        slices = table.memory_slices if table else 0
        if mode != "enabled":
            return Mig(mode=mode, pending_mode=pending, memory_slices=slices)
        try:
            instances, slices = self._mig_instances(handle, static, gi_vms)
        except pynvml.NVMLError_GpuIsLost:
            raise GpuLost() from None
        except pynvml.NVMLError:
            instances = ()
        return Mig(mode=mode, pending_mode=pending, instances=instances, memory_slices=slices)

    def _mig_instances(self, handle: Any, static: _Static,
                       gi_vms: dict[int, str]) -> tuple[tuple[MigInstance, ...], int]:
        profiles = static.mig_profiles.get(1)
        if profiles is None:
            profiles = static.mig_profiles[1] = nvml_mig.gi_profiles(handle, static.pci_device_id)
        names = {p.profile_id: p.name for p in profiles}
        slices = max((s + n for p in profiles for s, n in p.placements), default=0)
        uuids = nvml_mig.mig_device_uuids(handle)
        out = []
        for gi in nvml_mig.gpu_instances(handle, profiles):
            ci_profiles = static.ci_profiles.get(gi.profile_id)
            if ci_profiles is None:
                ci_profiles = static.ci_profiles[gi.profile_id] = nvml_mig.ci_profiles(gi.handle)
            ci_names = {c.profile_id: c.name for c in ci_profiles}
            cis = nvml_mig.compute_instances(gi.handle, ci_profiles)
            uuid = next((uuids[(gi.gi_id, c.ci_id)] for c in cis if (gi.gi_id, c.ci_id) in uuids), None)
            out.append(MigInstance(profile=names.get(gi.profile_id, str(gi.profile_id)), start=gi.start,
                                   size=gi.size, uuid=uuid, vm=gi_vms.get(gi.gi_id), gi_id=gi.gi_id,
                                   profile_id=gi.profile_id,
                                   compute_instances=tuple(ci_names.get(c.profile_id, "") for c in cis)))
        return tuple(out), slices

    # -- vGPU -----------------------------------------------------------------------------------------
    def _vgpu_type(self, type_id: int) -> tuple[str, Metric]:
        if type_id not in self._vgpu_types:
            name = nvml_call(pynvml.nvmlVgpuTypeGetName, type_id)
            fb = nvml_call(pynvml.nvmlVgpuTypeGetFramebufferSize, type_id)
            self._vgpu_types[type_id] = (nvml_text(name) if name not in (NA, None) else str(type_id),
                                         fb // MIB if isinstance(fb, int) else fb)
        return self._vgpu_types[type_id]

    def _vgpu(self, handle: Any, static: _Static) -> tuple[tuple[VgpuType, ...], tuple[VgpuInstance, ...],
                                                            dict[int, str]]:
        """Types offered, instances running, and GPU instance id → VM id for MIG-backed vGPUs."""
        supported = nvml_call(pynvml.nvmlDeviceGetSupportedVgpus, handle)
        if not isinstance(supported, list):
            return (), (), {}
        creatable = nvml_call(pynvml.nvmlDeviceGetCreatableVgpus, handle)
        creatable = set(creatable) if isinstance(creatable, list) else set()
        active = nvml_call(pynvml.nvmlDeviceGetActiveVgpus, handle)
        active = active if isinstance(active, list) else []
        instances: list[VgpuInstance] = []
        running: dict[int, int] = {}  # vGPU type id → instances running
        gi_vms: dict[int, str] = {}
        for inst in active:
            type_id = nvml_call(pynvml.nvmlVgpuInstanceGetType, inst)
            running[type_id] = running.get(type_id, 0) + 1
            mdev = nvml_call(pynvml.nvmlVgpuInstanceGetMdevUUID, inst)
            uuid = mdev if isinstance(mdev, (str, bytes)) and mdev and mdev != NA else nvml_call(
                pynvml.nvmlVgpuInstanceGetUUID, inst)
            vm = nvml_call(pynvml.nvmlVgpuInstanceGetVmID, inst)
            vm_id = nvml_text(vm[0]) if isinstance(vm, tuple) and vm[0] else None
            instances.append(VgpuInstance(
                uuid=nvml_text(uuid) if uuid not in (NA, None) else str(inst),
                type_name=self._vgpu_type(type_id)[0] if isinstance(type_id, int) else "",
                parent=static.address, vm=vm_id))
            gi_id = nvml_call(pynvml.nvmlVgpuInstanceGetGpuInstanceId, inst)
            if isinstance(gi_id, int) and gi_id != 0xFFFFFFFF and vm_id:
                gi_vms[gi_id] = vm_id
        types = []
        for type_id in supported:
            name, fb = self._vgpu_type(type_id)
            if type_id not in static.vgpu_max:
                static.vgpu_max[type_id] = nvml_call(pynvml.nvmlVgpuTypeGetMaxInstances, handle, type_id)
            most = static.vgpu_max[type_id]
            available = (most - running.get(type_id, 0) if isinstance(most, int) else None) \
                if type_id in creatable else 0
            types.append(VgpuType(id=str(type_id), name=name, available=available,
                                  max_instances=most if isinstance(most, int) else None,
                                  framebuffer_mib=fb if isinstance(fb, int) else None, via="nvml",
                                  parent=static.address))
        return tuple(types), tuple(instances), gi_vms

    # -- processes ------------------------------------------------------------------------------------
    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        found: dict[int, GpuProcess] = {}
        for kind, fn in (("compute", pynvml.nvmlDeviceGetComputeRunningProcesses),
                         ("graphics", pynvml.nvmlDeviceGetGraphicsRunningProcesses)):
            procs = nvml_call(fn, handle)
            for p in procs if isinstance(procs, list) else []:
                if p.pid in found:
                    old = found[p.pid]
                    found[p.pid] = GpuProcess(old.pid, old.name, old.used_memory_mib, "compute+graphics")
                    continue
                name = nvml_call(pynvml.nvmlSystemGetProcessName, p.pid)
                used = NA if p.usedGpuMemory is None else p.usedGpuMemory // MIB
                found[p.pid] = GpuProcess(pid=p.pid, name=nvml_text(name) if name not in (NA, None) else "",
                                          used_memory_mib=used, kind=kind)
        return tuple(sorted(found.values(), key=lambda p: p.pid))



def _persistence(mode: Metric) -> Metric:
    """nvmlDeviceGetPersistenceMode's answer as "enabled"/"disabled" (NA and None pass through)."""
    if isinstance(mode, int):
        return "enabled" if mode == pynvml.NVML_FEATURE_ENABLED else "disabled"
    return mode if mode == NA else None


def read_nvml(lib: object | None = None) -> NvmlData:
    """One-shot read: initialise, read every GPU, shut down."""
    source = NvmlSource(lib)
    try:
        return source.read()
    finally:
        source.close()
