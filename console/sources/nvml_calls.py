"""How the NVML source calls NVML: one read answers a value, NA when the driver does not support it, None
on another error, and raises GpuLost when the GPU answered GPU_IS_LOST; text and unit conversions."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from nodeconsole.console.model import NA, Metric

MIB = 1024 * 1024


class GpuLost(Exception):
    """The GPU answered GPU_IS_LOST: stop reading it."""


def nvml_text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def watts(milliwatts: Metric) -> Metric:
    if not isinstance(milliwatts, int):
        return milliwatts
    w = milliwatts / 1000
    return int(w) if w == int(w) else round(w, 1)


def nvml_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One NVML read: the value, NA when not supported, None on any other error; GPU_IS_LOST raises."""
    try:
        return fn(*args, **kwargs)
    except pynvml.NVMLError_GpuIsLost:
        raise GpuLost() from None
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound,
            pynvml.NVMLLibraryMismatchError):
        return NA
    except pynvml.NVMLError:
        return None
