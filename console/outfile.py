"""The one way the console writes a file whole: `write_atomic`. Every writer in console/, actions/ and
screens/ goes through it (the CLI's `-o` files, the drains file, the host's boot and modprobe files, the
exporter's textfile, the demo's state); tests/console/test_one_writer.py keeps it that way.

The policy, in order: anything but a regular file at the final path (a symbolic link above all) is
refused, never followed nor replaced; a temporary file with a private name is created beside it
(O_CREAT|O_EXCL|O_NOFOLLOW, so nothing planted there is opened); it gets exactly the mode asked for (not
the umask's), the whole data, an fsync; it is renamed over the final path, so a reader sees the old file
or the new one, never part of one; the directory is fsynced, so the rename survives a crash. On any
failure the temporary file is removed and an OSError naming the final path is raised."""
from __future__ import annotations

import errno
import os
import secrets
import stat
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


class UnsafePath(OSError):
    """A path refused because reaching it would follow a symbolic link, or because it is not a regular
    file (or directory) as expected: for reading (console/audit_log.py) and writing alike."""


class RefusedPath(UnsafePath):
    """The final path holds something the writer does not replace: a symbolic link (errno ELOOP) or
    anything but a regular file (EISDIR for a folder, else EINVAL). Nothing was written."""


def _check_target(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None
    if stat.S_ISLNK(st.st_mode):
        raise RefusedPath(errno.ELOOP, "a symbolic link: not followed", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise RefusedPath(errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL,
                          "not a regular file", str(path))


def _create_temp(path: Path) -> tuple[int, Path]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(10):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(path)) from None
    raise OSError(errno.EEXIST, "no free name for the temporary file", str(path))


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int) -> None:
    """Replace (or create) `path` with exactly `data`, mode `mode`, by the policy in the module doc.
    Raises RefusedPath or another OSError whose filename is `path`."""
    path = Path(path)
    _check_target(path)
    fd, tmp = _create_temp(path)
    try:
        try:
            os.fchmod(fd, mode)  # exactly `mode`: the umask narrowed the one os.open gave
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):  # named by the final path, not the temporary one
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    try:
        fsync_dir(path.parent)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from e


class OutputError(Exception):
    """The file cannot be written there: one line for the user."""


def write_output(path: str | os.PathLike[str], data: bytes, mode: int) -> None:
    """Replace `path` with `data` (mode `mode`) for a file the admin named (`capture -o`, `nccl topo
    -o`): write_atomic's errors as one line for the user (OutputError)."""
    try:
        write_atomic(path, data, mode)
    except RefusedPath as e:
        if e.errno == errno.ELOOP:
            raise OutputError(f"{path} is a symbolic link: not followed (give the file itself)") from None
        raise OutputError(f"{path}: not a regular file") from None
    except OSError as e:
        raise OutputError(f"{path}: cannot write there ({e.strerror or e})") from None
