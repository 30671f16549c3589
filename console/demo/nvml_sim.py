"""A simulated libnvidia-ml: a Python object placed as `pynvml.nvmlLib` so the real pynvml wrappers run on
top of it (two-call size patterns, versioned structs, return code → exception mapping all unchanged).

The GPUs come from an nvml.json state (docs/demo-host.md). Every C symbol is a method named `c_<symbol>`;
`__getattr__` hands pynvml a callable for it and raises AttributeError for unknown symbols, which pynvml
reports as NVMLError_FunctionNotFound, exactly as against an older driver.

Behaviour kept from the real library: C int return codes, UNINITIALIZED before nvmlInit (init is
reference counted), INVALID_ARGUMENT for bad handles/indices, NOT_SUPPORTED per metric, GPU_IS_LOST,
GPUs visible only while bound to the nvidia driver (when given a root), MIG and vGPU rules. The state file
(changes another process wrote) and the driver links are looked at once per burst of calls, as a client
reads its GPUs, rather than once per call: a change is seen from the next burst on. Arguments are
checked like the ABI needs them (see nvml_abi): a struct by value where a pointer belongs raises
`NvmlAbiError` instead of returning a code, because against the real library that call crashes.
"""
from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
from pynvml import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_SUCCESS,
)

from nodeconsole.console.demo.nvml_abi import (
    ERROR_STRINGS,
    NvmlAbiError,
    NvmlReturn,
    handle_value,
)
from nodeconsole.console.demo.nvml_sim_base import KIND_CI, KIND_DEVICE, KIND_GI, KIND_MIG, Target
from nodeconsole.console.demo.nvml_sim_board import BoardSymbols
from nodeconsole.console.demo.nvml_sim_ci import MigComputeSymbols
from nodeconsole.console.demo.nvml_sim_device import DeviceSymbols
from nodeconsole.console.demo.nvml_sim_health import HealthSymbols
from nodeconsole.console.demo.nvml_sim_metrics import METRIC_SYMBOLS
from nodeconsole.console.demo.nvml_sim_mig import MigSymbols
from nodeconsole.console.demo.nvml_sim_system import SystemSymbols
from nodeconsole.console.demo.nvml_sim_vgpu import VgpuSymbols
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root

__all__ = ["SimulatedNvml", "NvmlAbiError", "install", "uninstall", "METRIC_SYMBOLS"]

_NO_INIT = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlInit", "nvmlErrorString"}
_DEVICE_T = pynvml.c_nvmlDevice_t
_VOIDP = ctypes.c_void_p.from_buffer
# A burst: calls that follow each other closely (a client reading its GPUs). The state file and the
# driver links are looked at once a burst, not once a call; a burst starts at these calls (the start of
# every client's reading), after a gap of BURST_GAP_S between two calls, and at least every BURST_MAX_S.
_BURST_START = {"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByPciBusId_v2",
                "nvmlDeviceGetHandleByUUID"}
BURST_GAP_S = 0.001
BURST_MAX_S = 0.05
# A lost GPU still has a handle and the PCI identity the driver probed at boot; nothing else answers.
_LOST_OK = {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetPciInfo_v3",
            "nvmlDeviceGetPciInfo_v2", "nvmlDeviceIsMigDeviceHandle"}


def install(lib: object) -> None:
    """Put `lib` underneath pynvml, replacing whatever library (real or simulated) was there."""
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()


def uninstall() -> None:
    """Forget the installed library: the next nvmlInit loads libnvidia-ml.so.1 again."""
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlLib_refcount = 0


@dataclass
class _Fault:
    symbol: str  # C symbol or "*"
    code: int
    after: int  # matching calls that still succeed first
    times: int | None  # how many calls fail, None = all following
    address: str | None
    seen: int = 0
    fired: int = 0


class _CFunction:
    """What pynvml gets for a symbol: callable, and accepts attribute assignment (pynvml sets
    `.restype` on nvmlErrorString)."""

    def __init__(self, sim: SimulatedNvml, name: str, impl: Callable[..., Any]) -> None:
        self._sim, self._name, self._impl = sim, name, impl
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None
        self.__name__ = name

    def __call__(self, *args: Any) -> Any:
        sim = self._sim
        with sim._lock:  # SimulatedNvml._dispatch, one frame less on every call
            return sim._dispatch_locked(self._name, self._impl, args)


