"""Files the CLI writes where the admin asks (`capture -o`, `nccl topo -o`): written whole or not at all
(a temporary file beside it, renamed over it), with an explicit mode, never through a symbolic link."""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (a file created or renamed in it) durable. A filesystem that cannot
    sync a directory (EINVAL, EROFS) is no error; any other failure is raised."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EROFS):
            raise
    finally:
        os.close(fd)


class OutputError(Exception):
    """The file cannot be written there: one line for the user."""


def write_output(path: str | os.PathLike[str], data: bytes, mode: int) -> None:
    """Replace `path` with `data` (mode `mode`). A symbolic link or anything but a regular file at `path`
    is refused (OutputError), as is a folder that cannot take the temporary file."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"{path}: {e.strerror or e}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise OutputError(f"{path} is a symbolic link: not followed (give the file itself)")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{path}: not a regular file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    except OSError as e:
        raise OutputError(f"{path}: cannot write there ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
