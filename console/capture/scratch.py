"""Private directories a replay extracts into: mode 0700, memory-backed where the system offers it
($XDG_RUNTIME_DIR, /dev/shm), removed on every way out of the process: at exit, and on SIGHUP, SIGTERM
and SIGINT when the process would otherwise die of them without running atexit.

A process killed outright (SIGKILL) cannot clean up: each directory holds a lock file, locked (flock)
for the life of the process that made it, and the next replay removes every directory of ours whose lock
no live process holds. The lock file is locked before it gets its name, so no directory is ever seen
with an unlocked lock while its maker lives; a directory without a lock file is never touched.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType

PREFIX = "nodeconsole-replay-"
LOCK = ".nodeconsole-replay.lock"
SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)

_lock = threading.Lock()
_held: dict[str, int] = {}  # directory → its lock file's descriptor
_installed: set[int] = set()


def scratch_parent() -> str:
    """Where to extract: memory-backed when the system has it (a capture is thousands of small files),
    else the temporary directory."""
    for d in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return d
    return tempfile.gettempdir()


def private_dir() -> Path:
    """A new private directory, locked and registered for removal; stale ones of killed runs removed."""
    parent = scratch_parent()
    remove_stale(parent)
    path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)  # mode 0700
    temp = os.path.join(path, f"{LOCK}.new")
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(temp, os.path.join(path, LOCK))
    with _lock:
        _held[path] = fd
    _install_handlers()
    return Path(path)


def discard(path: str | os.PathLike[str]) -> None:
    """Remove one of our directories now (and let go of its lock)."""
    key = os.fspath(path)
    shutil.rmtree(key, ignore_errors=True)
    with _lock:
        fd = _held.pop(key, None)
    if fd is not None:
        os.close(fd)


def discard_all() -> None:
    with _lock:
        paths = list(_held)
    for path in paths:
        discard(path)


def remove_stale(parent: str) -> list[str]:
    """Remove the directories of ours in `parent` left by runs that died (their lock is free); the ones
    removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(PREFIX) or entry.path in _held:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            fd = os.open(os.path.join(entry.path, LOCK), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # no lock file: not ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live replay holds it
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        finally:
            os.close(fd)
    return removed


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """The process is about to die of `signum`: remove our directories, then die of it as it would have."""
    discard_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    """Clean up on the signals that would kill the process without atexit (only where the handler is
    the default one: a process that handles or ignores a signal keeps doing so). Only the main thread
    may set handlers; elsewhere atexit and remove_stale still clean up."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        if sig in _installed:
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_signal)
        except (ValueError, OSError):
            continue
        _installed.add(sig)


atexit.register(discard_all)