class SimulatedNvml(SystemSymbols, DeviceSymbols, HealthSymbols, BoardSymbols, MigSymbols, MigComputeSymbols,
                    VgpuSymbols):
    """The simulated library. `state` is a dict or the path of an nvml.json file (changes to MIG are then
    written back atomically and changes by other processes are picked up). `root`: GPUs are visible only
    while root/sys/bus/pci/devices/ADDR/driver points at `nvidia`. `clock` drives utilization (defaults to
    time.time). `privileged`: whether the caller is root (MIG changes need it); None reads the state's
    "privileged" key (default False)."""

    _name = "simulated libnvidia-ml"

    def __init__(self, state: dict[str, Any] | str | os.PathLike[str], root: Root | str | None = None,
                 clock: Callable[[], float] | None = None, privileged: bool | None = None) -> None:
        self.path: Path | None = None
        self._stamp: tuple[int, int] | None = None
        if isinstance(state, dict):
            self.state = state
        else:
            self.path = Path(state)
            self.state = self._read_file()
        self.root = Root(root) if isinstance(root, (str, os.PathLike)) else root
        self.clock = clock or time.time
        self._privileged = privileged
        self._refcount = 0
        self._enum = []  # state positions of the GPUs enumerated at init, in NVML order
        self._faults: list[_Fault] = []
        self._lost: set[str] = set()  # set_lost() marks, kept apart from the state so reloads keep them
        self._canon: dict[str, str] = {}  # a state's address spelling → its canonical form
        self._driver_links: dict[str, str] = {}  # a state's address spelling → the path of its driver link
        self.init_error: int | None = None  # whole-library failure returned by nvmlInit
        self.calls: Counter[str] = Counter()  # C symbol → number of calls (tests check caching)
        # one call at a time, like the driver's own locking (a poller and an action may share us)
        self._lock = threading.RLock()
        # the burst this call belongs to (see _BURST_START): when the last call came, when the current
        # burst began, and what its first look found (None: not looked yet in this burst)
        self._last_call = float("-inf")
        self._burst_at = float("-inf")
        self._burst_stamp_checked = False
        self._seen_links: dict[str, bool] = {}  # a state's address spelling → visible, this burst

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], root: Root | str | None = None,
                  clock: Callable[[], float] | None = None,
                  privileged: bool | None = None) -> SimulatedNvml:
        """A library serving (and persisting to) the nvml.json at `path`."""
        return cls(Path(path), root=root, clock=clock, privileged=privileged)

    # -- installation -------------------------------------------------------------------------------
    def install(self) -> SimulatedNvml:
        install(self)
        return self

    def uninstall(self) -> None:
        if pynvml.nvmlLib is self:
            uninstall()

    @property
    def privileged(self) -> bool:
        if self._privileged is not None:
            return self._privileged
        return bool(self.state.get("privileged", False))

    @privileged.setter
    def privileged(self, value: bool) -> None:
        self._privileged = value

    # -- fault injection ----------------------------------------------------------------------------
    def fail_next(self, symbol: str, code: int, address: str | None = None) -> None:
        """The next call of `symbol` (on the GPU at `address`, if given) returns `code`."""
        self.fail_on(symbol, code, after=0, times=1, address=address)

    def fail_on(self, symbol: str, code: int, after: int = 0, times: int | None = None,
                address: str | None = None) -> None:
        """After `after` successful matching calls, `symbol` ("*" = any) returns `code` — `times` times,
        or for good when None."""
        addr = parse_pci_address(address) if address else None
        self._faults.append(_Fault(symbol, code, after, times, addr))

    def clear_faults(self) -> None:
        self._faults.clear()
        self.init_error = None

    def set_no_driver(self, code: int | None = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND) -> None:
        """Whole-library failure: nvmlInit returns `code` (LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED,
        NO_PERMISSION, ...). None restores the driver."""
        self.init_error = code

    def set_lost(self, address: str, lost: bool = True) -> None:
        """Mark one GPU fallen off the bus (or recovered): its calls answer GPU_IS_LOST. The state's
        "lost" key does the same from the file."""
        addr = parse_pci_address(self.gpu_state(address)["address"])
        if lost:
            self._lost.add(addr)
        else:
            self._lost.discard(addr)
            self.gpu_state(address)["lost"] = False

    # -- state ----------------------------------------------------------------------------------------
    def gpu_state(self, address: str) -> dict[str, Any]:
        """The state dict of the GPU at `address` (any PCI address spelling); KeyError when unknown."""
        want = parse_pci_address(address)
        for gpu in self.state.get("gpus", []):
            if parse_pci_address(gpu["address"]) == want:
                return gpu
        raise KeyError(address)

    def save(self) -> None:
        """Write the state back to its file (whole or not at all); no-op for dict states."""
        if self.path is None:
            return
        from nodeconsole.console.demo.host import write_nvml_state

        write_nvml_state(self.path, self.state)
        self._stamp = self._file_stamp()

    def _new_burst(self) -> None:
        """Look at the state file and the driver links again on their next use."""
        self._burst_stamp_checked = False
        self._seen_links.clear()

    def _burst_reload(self) -> None:
        """reload_if_changed, once a burst."""
        if not self._burst_stamp_checked:
            self._burst_stamp_checked = True
            self.reload_if_changed()

    def reload_if_changed(self) -> bool:
        """Pick up a state file rewritten by another process (e.g. a MIG change made from the CLI)."""
        if self.path is None or self._file_stamp() == self._stamp:
            return False
        try:
            self.state = self._read_file()
        except (OSError, ValueError):
            return False  # unreadable right now: keep serving what we had
        return True

    def _read_file(self) -> dict[str, Any]:
        assert self.path is not None
        with open(self.path) as f:
            data = json.load(f)
        self._stamp = self._file_stamp()
        return data

    def _file_stamp(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _visible(self, gpu: dict[str, Any]) -> bool:
        if self.root is None:
            return True
        # Checked once a burst of calls (a rebind shows from the next burst on), so the link path is
        # built once per GPU: pathlib joins per call were most of the simulator's cost.
        raw = gpu["address"]
        seen = self._seen_links.get(raw)
        if seen is not None:
            return seen
        path = self._driver_links.get(raw)
        if path is None:
            path = self._driver_links[raw] = str(self.root.p(f"sys/bus/pci/devices/{self._canonical(raw)}/driver"))
        try:
            seen = os.readlink(path).rpartition("/")[2] == "nvidia"  # the link's last component
        except OSError:
            seen = False
        self._seen_links[raw] = seen
        return seen

    def _canonical(self, raw: str) -> str:
        """parse_pci_address of a state's address, remembered per spelling (asked for once a burst of
        calls, and when a GPU is marked lost)."""
        canon = self._canon.get(raw)
        if canon is None:
            canon = self._canon[raw] = parse_pci_address(raw)
        return canon

    def _enumerate(self) -> list[int]:
        gpus = self.state.get("gpus", [])
        # NVML orders devices by PCI bus id
        order = sorted(range(len(gpus)), key=lambda i: parse_pci_address(gpus[i]["address"]))
        return [i for i in order if self._visible(gpus[i])]

    # -- dispatch -------------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        impl = getattr(type(self), "c_" + name, None)
        if impl is None:
            raise AttributeError(name)  # pynvml: NVMLError_FunctionNotFound
        return _CFunction(self, name, impl)

    def _dispatch(self, name: str, impl: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        with self._lock:
            return self._dispatch_locked(name, impl, args)

    def _dispatch_locked(self, name: str, impl: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.calls[name] += 1
        now = time.monotonic()
        if now - self._last_call > BURST_GAP_S or now - self._burst_at > BURST_MAX_S or name in _BURST_START:
            self._burst_at = now
            self._new_burst()
        self._last_call = now
        code = self._injected(name, args) if self._faults else None
        if code is not None:
            return code
        if name not in _NO_INIT and self._refcount == 0:
            return NVML_ERROR_UNINITIALIZED
        try:
            result = impl(self, *args)
        except NvmlReturn as r:
            return r.code
        return NVML_SUCCESS if result is None else result

    def _injected(self, name: str, args: tuple[Any, ...]) -> int | None:
        for f in self._faults:
            if f.symbol not in (name, "*"):
                continue
            if f.address is not None and self._call_address(name, args) != f.address:
                continue
            f.seen += 1
            if f.seen > f.after and (f.times is None or f.fired < f.times):
                f.fired += 1
                return f.code
        return None

    def _call_address(self, name: str, args: tuple[Any, ...]) -> str | None:
        """Best effort: the GPU a call is about, for address-filtered faults."""
        gpus = self.state.get("gpus", [])
        try:
            if name == "nvmlDeviceGetHandleByIndex_v2":
                return parse_pci_address(gpus[self._enum[int(getattr(args[0], "value", args[0]))]]["address"])
            value = handle_value(args[0], name, 1) if args else None
        except (NvmlAbiError, IndexError, TypeError, ValueError):
            return None
        if value is None or (value >> 24) not in (KIND_DEVICE, KIND_MIG, KIND_GI, KIND_CI):
            return None
        pos = (value >> 16) & 0xFF
        return parse_pci_address(gpus[pos]["address"]) if pos < len(gpus) else None

    # -- handles (their encoding is NvmlSimBase's) ------------------------------------------------------
    def _target(self, handle: Any, symbol: str, allow_mig: bool = False) -> Target:
        """Resolve a device handle argument (position 1) to its GPU, applying lost/visibility/
        not-supported rules. MIG device handles answer NOT_SUPPORTED unless `allow_mig`."""
        # a ctypes pointer's address read straight from its buffer (as handle_value's cast, cheaper)
        value = _VOIDP(handle).value if type(handle) is _DEVICE_T else handle_value(handle, symbol, 1)
        if value is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        # the driver's state is shared by every process: see changes another one wrote (a stat a burst)
        if not self._burst_stamp_checked:
            self._burst_reload()
        kind, pos = value >> 24, (value >> 16) & 0xFF
        if kind not in (KIND_DEVICE, KIND_MIG) or pos not in self._enum:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.state["gpus"][pos]
        if symbol not in _LOST_OK:
            self._check_alive(gpu, symbol)
        if kind == KIND_DEVICE:
            if value & 0xFFFF:
                raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)
            self._check_supported(gpu, symbol)
            return Target(gpu, pos)
        gi_id, ci_id = (value >> 8) & 0xFF, value & 0xFF
        if self._find_ci(gpu, gi_id, ci_id) is None:
            raise NvmlReturn(NVML_ERROR_INVALID_ARGUMENT)  # the MIG device was destroyed
        if not allow_mig:
            raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)
        self._check_supported(gpu, symbol)
        return Target(gpu, pos, gi_id, ci_id)

    def _check_alive(self, gpu: dict[str, Any], symbol: str) -> None:
        # a GPU taken away from the nvidia driver after init is gone for this NVML session
        lost = gpu.get("lost") or (self._lost and self._canonical(gpu["address"]) in self._lost)
        if symbol not in _LOST_OK and (lost or not self._visible(gpu)):
            raise NvmlReturn(NVML_ERROR_GPU_IS_LOST)

    def _check_supported(self, gpu: dict[str, Any], symbol: str) -> None:
        for item in gpu.get("not_supported", ()):
            if item == symbol or symbol in METRIC_SYMBOLS.get(item, ()):
                raise NvmlReturn(NVML_ERROR_NOT_SUPPORTED)

    def _find_ci(self, gpu: dict[str, Any], gi_id: int, ci_id: int) -> dict[str, Any] | None:
        for gi in (gpu.get("mig") or {}).get("instances", []):
            if gi["gi_id"] == gi_id:
                return next((c for c in gi.get("compute_instances", []) if c["ci_id"] == ci_id), None)
        return None

    # -- library lifetime (the system queries are in nvml_sim_system) ---------------------------------
    def c_nvmlInitWithFlags(self, flags: Any) -> int:
        if self.init_error is not None:
            return self.init_error
        if self._refcount == 0:
            self._new_burst()
            self.reload_if_changed()
            self._enum = self._enumerate()
        self._refcount += 1
        return NVML_SUCCESS

    def c_nvmlInit_v2(self) -> int:
        return self.c_nvmlInitWithFlags(0)

    def c_nvmlShutdown(self) -> int:
        self._refcount -= 1
        return NVML_SUCCESS

    def c_nvmlErrorString(self, code: Any) -> bytes:
        code = int(getattr(code, "value", code))
        return ERROR_STRINGS.get(code, "Unknown Error").encode()
