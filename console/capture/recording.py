"""What the console reads of a host's tree, noted while it reads (`RecordingRoot`), and the subset of the
tree that holds exactly those entries (`Tree`): the files read with the content read, the directories
listed with their entries, the paths tested for existence, and every symlink met on the way, kept as a
link. Nothing is followed out of the root.

Regular files that were only tested for existence (a program in /usr/bin, /dev/kvm) are stored empty:
their presence is what was read. In a listed directory, subdirectories and symlinks are kept (the
listing stays the same); its regular files are kept when they were read, or when they are a PCI
function's small text attributes (SAFE_PCI_ATTRS), which plans and a later diff read too.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from nodeconsole.console.root import MAX_READ, Root

FILE, DIR, LINK = "file", "dir", "link"
MAX_LINK_HOPS = 40

# Attributes every PCI function has in sysfs, each a short text printed by the kernel (reading them has
# no effect on the device; unlike resource*, rom, vpd or config beyond its header).
SAFE_PCI_ATTRS = frozenset({
    "vendor", "device", "subsystem_vendor", "subsystem_device", "class", "revision", "numa_node",
    "local_cpulist", "local_cpus", "enable", "irq", "driver_override", "current_link_speed",
    "current_link_width", "max_link_speed", "max_link_width", "d3cold_allowed", "power_state",
    "reset_method", "sriov_numvfs", "sriov_totalvfs", "sriov_drivers_autoprobe", "sriov_offset",
    "sriov_stride", "sriov_vf_device", "ari_enabled", "broken_parity_status", "msi_bus",
    "consistent_dma_mask_bits", "dma_mask_bits", "modalias", "boot_vga", "secondary_bus_number",
    "subordinate_bus_number",
})
_PCI_FUNCTION = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_SMALL = 64 << 10


def clean(rel: str) -> str:
    """A root-relative path without leading, trailing or doubled slashes."""
    return "/".join(p for p in rel.split("/") if p and p != ".")


class RecordingRoot(Root):
    """A Root that notes every path read, listed, tested or readlink'ed (reads behave exactly as
    Root's). The content of the last read of each file is kept."""

    def __init__(self, path: str | os.PathLike[str] = "/") -> None:
        super().__init__(path)
        self.files: dict[str, bytes | None] = {}
        self.listed: set[str] = set()
        self.exist_probes: set[str] = set()  # exists(), readlink(): the last component is not followed
        self.dir_probes: set[str] = set()  # isdir(): followed

    def read_bytes(self, rel: str, limit: int = MAX_READ) -> bytes | None:
        data = super().read_bytes(rel, MAX_READ)
        self.files[clean(rel)] = data
        return data if data is None or len(data) <= limit else None

    def read(self, rel: str) -> str | None:  # through read_bytes (also makes SysfsRoot delegate here)
        return Root.read(self, rel)

    def listdir(self, rel: str) -> list[str]:
        self.listed.add(clean(rel))
        return super().listdir(rel)

    def readlink(self, rel: str) -> str | None:
        self.exist_probes.add(clean(rel))
        return super().readlink(rel)

    def exists(self, rel: str) -> bool:
        self.exist_probes.add(clean(rel))
        return super().exists(rel)

    def isdir(self, rel: str) -> bool:
        self.dir_probes.add(clean(rel))
        return super().isdir(rel)


@dataclass(frozen=True)
class Entry:
    kind: str  # FILE, DIR or LINK
    data: bytes = b""
    target: str = ""  # a link's target: always relative, never leading out of the root


