"""How the sysfs source reads below a Root, and the tolerant value parsers it shares.

Malformed values parse to None: a garbled attribute in a captured tree must never stop the reading of
the rest of the host.
"""
from __future__ import annotations

import re

from nodeconsole.console.cpulist import parse_cpulist, parse_cpumask
from nodeconsole.console.pciaddr import is_pci_address, parse_pci_address
from nodeconsole.console.root import Root

# what sysfs itself writes: lower-case, 4+ digit domain (Intel VMD domains are 10000 and up)
_CANONICAL_PCI = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$")
PCI_COMPONENT = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class SysfsRoot(Root):
    """The Root seam as the sysfs source reads it: NUL padding dropped (some captured files end in
    "0-31\\n\\0"), unreadable directories (symlink loops) listed as empty, permission errors raised.
    Over a plain Root it reads with Root's own contained, bounded reads; a Root subclass with its own
    read/listdir/readlink is used as is."""

    def __init__(self, root: Root) -> None:
        super().__init__(root.path)
        self.inner = root
        self._pass = root._pass  # the same collection pass (Root.one_pass) as the root it wraps
        kind = type(root)
        self.fast = all(getattr(kind, m) is getattr(Root, m) for m in ("p", "read", "listdir", "readlink"))

    def read(self, rel: str) -> str | None:
        if not self.fast:
            text = self.inner.read(rel)
        else:  # Root's bounded, contained read of regular files
            data = Root.read_bytes(self, rel)
            text = None if data is None else data.decode("utf-8", "replace").strip()
        if text is not None and "\x00" in text:
            text = text.replace("\x00", "").strip()
        return text

    def listdir(self, rel: str) -> list[str]:
        try:
            if not self.fast:
                return self.inner.listdir(rel)
            return Root.listdir(self, rel)
        except PermissionError:
            raise
        except OSError:  # ELOOP, ENOENT, ENOTDIR: nothing to list
            return []

    def readlink(self, rel: str) -> str | None:
        if not self.fast:
            return self.inner.readlink(rel)
        return Root.readlink(self, rel)


def to_int(text: str | None, base: int = 10) -> int | None:
    if not text:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def to_cpulist(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def to_cpumask(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return parse_cpumask(text)
    except ValueError:
        return None


def canonical_pci(name: str | None) -> str | None:
    """Canonical PCI address, or None when `name` is not one."""
    if not name:
        return None
    if _CANONICAL_PCI.match(name):
        return name
    return parse_pci_address(name) if is_pci_address(name) else None


def pci_sort_key(address: str) -> tuple[int, ...]:
    dom, bus, rest = address.split(":")
    dev, fn = rest.split(".")
    return int(dom, 16), int(bus, 16), int(dev, 16), int(fn)
