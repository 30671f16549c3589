"""The sysfs/procfs seam: a directory standing for `/`.

Captured trees hold dangling relative symlinks and loops: nothing here follows links recursively; links
are read with readlink and resolved textually against the root.

Reads stay inside the root: below any root other than `/`, a path is resolved (links followed) and one
that leads out of the root reads as absent (`ln -s /etc/shadow ROOT/proc/sys/kernel/hostname` is not
the host name). Only regular files are read (a FIFO, a device or a socket reads as absent, and opening
never blocks), at most MAX_READ bytes (a larger file reads as absent).
"""
from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Any sysfs attribute is one page at most; /proc/cpuinfo of a 1024-CPU host is about 1.5 MiB.
MAX_READ = 4 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


_NOT_A_LINK = (errno.EINVAL, errno.ENOENT, errno.ENOTDIR)


class _FullWalk(Exception):
    """A link loop or an odd target: os.path.realpath decides."""


def _resolve_cached(path: str, dirs: dict[str, str]) -> str:
    """os.path.realpath(path), resolving each directory on the way once per pass (`dirs`): one lstat
    per new component instead of one per component of every path."""
    try:
        return _resolve(path, dirs, set())
    except (_FullWalk, OSError):
        return os.path.realpath(path)


def _resolve(path: str, dirs: dict[str, str], links: set[str]) -> str:
    head, name = os.path.split(path)
    if path == "/":
        return path
    if not name or name in (".", "..") or not head:
        raise _FullWalk
    parent = dirs.get(head)
    if parent is None:
        parent = dirs[head] = _resolve(head, dirs, links)
    real = os.path.join(parent, name)
    try:  # one call says both whether it is a link and where it leads (an lstat first was two)
        target = os.readlink(real)
    except OSError as e:
        if e.errno in _NOT_A_LINK:  # not a link, or absent: realpath keeps the component as it is
            return real
        raise  # a link that cannot be read (EACCES): realpath's way, which raises as it did
    if real in links:  # a loop
        raise _FullWalk
    links.add(real)
    parts = target.split("/")
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    if ".." in parts[ups:] or "." in parts:  # `x/../y` below a link: only a full walk is right
        raise _FullWalk
    # the parent has no links left in it, so the leading `..` of a relative target simply climb it
    return _resolve(os.path.normpath(os.path.join(parent, target)), dirs, links)


