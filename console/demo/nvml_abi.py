"""The C boundary of the simulated NVML library: how arguments arrive from pynvml and how results are
written back, checked the way the real ABI needs them.

A C function cannot tell a struct passed by value from a pointer; the real library then reads garbage and
the process crashes. The simulator turns such calls into `NvmlAbiError` (a TypeError): a programming
error should fail loudly in tests, not look like an ordinary NVML error code that a caller might handle
and retry.
"""
from __future__ import annotations

import ctypes
from typing import Any

# What nvmlErrorString answers for each return code.
ERROR_STRINGS: dict[int, str] = {
    0: "Success", 1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported",
    4: "Insufficient Permissions", 5: "Already Initialized", 6: "Not Found", 7: "Insufficient Size",
    8: "Insufficient External Power", 9: "Driver Not Loaded", 10: "Timeout", 11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found", 13: "Function Not Found", 14: "Corrupted infoROM",
    15: "GPU is lost", 16: "GPU requires restart", 17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.", 19: "In use by another client",
    20: "Insufficient Memory", 21: "No data", 22: "The requested vgpu operation is not available on "
    "target device, becasue ECC is enabled", 23: "Insufficient resources",
    24: "Frequency not supported", 25: "Argument version mismatch", 26: "Deprecated",
    27: "Not ready", 28: "GPU not found", 29: "Invalid state", 999: "Unknown Error",
}


class NvmlAbiError(TypeError):
    """An argument the real library could not have used (struct by value, wrong struct type, a buffer
    too small for what the library writes). Against libnvidia-ml this would corrupt memory or crash."""


class NvmlReturn(Exception):
    """Raised inside a simulated symbol to return an NVML error code from it."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _describe(arg: Any) -> str:
    return type(arg).__name__


def in_int(arg: Any, symbol: str, pos: int) -> int:
    """An integer passed by value: a Python int (ctypes passes it as C int) or a ctypes integer."""
    if isinstance(arg, bool):
        return int(arg)
    if isinstance(arg, int):
        return arg
    if isinstance(arg, ctypes._SimpleCData) and isinstance(arg.value, int):
        return arg.value
    raise NvmlAbiError(f"{symbol}: argument {pos} must be an integer passed by value, got {_describe(arg)}")


def in_str(arg: Any, symbol: str, pos: int) -> str | None:
    """A `const char *`: c_char_p, bytes, a char array or byref to one. None is NULL."""
    if arg is None:
        return None
    obj = getattr(arg, "_obj", arg)
    if isinstance(obj, bytes):
        return obj.decode()
    if isinstance(obj, ctypes.c_char_p):
        return None if obj.value is None else obj.value.decode()
    if isinstance(obj, ctypes.Array) and obj._type_ is ctypes.c_char:
        return obj.value.decode()
    raise NvmlAbiError(f"{symbol}: argument {pos} must be a C string, got {_describe(arg)}")


def handle_value(arg: Any, symbol: str, pos: int) -> int | None:
    """The address inside an opaque handle (a ctypes pointer passed by value); None for NULL."""
    if arg is None:
        return None
    if isinstance(arg, (ctypes._Pointer, ctypes.c_void_p)):
        return ctypes.cast(arg, ctypes.c_void_p).value
    raise NvmlAbiError(f"{symbol}: argument {pos} must be a handle (a ctypes pointer), got {_describe(arg)}")


def out_ref(arg: Any, ctype: type | tuple[type, ...], symbol: str, pos: int) -> Any:
    """The object behind an output pointer (`byref(x)` or `pointer(x)`), None when NULL. `ctype` is the
    expected ctypes type; integer outputs accept any ctypes integer (the library writes through it)."""
    if arg is None:
        return None
    if isinstance(arg, ctypes._Pointer):
        if not arg:
            return None
        obj = arg.contents
    elif type(arg).__name__ == "CArgObject" and hasattr(arg, "_obj"):
        obj = arg._obj
    else:
        raise NvmlAbiError(f"{symbol}: argument {pos} must be a pointer (ctypes.byref/pointer), got "
                           f"{_describe(arg)} by value; the real library would crash")
    if not isinstance(obj, ctype):
        want = ctype if isinstance(ctype, type) else ctype[0]
        if not (_is_int_type(want) and _is_int_ctype(obj)):
            raise NvmlAbiError(f"{symbol}: argument {pos} must point to {want.__name__}, "
                               f"got a pointer to {_describe(obj)}")
    return obj


def out_handle(arg: Any, ptr_type: type, symbol: str, pos: int) -> Any:
    """The handle variable behind `byref(handle)`; the caller writes an address into it."""
    obj = out_ref(arg, ptr_type, symbol, pos)
    if obj is None:
        raise NvmlReturn(2)  # NVML_ERROR_INVALID_ARGUMENT: NULL output pointer
    return obj


def set_handle(obj: Any, value: int) -> None:
    ctypes.c_void_p.from_buffer(obj).value = value


def out_array(arg: Any, elem_type: type, symbol: str, pos: int) -> Any:
    """A caller-allocated array (`(T * n)()`, passed as is or by reference); None for NULL."""
    if arg is None:
        return None
    obj = getattr(arg, "_obj", arg) if type(arg).__name__ == "CArgObject" else arg
    if isinstance(obj, ctypes.Array) and issubclass(obj._type_, elem_type):
        return obj
    if isinstance(obj, ctypes.Array) and _is_int_type(elem_type) and _is_int_type(obj._type_) \
            and ctypes.sizeof(obj._type_) == ctypes.sizeof(elem_type):
        return obj
    raise NvmlAbiError(f"{symbol}: argument {pos} must be an array of {elem_type.__name__}, got "
                       f"{_describe(obj)}")


def fill_array(arr: Any, values: list[Any], symbol: str) -> None:
    """Write `values` into a caller array, refusing to overrun it (the C library would)."""
    if len(arr) < len(values):
        raise NvmlAbiError(f"{symbol}: caller array holds {len(arr)} entries, the library writes "
                           f"{len(values)} (buffer overrun)")
    for i, v in enumerate(values):
        arr[i] = v


def write_str(buf: Any, text: str, length: int | None, symbol: str) -> None:
    """Copy `text` into a char buffer of declared `length` (NUL included); INSUFFICIENT_SIZE when short."""
    obj = getattr(buf, "_obj", buf) if type(buf).__name__ == "CArgObject" else buf
    if not (isinstance(obj, ctypes.Array) and obj._type_ is ctypes.c_char):
        raise NvmlAbiError(f"{symbol}: the output buffer must be a char array, got {_describe(obj)}")
    data = text.encode()
    declared = len(obj) if length is None else min(length, len(obj))
    if len(data) + 1 > declared:
        raise NvmlReturn(7)  # NVML_ERROR_INSUFFICIENT_SIZE
    obj.value = data


_INT_CODES = frozenset("bBhHiIlLqQ")  # the `_type_` codes of the ctypes integer types


def _is_int_type(t: type) -> bool:
    # typeshed declares `_type_` only on the concrete _SimpleCData subclasses: read it generically
    return isinstance(t, type) and issubclass(t, ctypes._SimpleCData) and getattr(t, "_type_", None) in _INT_CODES


def _is_int_ctype(obj: Any) -> bool:
    return _is_int_type(type(obj))
