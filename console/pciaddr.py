"""PCI addresses: strict parsing and canonical form DDDD:BB:DD.F (domain may be wider, e.g. 10000)."""
from __future__ import annotations

import re

_FULL = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")
_SHORT = re.compile(r"^([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def parse_pci_address(text: str) -> str:
    """Canonical address or ValueError with the reason. Accepts `BB:DD.F` (domain 0) and NVML's
    8-digit domain form `00000000:17:00.0`."""
    t = text.strip()
    m = _FULL.match(t)
    if m:
        dom, bus, dev, fn = int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4))
    else:
        m = _SHORT.match(t)
        if not m:
            raise ValueError(f"{text!r} is not a PCI address (expected DDDD:BB:DD.F, e.g. 0000:17:00.0)")
        dom, bus, dev, fn = 0, int(m.group(1), 16), int(m.group(2), 16), int(m.group(3))
    if dev > 0x1F:
        raise ValueError(f"{text!r} is not a PCI address: device {dev:#x} is above 0x1f")
    return format_pci_address(dom, bus, dev, fn)


def format_pci_address(domain: int, bus: int, device: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def is_pci_address(text: str) -> bool:
    try:
        parse_pci_address(text)
        return True
    except ValueError:
        return False
