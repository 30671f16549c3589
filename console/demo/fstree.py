"""Writing a sysfs-like tree: attribute files and relative symlinks shaped like the kernel's
(`driver -> ../../../bus/pci/drivers/nvidia`: up to the common ancestor, then down)."""
from __future__ import annotations

import os
from pathlib import Path


def relative_link(link_rel: str, target_rel: str) -> str:
    """Target of a symlink at `link_rel` pointing to `target_rel`, both root-relative, computed
    textually (no filesystem access, so it works for paths that do not exist yet)."""
    src = [p for p in os.path.dirname(link_rel).split("/") if p]
    dst = [p for p in target_rel.split("/") if p]
    common = 0
    while common < len(src) and common < len(dst) and src[common] == dst[common]:
        common += 1
    return "/".join([".."] * (len(src) - common) + dst[common:]) or "."


class TreeWriter:
    """Creates files, directories and links below `base`; remembers directories it made so large trees
    are written without repeated mkdir calls."""

    def __init__(self, base: str | os.PathLike[str]) -> None:
        self.base = Path(base)
        self._base = str(self.base)
        self._dirs: set[str] = set()

    def mkdir(self, rel: str) -> None:
        if rel in self._dirs or not rel:
            return
        os.makedirs(f"{self._base}/{rel}", exist_ok=True)
        # Record every ancestor too: they exist now.
        while rel and rel not in self._dirs:
            self._dirs.add(rel)
            rel = os.path.dirname(rel)

    def raw(self, rel: str, content: str) -> None:
        """A file with exactly `content` (write-only sysfs attributes such as `unbind` are empty)."""
        # os.open/os.write: thousands of small files, the text-file layer would double the time.
        self.raw_bytes(rel, content.encode())

    def raw_bytes(self, rel: str, data: bytes) -> None:
        """A binary file (PCI config space, an ACPI table)."""
        self.mkdir(os.path.dirname(rel))
        fd = os.open(f"{self._base}/{rel}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def attr(self, rel: str, value: object) -> None:
        """A sysfs attribute: the value and a newline, as the kernel prints it."""
        self.raw(rel, f"{value}\n")

    def link(self, rel: str, target_rel: str) -> None:
        """A symlink at `rel` to the root-relative `target_rel`, written relative like the kernel's."""
        self.mkdir(os.path.dirname(rel))
        path = f"{self._base}/{rel}"
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(relative_link(rel, target_rel), path)
