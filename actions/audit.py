"""The audit log's writer: one JSON object per line, appended, never rewritten. Reading it (merging
the lines of one id, validating each line, `AuditRecord`) is console/audit_log.py.

A change writes a record when it starts (result "in-progress") and again when it ends; lines with the
same id are merged, later lines winning, so a crash still leaves the plan and its undo data behind.
Each record carries the inverse operations of its steps (`undo`, in the order to apply them): enough to
rebuild the undo plan without the snapshot the change was planned from.

A change with steps that take effect only at the next boot also carries `needs_reboot: true` and the
`boot_id` (/proc/sys/kernel/random/boot_id) of the boot it was applied in; a doctor fix carries the check
ids it fixes (`fixes`). While the host's boot_id is still that one, the change is pending a reboot.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import pwd
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeconsole.actions.safe_files import AUDIT_DIR_MODE, ensure_dir, open_file
from nodeconsole.console.audit_log import AUDIT_NAME, DEFAULT_STATE, UNDOABLE, AuditReader, Status
from nodeconsole.console.outfile import fsync_dir

if TYPE_CHECKING:
    from nodeconsole.console.seams import Seams

# A change starts only with this much free space on the audit log's filesystem: room for its final
# record, and for the records of the undo that may follow (one record is a few KiB).
MIN_FREE_BYTES = 1 << 20

# The results, by their names of old: the one vocabulary is console/audit_log.py's Status.
IN_PROGRESS = Status.IN_PROGRESS
APPLIED = Status.APPLIED
FAILED = Status.FAILED
FAILED_PARTIAL = Status.FAILED_PARTIAL
INTERRUPTED = Status.INTERRUPTED
INTERRUPTED_PARTIAL = Status.INTERRUPTED_PARTIAL
__all__ = ["APPLIED", "AUDIT_NAME", "DEFAULT_STATE", "FAILED", "FAILED_PARTIAL", "IN_PROGRESS", "INTERRUPTED",
           "INTERRUPTED_PARTIAL", "MIN_FREE_BYTES", "UNDOABLE", "AuditLog", "Status", "free_bytes", "host_audit",
           "new_id", "now_iso", "who"]


def new_id() -> str:
    """Sortable, short and unique enough for one host: UTC time plus 4 random hex digits."""
    now = _dt.datetime.now(_dt.UTC)
    return now.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def who() -> dict[str, Any]:
    """Who is making the change: login user (the sudo caller when run through sudo), uid, tty, ssh."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    tty = None
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.isatty():
                tty = os.ttyname(stream.fileno())
                break
        except (OSError, ValueError, AttributeError):
            continue
    ssh = os.environ.get("SSH_CLIENT") or os.environ.get("SSH_CONNECTION")
    out: dict[str, Any] = {"user": user, "uid": uid, "tty": tty, "ssh_client": ssh.split()[0] if ssh else None}
    if os.environ.get("SUDO_USER"):
        out["sudo_user"] = os.environ["SUDO_USER"]
    return out


class AuditLog(AuditReader):
    """Append to and read the JSON-lines audit log at `path` (reading: console/audit_log.py). The file is
    never reached through a symbolic link (UnsafePath)."""

    def __init__(self, path: Path, dir_mode: int = AUDIT_DIR_MODE) -> None:
        super().__init__(path)
        self.dir_mode = dir_mode

    def append(self, record: dict[str, Any], min_free: int = 0) -> None:
        """Append one line, whole, and flush it to disk (an audit line that a crash loses is no audit);
        OSError, with the file as it was, when it cannot be. `min_free`: refuse (ENOSPC) unless the
        log's filesystem has that many bytes free. The file is never reached through a symbolic link;
        it is created with mode 0640."""
        ensure_dir(self.path.parent, self.dir_mode)
        line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        if min_free:
            free = free_bytes(self.path.parent)
            if free < min_free:
                raise OSError(errno.ENOSPC, f"its filesystem has {free // 1024} KiB free, less than the "
                                            f"{min_free // 1024} KiB a change needs for its records")
        created = not os.path.lexists(self.path)
        fd = open_file(self.path, os.O_RDWR | os.O_APPEND, 0o640, create=True)  # read: its last byte
        try:
            _append_whole(fd, line)
        finally:
            os.close(fd)
        if created:  # the new file's name must survive a crash too
            with contextlib.suppress(OSError):  # the line itself is synced: the entry is best effort
                fsync_dir(self.path.parent)


def free_bytes(path: Path) -> int:
    """Bytes this process may still write on the filesystem holding `path` (root may use the blocks
    reserved for it, others may not). A seam for tests."""
    st = os.statvfs(path)
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


def write_some(fd: int, data: bytes) -> int:
    """One os.write (a seam for tests: a full filesystem writes less than asked, or raises ENOSPC)."""
    return os.write(fd, data)


def _append_whole(fd: int, line: bytes) -> None:
    """Write `line` at the end of the file and fsync it, continuing short writes. On any failure the
    file is truncated back to its old length (no torn line is left) and the error raised. A torn last
    line from an earlier crash gets a newline first, so this line stays a line of its own."""
    start = os.lseek(fd, 0, os.SEEK_END)
    if start and os.pread(fd, 1, start - 1) != b"\n":
        line = b"\n" + line
    try:
        done = 0
        while done < len(line):
            n = write_some(fd, line[done:])
            if n <= 0:
                raise OSError(errno.ENOSPC, "the audit log took no more bytes (is its filesystem full?)")
            done += n
        os.fsync(fd)
    except BaseException:
        try:
            os.ftruncate(fd, start)
            os.fsync(fd)
        except OSError:
            pass
        raise


def host_audit(seams: Seams) -> AuditLog:
    """The audit log of the host behind `seams`, for reading it without preparing to change the host
    (which opens libvirt and imports every action)."""
    return AuditLog(seams.audit_dir / AUDIT_NAME, seams.state_mode)
