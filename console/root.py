"""The sysfs/procfs seam: a directory standing for `/`.

Captured trees hold dangling relative symlinks and loops: nothing here follows links recursively; links
are read with readlink and resolved textually against the root.
"""
from __future__ import annotations

import os
from pathlib import Path


class Root:
    """Read files of a host below `path` (default `/`). All paths are given relative, without a
    leading slash (`"sys/bus/pci/devices"`)."""

    def __init__(self, path: str | os.PathLike[str] = "/") -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"Root({str(self.path)!r})"

    def p(self, rel: str) -> Path:
        return self.path / rel.lstrip("/")

    def read(self, rel: str) -> str | None:
        """File content stripped of surrounding whitespace, None when absent or unreadable."""
        try:
            with open(self.p(rel), "rb") as f:
                return f.read().decode("utf-8", "replace").strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as e:  # EINVAL/EIO reading some sysfs attributes; treat like absent
            if isinstance(e, PermissionError):
                raise
            return None

    def read_int(self, rel: str, base: int = 10) -> int | None:
        text = self.read(rel)
        if text is None or text == "":
            return None
        try:
            return int(text, base)
        except ValueError:
            return None

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.p(rel))

    def isdir(self, rel: str) -> bool:
        return self.p(rel).is_dir()

    def listdir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self.p(rel)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def readlink(self, rel: str) -> str | None:
        try:
            return os.readlink(self.p(rel))
        except OSError:
            return None

    def link_target(self, rel: str) -> str | None:
        """A symlink's target as a root-relative path (textual resolution, no filesystem walk)."""
        target = self.readlink(rel)
        if target is None:
            return None
        base = "/" + rel.lstrip("/")
        joined = target if target.startswith("/") else os.path.join(os.path.dirname(base), target)
        return os.path.normpath(joined).lstrip("/")

    def link_name(self, rel: str) -> str | None:
        """Basename of a symlink's target (e.g. the driver name of `.../driver`)."""
        target = self.readlink(rel)
        return os.path.basename(target.rstrip("/")) if target else None
