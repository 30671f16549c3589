"""Strict argument types for the CLI: ASCII digits only (Python's int() and `\\d` also take "٤" or "４"),
numbers within range, finite positive durations. A bad value raises argparse.ArgumentTypeError (which
the CLI turns into its one-line usage error, exit 2) or ValueError for the plain parsers. `did_you_mean`
suggests the known name closest to a mistyped one (a VM, a GPU)."""
from __future__ import annotations

import argparse
import difflib
import math
import re
from collections.abc import Callable, Iterable

from nodeconsole.console.hosttext import visible

_ASCII_INT = re.compile(r"[0-9]+")
MAX_COUNT = 1 << 20  # GPUs per host, ranks, steps: far beyond any real machine


def ascii_int(text: str, what: str = "number") -> int:
    """A non-negative integer written in ASCII digits (surrounding blanks allowed); ValueError else."""
    t = text.strip()
    if not _ASCII_INT.fullmatch(t):
        raise ValueError(f"{text!r} is not a {what} (ASCII digits 0-9)")
    return int(t)


def count(lo: int = 0, hi: int = MAX_COUNT, what: str = "number") -> Callable[[str], int]:
    """An argparse type: an ASCII integer from `lo` to `hi`."""
    def parse(text: str) -> int:
        try:
            n = ascii_int(text, what)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{text.strip()} is out of range ({lo} to {hi})")
        return n
    parse.__name__ = what  # argparse names the type in its messages
    return parse


_SIZE = re.compile(r"([0-9]+)\s*([KMGT]i?B?)?", re.I)
_SIZE_KIB = {"K": 1, "M": 1 << 10, "G": 1 << 20, "T": 1 << 30}


def size_kib(text: str) -> int:
    """An argparse type: a memory size in KiB from `320G`, `327680M`, `1T`, `16GiB` (no unit: MiB, as
    qemu's -m counts); 0 and above 64 TiB refused."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (like 320G, 512M or 1T)")
    unit = (m.group(2) or "M")[0].upper()
    kib = int(m.group(1)) * _SIZE_KIB[unit]
    if not 0 < kib <= 64 << 30:
        raise argparse.ArgumentTypeError(f"{text.strip()!r}: a size above 0 and at most 64T")
    return kib


def positive_factor(text: str) -> float:
    """An argparse type: a finite factor above 0 and at most 64 (e.g. 2 or 2.5)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not text.strip().isascii() or not math.isfinite(value) or not 0 < value <= 64:
        raise argparse.ArgumentTypeError(f"{text.strip()!r}: expected a factor above 0 and at most 64")
    return value


def seconds(text: str) -> float:
    """An argparse type: a finite, positive number of seconds (not nan, inf, 0 or negative)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not text.strip().isascii() or not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text.strip()!r}: expected a positive, finite number of seconds")
    return value


def close_names(text: str, known: Iterable[str], limit: int = 3) -> list[str]:
    """The known names closest to a mistyped `text` (difflib's similarity, 0.6 at least), in the order of
    `known`: those with the best score, [] when none is close or more than `limit` are equally close
    (nothing stands out: every PCI address is close to a malformed one)."""
    names = list(dict.fromkeys(known))
    score = {n: difflib.SequenceMatcher(None, text, n).ratio() for n in names}
    best = max((v for v in score.values() if v >= 0.6), default=None)
    if best is None:
        return []
    found = [n for n in names if score[n] == best]
    return found if len(found) <= limit else []


def did_you_mean(text: str, known: Iterable[str]) -> str:
    """' (did you mean train-a?)' for a typo of a known name, '' when nothing is close. Every name
    goes through hosttext.visible: a name (typed or the host's) never reaches a terminal as control."""
    found = close_names(text, known)
    return f" (did you mean {' or '.join(visible(n) for n in found)}?)" if found else ""


SMI_PREFIX = "smi:"
_SMI = re.compile(r"smi:([0-9]+)", re.IGNORECASE)


def smi_index(text: str) -> int | None:
    """N of a GPU named `smi:N` (nvidia-smi's index, NVML's order: GPUs on vfio-pci have none), None when
    `text` is not of that form. ValueError for `smi:` followed by anything but ASCII digits."""
    t = text.strip()
    if not t.lower().startswith(SMI_PREFIX):
        return None
    m = _SMI.fullmatch(t)
    if m is None:
        raise ValueError(f"{visible(t)!r}: smi:N takes nvidia-smi's GPU index N (ASCII digits)")
    return int(m.group(1))
