"""The console's first look at the host, started before the UI library is even imported.

Starting the console is mostly importing Textual and laying the screen out; the host's first,
sysfs-only snapshot (the GPUs, the topology, IOMMU groups) takes a fraction of that. Started at launch,
it is ready by the time the screen is, so the first frame the admin sees already lists the GPUs instead
of an empty table followed by a second, full repaint. The UI waits for it a bounded moment only; a
host whose sysfs is slow gets the empty frame and the GPUs a moment later, as before.

Two ways to run it:
- `process=True` (what the launcher asks for): in a forked child process. A thread would share the
  interpreter lock with Textual's import and start-up, so the two would take turns on one core; a child
  runs beside them on another core (its ~0.1 s of imports and sysfs reading then costs the first frame
  nothing). The child sends the snapshot back pickled through a pipe and exits; the console's own
  seams and collector are made by its first poll, after the first frame. Forking is done only while the
  process has a single thread (forking a threaded process can copy a lock held by another thread), on
  a system that has fork; otherwise, and whenever the child fails, it falls back to the thread's way or
  to the first poll.
- `process=False`: on a thread of this process; its seams and collector are then the console's.
"""
from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: at launch, this module is imported before the fork, and the
    # collector's modules are then loaded in the child and in the console beside each other
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.model import HostSnapshot
    from nodeconsole.console.seams import Seams

_MAX_PICKLE = 64 << 20  # a snapshot of the largest host pickles to well under a MiB


class FirstLook:
    def __init__(self, seams_factory: Callable[[], Seams], process: bool = False,
                 sysfs_factory: Callable[[], Seams] | None = None) -> None:
        self.seams: Seams | None = None  # set by the thread way only (the child's stay in the child)
        self.collector: Collector | None = None
        self.snapshot: HostSnapshot | None = None  # sysfs only (sources other than sysfs PENDING)
        self.error: Exception | None = None
        self.factory = seams_factory
        # what the child reads the host through: seams enough for sysfs (the console's own come from
        # `factory`, in its first poll)
        self.sysfs_factory = sysfs_factory or seams_factory
        self.in_process = False  # True when the look was taken by a child process
        self._done = threading.Event()
        if process and _can_fork():
            self._fork()
        else:
            threading.Thread(target=self._run, name="first-look", daemon=True).start()

    def _run(self) -> None:
        from nodeconsole.console.collector import Collector

        try:
            self.seams = self.factory()
            self.collector = Collector(self.seams)
            self.snapshot = self.collector.collect(partial=True)
        except Exception as exc:  # the first poll reports it, as it would have
            self.error = exc
        finally:
            self._done.set()

    # -- the child-process way ---------------------------------------------------------------------
    def _fork(self) -> None:
        try:
            r, w = os.pipe()
        except OSError:  # out of file descriptors: the thread way
            threading.Thread(target=self._run, name="first-look", daemon=True).start()
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            threading.Thread(target=self._run, name="first-look", daemon=True).start()
            return
        if pid == 0:  # the child: never returns
            os.close(r)
            _child(self.sysfs_factory, w)
        os.close(w)
        self.in_process = True
        try:
            threading.Thread(target=self._receive, args=(pid, r), name="first-look", daemon=True).start()
        except RuntimeError:  # no thread to read it with: the child is told (a closed pipe) and reaped
            os.close(r)
            os.waitpid(pid, 0)
            self._done.set()

    def _receive(self, pid: int, r: int) -> None:
        """Read the child's answer to its end; a child that failed or died leaves no snapshot, and the
        first poll then prepares the host itself (and reports what went wrong, as it would have)."""
        chunks: list[bytes] = []
        size = 0
        try:
            while size <= _MAX_PICKLE:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError:
            chunks = []
        finally:
            os.close(r)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        from nodeconsole.console.model import HostSnapshot

        try:
            data = b"".join(chunks)
            snap = pickle.loads(data) if data and size <= _MAX_PICKLE else None
            self.snapshot = snap if isinstance(snap, HostSnapshot) else None
        except Exception:  # a truncated answer (the child was killed): as if there were none
            self.snapshot = None
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True when the first look is over (done or failed) within `timeout` seconds."""
        return self._done.wait(timeout)


def _can_fork() -> bool:
    return hasattr(os, "fork") and threading.active_count() == 1


def _child(factory: Callable[[], Seams], w: int) -> None:
    """In the forked child: take the look, write the pickled snapshot (nothing on failure), exit without
    running the parent's exit handlers or flushing its buffers."""
    status = 1
    try:
        from nodeconsole.console.collector import Collector

        # ^C at the terminal reaches the whole process group: the child just stops (the console
        # decides what ^C means)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        snap = Collector(factory()).collect(partial=True)
        data = pickle.dumps(snap, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
        status = 0
    except BaseException:  # the parent's first poll does it again and reports it
        pass
    finally:
        os._exit(status)
