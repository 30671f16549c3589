"""How the sysfs source reads below a Root, and the tolerant value parsers it shares.

Malformed values parse to None: a garbled attribute in a captured tree must never stop the reading of
the rest of the host.
"""
from __future__ import annotations

import os
import re
import stat

from nodeconsole.console.cpulist import parse_cpulist, parse_cpumask
from nodeconsole.console.pciaddr import is_pci_address, parse_pci_address
from nodeconsole.console.root import MAX_READ, Root, read_open

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW

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

    def _parent(self, rel: str) -> tuple[str, str] | None:
        """(the resolved directory of `rel`, its last component) through the pass's memory of resolved
        directories (Root.one_pass); None when no pass is open, below `/`, for a path that is not plain
        (`.`, `..`, empty components) and for one that leads out of the root: Root's own way then."""
        if self._whole:
            return None
        dirs = getattr(self._pass, "dirs", None)
        if dirs is None or not rel or rel[0] in "/." or "//" in rel or "/." in rel:
            return None
        head, _, name = rel.rpartition("/")
        if not name:
            return None
        parent = self._dir(dirs, head)
        return None if parent is None else (parent, name)

    def _dir(self, dirs: dict[str, str], rel: str) -> str | None:
        """The resolved directory `rel` (plain, relative) from the pass's memory, resolved and remembered
        there when missing (as Root's own resolution remembers the directories it walks through); None
        when it leads out of the root."""
        key = self._base + rel if rel else self._base[:-1]
        parent = dirs.get(key)
        if parent is None:
            parent = Root.resolve(self, rel)
            if parent is None:
                return None
            dirs[key] = parent
        return parent if self.inside(parent) else None

    def _read_bytes(self, rel: str) -> bytes | None:
        """Root.read_bytes, with the file's directory taken from the pass's memory when it is there:
        then one lstat stands for following the path's last component and for the stat before the open
        (a link, which Root follows, takes Root's way)."""
        found = self._parent(rel)
        if found is None:
            return Root.read_bytes(self, rel)
        path = f"{found[0]}/{found[1]}"
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                return Root.read_bytes(self, rel)
            if not stat.S_ISREG(mode):
                return None
            fd = os.open(path, _OPEN_FLAGS)
        except PermissionError:
            raise
        except OSError:
            return None
        return read_open(fd, MAX_READ)

    def read(self, rel: str) -> str | None:
        if not self.fast:
            text = self.inner.read(rel)
        else:  # Root's bounded, contained read of regular files
            data = self._read_bytes(rel)
            text = None if data is None else data.decode("utf-8", "replace").strip()
        if text is not None and "\x00" in text:
            text = text.replace("\x00", "").strip()
        return text

    def listdir(self, rel: str) -> list[str]:
        try:
            if not self.fast:
                return self.inner.listdir(rel)
            dirs = None if self._whole else getattr(self._pass, "dirs", None)
            if dirs is None or not rel or rel[0] in "/." or "//" in rel or "/." in rel or rel[-1] == "/":
                return Root.listdir(self, rel)
            path = self._dir(dirs, rel)
            return [] if path is None else sorted(os.listdir(path))
        except PermissionError:
            raise
        except OSError:  # ELOOP, ENOENT, ENOTDIR: nothing to list
            return []

    def readlink(self, rel: str) -> str | None:
        if not self.fast:
            return self.inner.readlink(rel)
        found = self._parent(rel)
        if found is None:
            return Root.readlink(self, rel)
        try:
            return os.readlink(f"{found[0]}/{found[1]}")
        except OSError:
            return None


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
