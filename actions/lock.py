"""One changer per host: an fcntl lock file in the host's state directory.

The lock is taken without waiting: a second console is told who holds it instead of hanging. The file
holds the holder's pid (for that message) and is removed on release; after locking we check that the
path still names the file we locked, because a releasing holder may have unlinked it in between.
"""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_NAME = "nodeconsole.lock"


class LockHeld(Exception):
    """Another process holds the host lock; the message names it."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        who = f"pid {pid}" if pid else "pid unknown"
        super().__init__(f"another nodeconsole ({who}) is changing this host; try again when it is done")


class HostLock:
    """`with HostLock(path):` holds the lock for the block; raises LockHeld when taken."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._created_dir = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> int | None:
        """The pid written by the current holder, None when unknown or not held."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        if not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._created_dir = True
        for _ in range(20):  # retry only when a releasing holder unlinked the file under us
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise LockHeld(self.holder()) from None
                raise
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            try:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            except OSError:
                os.close(fd)  # e.g. a full /var/log: never keep a lock we could not record
                raise
            self._fd = fd
            return
        raise LockHeld(self.holder())

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
