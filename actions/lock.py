"""One changer per host: an fcntl lock file in the host's state directory.

The lock is taken without waiting: a second console is told who holds it instead of hanging. The file
holds a JSON line about its holder (pid, user, when, and the audit id of the change under way) and is
removed on release; after locking we check that the path still names the file we locked, because a
releasing holder may have unlinked it in between.

A process killed outright (kill -9, a power cut) cannot remove the file; the kernel drops its flock, so
the next taker gets the lock and finds the dead holder's line: `stale` keeps it, so the runner can say
which change was interrupted and what to do about it. The file is opened with O_NOFOLLOW (O_EXCL when
created): a symbolic link planted in its place is refused, never written through.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from nodeconsole.actions.safe_files import AUDIT_DIR_MODE, ensure_dir, open_file

LOCK_NAME = "nodeconsole.lock"


class LockHeld(Exception):
    """Another process holds the host lock; the message names it."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        who = f"pid {pid}" if pid else "pid unknown"
        super().__init__(f"another nodeconsole ({who}) is changing this host; try again when it is done")


def parse_holder(text: str) -> dict[str, Any]:
    """The holder line of a lock file: a JSON object, or a bare pid (older releases); {} when neither."""
    text = text.strip()
    if text.isdigit():
        return {"pid": int(text)}
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(obj, dict):
        return {}
    return {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, str | int) and k != ""}


class HostLock:
    """`with HostLock(path):` holds the lock for the block; raises LockHeld when taken."""

    def __init__(self, path: Path, dir_mode: int = AUDIT_DIR_MODE) -> None:
        self.path = Path(path)
        self.dir_mode = dir_mode
        self._fd: int | None = None
        self._created_dir = False
        self._info: dict[str, Any] = {}
        self.stale: dict[str, Any] | None = None  # the line a dead holder left, found by acquire()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> int | None:
        """The pid written by the current holder, None when unknown or not held."""
        try:
            fd = open_file(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            pid = parse_holder(os.read(fd, 4096).decode("utf-8", "replace")).get("pid")
        finally:
            os.close(fd)
        return pid if isinstance(pid, int) else None

    def acquire(self, info: dict[str, Any] | None = None) -> None:
        """Take the lock; `info` (who, when) is written into the file with our pid."""
        if self._fd is not None:
            return
        if not os.path.lexists(self.path.parent):
            ensure_dir(self.path.parent, self.dir_mode)
            self._created_dir = True
        for _ in range(20):  # retry only when a releasing holder unlinked the file under us
            fd = open_file(self.path, os.O_RDWR, 0o600, create=True)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise LockHeld(self.holder()) from None
                raise
            try:
                same = os.fstat(fd).st_ino == os.lstat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            try:
                left = os.read(fd, 4096).decode("utf-8", "replace")
                self._info = {"pid": os.getpid(), **(info or {})}
                self._write(fd)
            except OSError:
                os.close(fd)  # e.g. a full /var/log: never keep a lock we could not record
                raise
            found = parse_holder(left)
            self.stale = found if found and found.get("pid") != os.getpid() else None
            self._fd = fd
            return
        raise LockHeld(self.holder())

    def probe(self) -> dict[str, Any] | None:
        """Whether `acquire` would succeed now, changing nothing: raises LockHeld when another process
        holds the lock; returns the line a dead holder left (None when none)."""
        try:
            fd = open_file(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise LockHeld(self.holder()) from None
                raise
            found = parse_holder(os.read(fd, 4096).decode("utf-8", "replace"))
            return found or None
        finally:
            os.close(fd)  # closing drops the shared flock

    def note(self, **fields: Any) -> None:
        """Add fields (e.g. the audit id of the change under way) to the holder line."""
        if self._fd is None:
            return
        self._info.update(fields)
        try:
            self._write(self._fd)
        except OSError:
            pass  # the line is for the next taker's message; the flock is what protects

    def _write(self, fd: int) -> None:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(self._info, sort_keys=True) + "\n").encode())

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            # Unlink while still locked, so nobody can lock this inode after we let go of it.
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        if self._created_dir:
            try:
                self.path.parent.rmdir()
            except OSError:
                pass  # not empty: something else lives there now
            self._created_dir = False

    def __enter__(self) -> HostLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
