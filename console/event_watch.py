"""The host's GPU events as they arrive, for the console: the kernel log read incrementally, the source
losses and returns the console saw, and the problems a fatal event raises.

Cheap enough for every poll of the collector (which runs off the UI thread): a file (a tree's
var/log/kern.log, the demo's .sim/kmsg) is read from the offset where the last poll stopped, up to its
last whole line (a rotated or truncated file is read again from its start; a first look at a large log
reads only its last TAIL bytes); /dev/kmsg stays open, non-blocking, and each poll reads the records
written since (EAGAIN ends a poll). Only the newest KEEP events are held. An event whose lines straddle
two polls is read as its pieces (the log is written a record at a time, so this is rare).
"""
from __future__ import annotations

import errno
import os
import stat
import time
from collections import deque

from nodeconsole.console.event_time import boot_time, on_wall_clock
from nodeconsole.console.events import AER, HOST, XID, KernelEvent, gpu_of, tie_to_vms
from nodeconsole.console.gpu_events import SourceChange
from nodeconsole.console.health import in_window
from nodeconsole.console.host_failures import failure
from nodeconsole.console.model import Gpu, HostSnapshot, Problem, SourceState, Vm
from nodeconsole.console.reboot_impact import impact_sentence
from nodeconsole.console.root import Root
from nodeconsole.console.sources.kernel_log import KMSG, KernelLog, LogDenied, host_sources
from nodeconsole.console.vms.hints import hint_for
from nodeconsole.console.xid import AER_FATAL, AER_NONFATAL, FALLEN_OFF_BUS, FATAL, RESET_COMMAND, RESET_GPU, lookup

KEEP = 200  # events held (newest)
TAIL = 4 << 20  # a log seen for the first time is read from this many bytes before its end
STEP = 8 << 20  # at most this much new text per poll (the rest at the next)
SOURCE_KEEP = 50


def is_alarm(ev: KernelEvent) -> bool:
    """Fatal enough to show on the Overview: a fatal Xid (or Xid 79) or host failure, an uncorrectable AER
    error."""
    if ev.kind == XID:
        return ev.severity == FATAL or ev.xid == FALLEN_OFF_BUS
    if ev.kind == HOST:
        return ev.severity == FATAL
    return ev.kind == AER and ev.severity in (AER_FATAL, AER_NONFATAL)


def describe(ev: KernelEvent) -> str:
    """'Xid 79 (GPU has fallen off the bus)' / 'uncorrectable AER error (fatal)' / 'host failure D3cold (…)'."""
    if ev.kind == XID and ev.xid is not None:
        return f"Xid {ev.xid} ({lookup(ev.xid).meaning})"
    if ev.kind == HOST and ev.failure is not None:
        return f"host failure {ev.failure} ({failure(ev.failure).meaning})"
    return f"{'uncorrectable' if ev.severity != 'corrected' else 'corrected'} AER error ({ev.severity})"


def events_by_gpu(events: tuple[KernelEvent, ...], snap: HostSnapshot) -> dict[str, tuple[KernelEvent, ...]]:
    """Each GPU's events (oldest first): those naming it, AER errors a port above it reported without
    naming the device, and host failures on the other functions of its slot (events.gpu_of)."""
    from nodeconsole.console.events import below

    out: dict[str, list[KernelEvent]] = {}
    bridges = {d.address for d in snap.pci_devices if d.is_bridge}
    gpus = {g.address for g in snap.gpus}
    for ev in events:
        if ev.kind == AER and ev.gpu in bridges:
            for g in below(snap, ev.gpu):
                out.setdefault(g, []).append(ev)
        else:
            out.setdefault(gpu_of(ev, gpus), []).append(ev)
    return {k: tuple(v) for k, v in out.items()}


def event_problems(gpus: tuple[Gpu, ...], snap: HostSnapshot) -> list[Problem]:
    """One problem per unhealthy GPU with an alarming event in its window: what (the newest such event),
    when, the VM holding it and the advice — for a GPU a VM holds, about the guest and the VM (the host
    cannot reset a GPU a running VM holds)."""
    out = []
    for g in gpus:
        if not g.health.unhealthy:
            continue
        alarms = [ev for ev in in_window(g.events, g.health.since) if is_alarm(ev)]
        if not alarms:
            continue
        ev = alarms[-1]
        when = f" at {ev.when}" if ev.when != "-" else ""
        running = [v for v in snap.vms if v.name in ev.vms and v.state in ("running", "paused")]
        who = f"VM {ev.vm}" if ev.vm else "no VM"
        fix = vm_advice(g, running, ev.action) if running else ev.action
        if "reboot" in ev.action and (hit := impact_sentence(snap)):
            fix += f" ({hit})"
        out.append(Problem("error", g.address, f"{describe(ev)} on GPU {g.index} {g.address} ({who}){when}", fix))
    return out


