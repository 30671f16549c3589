"""The demo owns only what it made. Its state directory is generated into only when it is absent or
empty, or holds the demo's marker file (written before the first generated file, so a generation cut
short is still recognised and redone) or the stamp of a demo made by an earlier release. Anything else
is somebody's directory (NODECONSOLE_STATE_DIR=/root by mistake): refused, nothing created or removed.
A symbolic link in place of the directory or the marker is refused too."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from nodeconsole.console.outfile import fsync_dir

MARKER = ".nodeconsole-demo"
MARKER_TEXT = b"This directory holds nodeconsole's demo host; `nodeconsole demo reset` regenerates it.\n"


class ForeignStateDir(Exception):
    """The directory is not the demo's to generate into (the message says why, in one line)."""


def _regular(path: Path) -> bool | None:
    """True: a regular file; False: absent; None: something else (a link, a directory…)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return True if stat.S_ISREG(st.st_mode) else None


def _old_stamp(path: Path) -> bool:
    """A demo-stamp.json an earlier release wrote: a regular file holding {"layout_version": …}."""
    if not _regular(path):
        return False
    try:
        data = json.loads(path.read_bytes()[:4096])
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "layout_version" in data


def check_ours(d: Path, stamp: str, ignore: tuple[str, ...] = ()) -> None:
    """Raise ForeignStateDir unless the demo may generate into `d`; `ignore`: names that do not make
    the directory anyone's (the demo's own lock file)."""
    d = Path(d)
    if os.path.islink(d):
        raise ForeignStateDir(f"refusing the demo state directory {d}: it is a symbolic link")
    if not os.path.lexists(d):
        return
    if not d.is_dir():
        raise ForeignStateDir(f"refusing the demo state directory {d}: not a directory")
    marker = _regular(d / MARKER)
    if marker is None:
        raise ForeignStateDir(f"refusing the demo state directory {d}: its {MARKER} is not a regular file")
    if marker or _old_stamp(d / stamp):
        return
    try:
        names = sorted(set(os.listdir(d)) - set(ignore))
    except OSError as e:
        raise ForeignStateDir(f"cannot read the demo state directory {d}: {e.strerror or e}") from None
    if names:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise ForeignStateDir(f"refusing to generate the demo host in {d}: it holds files the demo did not "
                              f"make ({shown}); point NODECONSOLE_STATE_DIR at an empty or new directory")


def claim(d: Path) -> None:
    """Write the marker (synced) unless it is there: before the first generated file."""
    path = Path(d) / MARKER
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        if _regular(path):
            return
        raise ForeignStateDir(f"refusing the demo state directory {d}: its {MARKER} is not a regular file") from None
    try:
        os.write(fd, MARKER_TEXT)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(d)
