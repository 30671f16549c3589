"""Opening the console's own files (lock, audit log, demo state) without following links.

A state directory or log directory another user can write to, or a link planted where the lock or the
audit log should be, would let the console overwrite some other file as root. So: directories are
created with an explicit mode, files are opened with O_NOFOLLOW (and O_EXCL when they are created), and
a path that is a symbolic link is refused with an error that names it.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from nodeconsole.console.outfile import UnsafePath
from nodeconsole.console.state_dir import AUDIT_DIR_MODE, STATE_DIR_MODE  # noqa: F401  (their home)


def _refuse(path: Path, what: str) -> UnsafePath:
    return UnsafePath(errno.ELOOP, f"refusing {path}: it is {what}", str(path))


def ensure_dir(path: Path, mode: int) -> None:
    """Create `path` and any missing parents with exactly `mode` (umask does not widen or narrow it).
    An existing directory is left as it is; a symbolic link in its place is refused."""
    path = Path(path)
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if os.path.islink(path):
        raise _refuse(path, "a symbolic link, not a directory")
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            continue  # made by another process meanwhile
        os.chmod(d, mode)
    if not path.is_dir():
        raise UnsafePath(errno.ENOTDIR, f"refusing {path}: it is not a directory", str(path))


def open_file(path: Path, flags: int, mode: int = 0o600, create: bool = False) -> int:
    """os.open with O_NOFOLLOW|O_CLOEXEC. `create`: make the file (O_EXCL, exactly `mode`) when it is
    missing, else open the existing one. Refuses a symbolic link or anything but a regular file."""
    path = Path(path)
    base = flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO planted there must not hang us
    fd = -1
    for _ in range(5):  # created or removed by someone else between the two opens: try again
        if create:
            try:
                fd = os.open(path, base | os.O_CREAT | os.O_EXCL, mode)
                os.fchmod(fd, mode)
                break
            except FileExistsError:
                pass
        try:
            fd = os.open(path, base)
            break
        except FileNotFoundError:
            if not create:
                raise
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _refuse(path, "a symbolic link") from None
            raise
    else:
        raise OSError(errno.EAGAIN, f"{path} keeps appearing and disappearing", str(path))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refuse(path, "not a regular file")
    return fd