class Tree:
    """The entries of a root to store, gathered path by path. Links are resolved component by
    component like realpath does, noting each link met; a link leading out of the root is kept (as a
    relative link) but never followed."""

    def __init__(self, root: Root) -> None:
        self.base = os.path.join(os.path.realpath(root.path), "")
        self.whole = self.base == "/"
        self.entries: dict[str, Entry] = {}
        self.links_out = 0  # links leading out of the root, not stored

    # -- reading the real tree --
    def _lstat(self, rel: str) -> os.stat_result | None:
        try:
            return os.lstat(self.base + rel)
        except OSError:
            return None

    def _keep_link(self, rel: str, target: str) -> bool:
        """Store the link at `rel`; True when it may be followed (it stays inside the root)."""
        parent = os.path.dirname(rel)
        if target.startswith("/"):
            dest = clean(os.path.normpath(target))
            inside = self.whole
        else:
            dest = os.path.normpath(os.path.join(parent, target))
            inside = not (dest == ".." or dest.startswith("../"))
            if not inside:
                self.links_out += 1
                return False
            dest = clean(dest)
        if rel not in self.entries:
            self.entries[rel] = Entry(LINK, target=target if not target.startswith("/") else
                                      os.path.relpath(dest or ".", parent or "."))
        return inside

    def resolve(self, rel: str, follow_last: bool = True) -> str | None:
        """The real root-relative path of `rel` (every link met is stored), None when it does not
        exist, loops or leads out of the root."""
        pending = [p for p in reversed(rel.split("/")) if p not in ("", ".")]
        done: list[str] = []
        hops = 0
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if done:
                    done.pop()
                elif not self.whole:
                    return None
                continue
            cur = "/".join([*done, name])
            st = self._lstat(cur)
            if st is None:
                return None
            if stat.S_ISLNK(st.st_mode) and (pending or follow_last):
                hops += 1
                try:
                    target = os.readlink(self.base + cur)
                except OSError:
                    return None
                if hops > MAX_LINK_HOPS or not self._keep_link(cur, target):
                    return None
                if target.startswith("/"):
                    done = []
                pending.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
                continue
            done.append(name)
        return "/".join(done)

    # -- what was read --
    def add_file(self, rel: str, data: bytes) -> None:
        """A file read with this content (replaces a placeholder of the same path)."""
        real = self.resolve(rel)
        if real:
            self.entries[real] = Entry(FILE, data)

    def add_read(self, rel: str, data: bytes | None) -> None:
        """A read: its content when it had one; a directory (which reads as absent) is kept as one."""
        if data is not None:
            self.add_file(rel, data)
            return
        real = self.resolve(rel)
        st = self._lstat(real) if real else None
        if real and st is not None and stat.S_ISDIR(st.st_mode):
            self.entries.setdefault(real, Entry(DIR))
        # a regular file that read as absent (too large, EIO) stays absent

    def add_listing(self, rel: str) -> None:
        real = self.resolve(rel)
        if real is None:
            return
        st = self._lstat(real) if real else None
        if real and (st is None or not stat.S_ISDIR(st.st_mode)):
            return
        if real:
            self.entries.setdefault(real, Entry(DIR))
        pci_function = real.startswith("sys/devices/") and bool(_PCI_FUNCTION.match(os.path.basename(real)))
        try:
            children = sorted(os.scandir(self.base + real), key=lambda e: e.name)
        except OSError:
            return
        for child in children:
            path = f"{real}/{child.name}" if real else child.name
            if child.is_symlink():
                try:
                    self._keep_link(path, os.readlink(child.path))
                except OSError:
                    pass
            elif child.is_dir(follow_symlinks=False):
                self.entries.setdefault(path, Entry(DIR))
            elif pci_function and child.name in SAFE_PCI_ATTRS and path not in self.entries:
                data = _read_small(child.path)
                if data is not None:
                    self.entries[path] = Entry(FILE, data)

    def add_probe(self, rel: str, follow_last: bool) -> None:
        real = self.resolve(rel, follow_last=follow_last)
        if real:
            self._add_present(real)

    def _add_present(self, real: str) -> None:
        st = self._lstat(real)
        if st is None or real in self.entries:
            return
        if stat.S_ISDIR(st.st_mode):
            self.entries[real] = Entry(DIR)
        elif stat.S_ISLNK(st.st_mode):
            try:
                self._keep_link(real, os.readlink(self.base + real))
            except OSError:
                pass
        else:  # a regular file only tested, a device (/dev/kvm): present, content not read
            self.entries[real] = Entry(FILE)

    def add_recording(self, rec: RecordingRoot) -> None:
        """Everything `rec` noted: reads first (their content wins over placeholders), then listings
        and probes."""
        for rel, data in sorted(rec.files.items()):
            self.add_read(rel, data)
        for rel in sorted(rec.listed):
            self.add_listing(rel)
        for rel in sorted(rec.dir_probes):
            self.add_probe(rel, follow_last=True)
        for rel in sorted(rec.exist_probes):
            self.add_probe(rel, follow_last=False)


def _read_small(path: str) -> bytes | None:
    """A small regular file's content (sysfs attributes), None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _SMALL + 1)
        return data if len(data) <= _SMALL else None
    except OSError:
        return None
    finally:
        os.close(fd)
