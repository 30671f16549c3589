"""NVML's NVLink and fabric facts of a GPU, read on the slow cadence (console/sources/nvml.py): the
clock-event reasons, each link's remote end (once per NVML session), state and error counters, and the
GPU's place in the NVLink fabric."""
from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from typing import Any

import pynvml

from nodeconsole.console.model import NA, Metric, NvLink, clock_event_names
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.sources.nvml_calls import GpuLost, nvml_call, nvml_text

LinkEnd = tuple[int, Metric, str | None, str]  # (link, version, remote PCI address, remote type)

# NVML_FI_DEV_NVLINK_GET_STATE and its answers (NVML_NVLINK_STATE_*): numbers of the library's ABI,
# spelt out because nvidia-ml-py releases before 12.570 lack the names (the driver may still know the
# field; one that does not answers it NOT_SUPPORTED or INVALID_ARGUMENT). Up: active (1) or asleep in
# its low-power state (2); inactive (0) and active with its traffic disabled (3) carry nothing.
_FI_LINK_STATE = 165
_LINK_UP = (1, 2)
_FIELD_UNKNOWN = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)

_REMOTE_TYPES = {pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu", pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: "ibmnpu",
                 pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch"}
_NVLINK_COUNTERS = (("replay", pynvml.NVML_NVLINK_ERROR_DL_REPLAY), ("recovery", pynvml.NVML_NVLINK_ERROR_DL_RECOVERY),
                    ("crc_flit", pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT), ("crc_data", pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA))
_FABRIC_STATES = {pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: NA, pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED: "not started",
                  pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS: "in progress",
                  pynvml.NVML_GPU_FABRIC_STATE_COMPLETED: "completed"}


def clock_events(handle: Any) -> tuple[str, ...] | str | None:
    try:
        mask = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except pynvml.NVMLError_FunctionNotFound:  # drivers before 535 know the older name only
        mask = nvml_call(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
    except pynvml.NVMLError_GpuIsLost:
        raise GpuLost() from None
    except pynvml.NVMLError_NotSupported:
        return NA
    except pynvml.NVMLError:
        return None
    return clock_event_names(mask) if isinstance(mask, int) else mask


def link_ends(handle: Any) -> tuple[LinkEnd, ...] | str | None:
    """Every NVLink the GPU has (links are numbered from 0 until NVML says there is no such link) with
    its version and remote end; NA when the GPU has no NVLink."""
    out: list[LinkEnd] = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError_GpuIsLost:
            raise GpuLost() from None
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            return tuple(out) if out else NA
        except pynvml.NVMLError_InvalidArgument:
            break  # past the GPU's last link
        except pynvml.NVMLError:
            return None
        pci = nvml_call(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        try:
            remote = parse_pci_address(nvml_text(pci.busId)) if pci not in (NA, None) else None
        except ValueError:
            remote = None
        kind = nvml_call(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        out.append((link, nvml_call(pynvml.nvmlDeviceGetNvLinkVersion, handle, link), remote,
                    _REMOTE_TYPES.get(kind, "") if isinstance(kind, int) else ""))
    return tuple(out) if out else NA


def fabric(handle: Any) -> dict[str, Metric]:
    """The GPU's state in the NVLink fabric (Hopper and later; NA before)."""
    info: Any = pynvml.c_nvmlGpuFabricInfo_v2_t()
    got = nvml_call(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info))
    if got is NA:  # a driver without the versioned call (before 550) may still have the first one
        info = pynvml.c_nvmlGpuFabricInfo_t()
        got = nvml_call(pynvml.nvmlDeviceGetGpuFabricInfo, handle, ctypes.byref(info))
    if got in (NA, None):
        return dict(fabric_state=got, fabric_status=got, fabric_clique_id=got)
    state = _FABRIC_STATES.get(int(info.state), f"state {int(info.state)}")
    if state == NA:
        return dict(fabric_state=NA, fabric_status=NA, fabric_clique_id=NA)
    status = "ok" if int(info.status) == pynvml.NVML_SUCCESS else nvml_text(
        pynvml.nvmlErrorString(int(info.status)))
    return dict(fabric_state=state, fabric_status=status, fabric_clique_id=int(info.cliqueId))


class NvLinkReader:
    """Each link's state every slow read (in one field-values call where the driver can), its error
    counters (four a link, cumulative) every `counters_s`."""

    def __init__(self, counters_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.counters_s = counters_s
        self._clock = clock
        self._link_counts: dict[str, tuple[float, dict[int, dict[str, Metric]]]] = {}
        self.fi_link_state = True  # the links' states in one field-values call (else one call a link)

    def forget(self) -> None:
        """Read every counter again at the next read."""
        self._link_counts.clear()

    def read(self, handle: Any, address: str, ends: tuple[LinkEnd, ...]) -> tuple[NvLink, ...]:
        """The links `ends` lists (link_ends), each with its state and counters."""
        now = self._clock()
        cached = self._link_counts.get(address)
        fresh = cached is not None and now - cached[0] < self.counters_s
        counts: dict[int, dict[str, Metric]] = dict(cached[1]) if fresh and cached is not None else {}
        links = []
        states = self._link_states(handle, [end[0] for end in ends])
        for link, version, remote, kind in ends:
            if states is not None:
                active = states[link]
            else:
                state = nvml_call(pynvml.nvmlDeviceGetNvLinkState, handle, link)
                active = state == pynvml.NVML_FEATURE_ENABLED
            if not active:
                counters: dict[str, Metric] = {name: None for name, _ in _NVLINK_COUNTERS}
                counts.pop(link, None)
            elif link in counts:
                counters = counts[link]
            else:
                counters = counts[link] = {
                    name: nvml_call(pynvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, c)
                    for name, c in _NVLINK_COUNTERS}
            links.append(NvLink(link=link, active=active, version=version, remote=remote, remote_type=kind,
                                **counters))
        self._link_counts[address] = (cached[0] if fresh and cached is not None else now, counts)
        return tuple(links)

    def _link_states(self, handle: Any, links: list[int]) -> dict[int, bool] | None:
        """Whether each link is up, in one call (nvmlDeviceGetFieldValues, NVML_FI_DEV_NVLINK_GET_STATE
        scoped by link: 18 links a GPU are one call, not 18); None when the driver cannot answer so (an
        older one: then one nvmlDeviceGetNvLinkState a link, from now on) or did not this time. A link
        asleep (its low-power state) is up."""
        if not self.fi_link_state or not links:
            return None
        try:
            values = pynvml.nvmlDeviceGetFieldValues(handle, [(_FI_LINK_STATE, link) for link in links])
        except pynvml.NVMLError_GpuIsLost:
            raise GpuLost() from None
        except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported):
            self.fi_link_state = False
            return None
        except pynvml.NVMLError:
            return None
        states: dict[int, bool] = {}
        for link, value in zip(links, values):
            if value.nvmlReturn != pynvml.NVML_SUCCESS:
                if value.nvmlReturn == pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise GpuLost()
                if value.nvmlReturn in _FIELD_UNKNOWN:  # a driver that does not know the field
                    self.fi_link_state = False
                return None
            states[link] = value.value.uiVal in _LINK_UP
        return states