class Root:
    """Read files of a host below `path` (default `/`). All paths are given relative, without a
    leading slash (`"sys/bus/pci/devices"`)."""

    def __init__(self, path: str | os.PathLike[str] = "/") -> None:
        self.path = Path(path)
        # absolute: the per-pass directory cache walks paths from `/` (a relative --root works the same)
        self._base = os.path.join(os.path.abspath(self.path), "")
        self._real = os.path.realpath(self.path)
        self._prefix = os.path.join(self._real, "")
        self._whole = self._real == "/"  # nothing can lead out of `/`
        self._pass = threading.local()  # .dirs: directory -> resolved directory, during one pass

    @contextmanager
    def one_pass(self) -> Iterator[None]:
        """Reads in this block (on this thread) resolve each directory once: one collection pass reads
        dozens of attributes per device directory, and following every link of every path again costs
        more than the reads (below a root other than `/`). Links may change between passes, so the
        memory ends with the block."""
        if getattr(self._pass, "dirs", None) is not None:  # nested: the outer pass keeps its memory
            yield
            return
        self._pass.dirs = {}
        try:
            yield
        finally:
            self._pass.dirs = None

    def __repr__(self) -> str:
        return f"Root({str(self.path)!r})"

    def p(self, rel: str) -> Path:
        return self.path / rel.lstrip("/")

    # -- containment --
    def inside(self, path: str | os.PathLike[str]) -> bool:
        """True when the (already resolved) absolute `path` lies in the root."""
        real = os.fspath(path)
        return self._whole or real == self._real or real.startswith(self._prefix)

    def resolve(self, rel: str) -> str | None:
        """The path of `rel` with every link followed, None when it leads out of the root."""
        path = self._base + rel.lstrip("/")
        if self._whole:
            return path
        dirs = getattr(self._pass, "dirs", None)
        if dirs is None:
            real = os.path.realpath(path)
            return real if self.inside(real) else None
        real = _resolve_cached(path, dirs)
        return real if self.inside(real) else None

    def resolve_parent(self, rel: str) -> str | None:
        """`rel` with its directory resolved (the last component is not followed: a link stays a link),
        None when the directory leads out of the root."""
        rel = rel.strip("/")
        head, name = os.path.split(rel)
        if not name:
            return self.resolve(rel)
        parent = self.resolve(head)
        return None if parent is None else os.path.join(parent, name)

    # -- reads --
    def read_bytes(self, rel: str, limit: int = MAX_READ) -> bytes | None:
        """The content of a regular file inside the root, None when absent, unreadable, not a regular
        file, larger than `limit` or leading out of the root. PermissionError is raised."""
        path = self.resolve(rel)
        if path is None:
            return None
        try:
            # stat first: opening a device can have effects of its own; O_NONBLOCK: a FIFO put in
            # its place between the two calls cannot block the open
            if not stat.S_ISREG(os.stat(path).st_mode):
                return None
            fd = os.open(path, _OPEN_FLAGS if self._whole else _OPEN_FLAGS | os.O_NOFOLLOW)
        except PermissionError:
            raise
        except OSError:
            return None
        return read_open(fd, limit)

    def read(self, rel: str) -> str | None:
        """File content stripped of surrounding whitespace, None when absent or unreadable."""
        data = self.read_bytes(rel)
        return None if data is None else data.decode("utf-8", "replace").strip()

    def read_int(self, rel: str, base: int = 10) -> int | None:
        text = self.read(rel)
        if text is None or text == "":
            return None
        try:
            return int(text, base)
        except ValueError:
            return None

    def exists(self, rel: str) -> bool:
        path = self.resolve_parent(rel)
        return path is not None and os.path.lexists(path)

    def isdir(self, rel: str) -> bool:
        path = self.resolve(rel)
        return path is not None and os.path.isdir(path)

    def listdir(self, rel: str) -> list[str]:
        path = self.resolve(rel)
        if path is None:
            return []
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def readlink(self, rel: str) -> str | None:
        path = self.resolve_parent(rel)
        if path is None:
            return None
        try:
            return os.readlink(path)
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

    # -- writes (files the console itself writes below the root: configs, the demo's tree) --
    def writable(self, rel: str) -> str:
        """The path to write `rel` at: its nearest existing ancestor must resolve inside the root (the
        directories still missing will be made below it). Raises PermissionError otherwise."""
        rel = rel.strip("/")
        head = os.path.dirname(rel)
        while head and not os.path.lexists(self._base + head):
            head = os.path.dirname(head)
        if self.resolve(head) is None or ".." in rel.split("/"):
            raise PermissionError(f"/{rel} leads out of the root {self.path}")
        return self._base + rel


def read_open(fd: int, limit: int = MAX_READ) -> bytes | None:
    """The content of the file open at `fd` (closed here): None when it is not a regular file, larger
    than `limit` or unreadable. PermissionError is raised."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, 65536)  # sysfs attributes are one page at most: one read
        if len(data) == 65536:  # procfs files (cpuinfo) can be longer
            chunks, total = [data], len(data)
            while chunk := os.read(fd, 65536):
                total += len(chunk)
                if total > limit:
                    return None
                chunks.append(chunk)
            data = b"".join(chunks)
        return data if len(data) <= limit else None
    except PermissionError:
        raise
    except OSError:  # EISDIR, and EINVAL/EIO from some sysfs attributes: like absent
        return None
    finally:
        os.close(fd)
