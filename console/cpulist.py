"""Linux CPU list syntax ("0-3,8,10-11"), strict: bad input raises ValueError with the reason."""
from __future__ import annotations

import re
from collections.abc import Iterable

_PART = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")  # ASCII digits only
MAX_CPUS = 1 << 16


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a cpulist into a sorted tuple. Empty string → (). Raises ValueError on anything else."""
    text = text.strip()
    if not text:
        return ()
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = _PART.match(part)
        if not m:
            raise ValueError(f"bad CPU list {text!r}: {part!r} is not a number or a range a-b")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"bad CPU list {text!r}: range {part!r} runs backwards")
        if hi >= MAX_CPUS:
            raise ValueError(f"bad CPU list {text!r}: CPU {hi} is out of range")
        cpus.update(range(lo, hi + 1))
    return tuple(sorted(cpus))


def parse_cpumask(text: str) -> tuple[int, ...]:
    """Parse a sysfs hex mask ("00000000,0000ff00") into CPU ids."""
    text = text.strip().replace(",", "")
    if not text:
        return ()
    value = int(text, 16)
    out, i = [], 0
    while value:
        if value & 1:
            out.append(i)
        value >>= 1
        i += 1
    return tuple(out)


def format_cpulist(cpus: Iterable[int]) -> str:
    """(0,1,2,5) → "0-2,5"."""
    ids = sorted(set(cpus))
    if not ids:
        return ""
    out, start, prev = [], ids[0], ids[0]
    for c in ids[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(out)
