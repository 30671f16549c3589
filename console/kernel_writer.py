"""The real host's kernel writer (the `KernelWriter` seam, console/host_seams.py): writes kernel
attribute files (sysfs/procfs) below a root, one write() per call as `echo` does.

The demo host's simulated kernel (console/demo/kernel.py's `SimulatedKernel`) satisfies the same
protocol; console/seams.py is the one place that chooses it."""
from __future__ import annotations

import errno
import os

from nodeconsole.console.root import Root


class Kernel:
    """Writes kernel attributes below `root` (default `/`), one write() per call as `echo` does. A
    missing attribute is FileNotFoundError, never a new file."""

    def __init__(self, root: Root | str | os.PathLike[str] = "/") -> None:
        self.root = root if isinstance(root, Root) else Root(root)

    def write(self, path: str, text: str) -> None:
        where = self.root.resolve(path)
        if where is None:
            raise PermissionError(errno.EACCES, f"{os.strerror(errno.EACCES)}: leads out of {self.root.path}",
                                  "/" + path.lstrip("/"))
        fd = os.open(where, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def read(self, path: str) -> str | None:
        return self.root.read(path)