def vm_advice(g: Gpu, running: list[Vm], action: str) -> str:
    """What to do about an event on a GPU running VMs hold: the host cannot reset it while they run."""
    names = ", ".join(v.name for v in running)
    first = hint_for(running[0], "shutdown")
    if g.owner.kind in ("mig", "vgpu"):
        many = len(running) > 1
        return (f"VM{'s' if many else ''} {names} use{'' if many else 's'} this GPU: the work on it failed; shut "
                f"{'them' if many else 'it'} down (`{first}`) or move {'them' if many else 'it'}, "
                f"then: {action} (it stops every VM on the GPU)")
    advice = (f"VM {names}'s guest drives this GPU: look inside the guest (`nvidia-smi`, its kernel log); to recover, "
              f"shut the VM down (`{first}`) — the host cannot reset a GPU a running VM holds — "
              f"then: {action}")
    if RESET_GPU.lower() in action.lower():
        advice += f"; or all in one plan: `{RESET_COMMAND} {g.address}` (stops, resets, starts the VM again)"
    return advice


class _FileCursor:
    def __init__(self) -> None:
        self.offset: int | None = None
        self.ino: int | None = None


class EventWatch:
    """Reads the new part of the host's kernel log at each poll; `events` holds the newest KEEP, oldest
    first. Not thread-safe: one poller (the collector's worker) calls `poll`."""

    def __init__(self) -> None:
        self.log = KernelLog()
        self._events: deque[KernelEvent] = deque(maxlen=KEEP)
        self._files: dict[str, _FileCursor] = {}
        self._kmsg: int | None = None
        self.error = ""  # why the log cannot be read (no root), else ""
        self.read = 0  # events read since the watch began (only grows; `events` keeps the newest KEEP)
        self.btime: float | None = None  # the host's boot time, as read with the last new events
        self.sources: deque[SourceChange] = deque(maxlen=SOURCE_KEEP)
        self._last_sources: dict[str, SourceState] = {}

    @property
    def events(self) -> tuple[KernelEvent, ...]:
        return tuple(self._events)

    def close(self) -> None:
        if self._kmsg is not None:
            os.close(self._kmsg)
            self._kmsg = None

    def poll(self, root: Root, live: bool, now: float | None = None) -> list[KernelEvent]:
        """Read what the log gained since the last poll; returns the new events (log order), their times
        on the wall clock with the host's boot time (read again whenever there are new events)."""
        new: list[KernelEvent] = []
        try:
            for rel in host_sources(root, live):
                new += self._kmsg_new(root) if rel == KMSG else self._file_new(root, rel)
            self.error = ""
        except LogDenied as e:
            self.error = f"reading {e.filename} needs root"
        except OSError as e:
            self.error = f"reading the kernel log failed: {e.strerror or e}"
        if new:
            self.btime = boot_time(root)
            new = on_wall_clock(new, self.btime, time.time() if now is None else now)
        self._events.extend(new)
        self.read += len(new)
        return new

    def _file_new(self, root: Root, rel: str) -> list[KernelEvent]:
        path = root.resolve(rel)
        if path is None:
            return []
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except PermissionError as e:
            raise LogDenied(e.errno, e.strerror, "/" + rel) from None
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return []
            cur = self._files.setdefault(rel, _FileCursor())
            if cur.offset is None:
                cur.offset = max(0, st.st_size - TAIL)
            elif cur.ino != st.st_ino or st.st_size < cur.offset:  # rotated or truncated: from its start
                cur.offset = 0
            cur.ino = st.st_ino
            if st.st_size <= cur.offset:
                return []
            data = os.pread(fd, min(STEP, st.st_size - cur.offset), cur.offset)
        finally:
            os.close(fd)
        start = cur.offset
        end = data.rfind(b"\n") + 1
        if end == 0:
            return []
        cur.offset = start + end
        return self.log.text(data[:end])

    def _kmsg_new(self, root: Root) -> list[KernelEvent]:
        if self._kmsg is None:
            path = root.resolve(KMSG)
            if path is None:
                return []
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except PermissionError as e:
                raise LogDenied(e.errno, e.strerror, "/dev/kmsg") from None
            if not stat.S_ISCHR(os.fstat(fd).st_mode):
                os.close(fd)
                return self._file_new(root, KMSG)
            self._kmsg = fd
        records = []
        for _ in range(100_000):  # the ring buffer holds far fewer; a bound all the same
            try:
                records.append(os.read(self._kmsg, 1 << 16))
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while we were away: go on with the next
                    continue
                if e.errno in (errno.EPERM, errno.EACCES):
                    raise LogDenied(e.errno, e.strerror, "/dev/kmsg") from None
                break
            if not records[-1]:
                break
        return self.log.text(b"".join(r if r.endswith(b"\n") else r + b"\n" for r in records if r))

    def note_sources(self, sources: dict[str, SourceState]) -> None:
        """Record each source whose state changed since the last snapshot (the first one is the start)."""
        for name, now in sources.items():
            was = self._last_sources.get(name)
            if was is not None and was != now and not (was.pending and now.ok):
                self.sources.append(SourceChange(time.time(), name, was, now))
            self._last_sources[name] = now

    def tied(self, snap: HostSnapshot) -> tuple[KernelEvent, ...]:
        if not self._events:  # the usual poll: nothing to tie (the VMs' holdings are not worked out)
            return ()
        return tuple(tie_to_vms(self._events, snap))
