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
    """The object behind an output pointer (`byref(x)` or `pointer(x)`), None when NULL, seen as `ctype`
    (the first of a tuple). The C library only sees memory: a caller's own struct class is accepted when
    its size and field layout are the expected type's (nvitop declares its own copies of NVML's structs),
    and the library then writes through a view of the expected type over the caller's memory; a struct of
    another size or layout is refused, since the library would write past it or into the wrong fields.
    Integer outputs accept any ctypes integer of the same size."""
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
    wants = ctype if isinstance(ctype, tuple) else (ctype,)
    if isinstance(obj, wants):
        return obj
    for want in wants:
        if same_layout(want, type(obj)):
            return view_as(obj, want)
    want = wants[0]
    raise NvmlAbiError(f"{symbol}: argument {pos} must point to {want.__name__} ({ctypes.sizeof(want)} bytes), "
                       f"got a pointer to {_describe(obj)} ({ctypes.sizeof(obj)} bytes"
                       f"{'' if ctypes.sizeof(obj) != ctypes.sizeof(want) else ', another layout'})")


def view_as(obj: Any, want: Any) -> Any:
    """`obj`'s memory seen as a `want` (a ctypes type of the same size): writes through it land in the
    caller's object."""
    return want.from_buffer(obj)


_LAYOUTS: dict[type, tuple[Any, ...]] = {}


def layout(t: type) -> tuple[Any, ...]:
    """What C sees of a ctypes type: its size and alignment, and per field its offset, bit layout and the
    layout of its type; names and Python classes do not count, nor signedness (the bytes are the same)."""
    got = _LAYOUTS.get(t)
    if got is not None:
        return got
    size, align = ctypes.sizeof(t), ctypes.alignment(t)
    if issubclass(t, (ctypes.Structure, ctypes.Union)):
        fields = tuple((getattr(t, f[0]).offset, getattr(t, f[0]).size, layout(f[1]))
                       for f in getattr(t, "_fields_", ()))
        out: tuple[Any, ...] = ("union" if issubclass(t, ctypes.Union) else "struct", size, align, fields)
    elif issubclass(t, ctypes.Array):
        arr: Any = t  # typeshed knows _type_/_length_ on concrete array types only
        out = ("array", size, arr._length_, layout(arr._type_))
    elif issubclass(t, (ctypes._Pointer, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p)):
        out = ("pointer", size)
    elif getattr(t, "_type_", None) in ("f", "d", "g"):
        out = ("float", size)
    else:
        out = ("scalar", size)  # integers, char, bool: bytes the library writes as an integer
    _LAYOUTS[t] = out
    return out


def same_layout(a: type, b: type) -> bool:
    """Whether C would treat a `b` exactly like an `a` (see layout)."""
    return a is b or layout(a) == layout(b)


def out_handle(arg: Any, ptr_type: type, symbol: str, pos: int) -> Any:
    """The handle variable behind `byref(handle)`; the caller writes an address into it."""
    obj = out_ref(arg, ptr_type, symbol, pos)
    if obj is None:
        raise NvmlReturn(2)  # NVML_ERROR_INVALID_ARGUMENT: NULL output pointer
    return obj


def set_handle(obj: Any, value: int) -> None:
    ctypes.c_void_p.from_buffer(obj).value = value


def out_array(arg: Any, elem_type: type, symbol: str, pos: int) -> Any:
    """A caller-allocated array (`(T * n)()`, passed as is or by reference); None for NULL. Elements of
    the caller's own type are accepted when their layout is `elem_type`'s (seen through a view)."""
    if arg is None:
        return None
    obj = getattr(arg, "_obj", arg) if type(arg).__name__ == "CArgObject" else arg
    if isinstance(obj, ctypes.Array) and issubclass(obj._type_, elem_type):
        return obj
    if isinstance(obj, ctypes.Array) and same_layout(elem_type, obj._type_):
        elem: Any = elem_type
        return view_as(obj, elem * len(obj))
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
