"""GPU events from the kernel log: NVIDIA Xids, "fallen off the bus" (Xid 79), PCIe AER errors, and the
host's failures around passthrough (D3cold, RmInitAdapter, a BAR, a reset: console/sources/host_lines.py).

Reads the text forms admins paste, mixed freely in one file:
- `dmesg`: `[ 1843.308145] NVRM: …`, and `dmesg -T`: `[Sun Feb 23 16:24:18 2025] NVRM: …`;
- `journalctl -k` / kern.log: `Oct 02 10:41:07 host kernel: NVRM: …` (ISO stamps and RFC 5424 too);
- raw kmsg records: `3,1234,5678901,-;NVRM: …` (/dev/kmsg; the time is shown in seconds, like dmesg).
Where the form names the program that logged each line (syslog, the journal), only the kernel's lines
are read (console/sources/kernel_prefix.py): another program's line is never an event, whatever it says.
A line that starts with blanks and no stamp continues the record above it (dmesg's multi-line records,
kmsg continuation lines, the journal's multi-line messages); kmsg's escaped newlines (`\\x0a`) split a
record the same way.

Streaming: the file is read in 1 MiB blocks and only the lines holding "NVRM", "AER", "PCIe Bus Error" or
a host failure's fixed text (found by a search over the block) are decoded and matched; memory stays flat.
Every line is cut at MAX_LINE before it is matched, and no pattern has two unbounded repeats that can
take the same characters: a line of any length and padding costs time in proportion to its length.
The last stamp of each clock in every block is noted as well, so that --since measures from the log's
newest line, event or not. The pieces of one event may span a few lines (the three-line
fallen-off-the-bus message, an AER summary and the device's own line, an Xid 79 with its "GPU has fallen
off the bus" line): events are held for WINDOW lines so those become one event.

Trees are read through console/root.Root (contained: a log whose path leads out of the root is not
read); a live host's log is /dev/kmsg, read non-blocking from the start of the ring buffer.
"""
from __future__ import annotations

import errno
import functools
import io
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol

from nodeconsole.console.events import AER, HOST, SYSLOG, XID, KernelEvent
from nodeconsole.console.host_failures import failure
from nodeconsole.console.pciaddr import format_pci_address
from nodeconsole.console.root import Root
from nodeconsole.console.sources.host_lines import MARKS, fold, host_line
from nodeconsole.console.sources.kernel_prefix import BLOCK_STAMPS, GROUPS, PREFIX, Time, foreign, head_foreign
from nodeconsole.console.sources.kernel_prefix import stamp as _stamp
from nodeconsole.console.xid import AER_ACTIONS, AER_CLASS_NAMES, FALLEN_OFF_BUS, lookup, severity_action

CHUNK = 1 << 20
MAX_LINE = 16 << 10  # a kernel record is at most about 1 KiB; longer lines are cut here
WINDOW = 10  # lines over which the pieces of one event are joined
KMSG = "dev/kmsg"
KERN_LOG = "var/log/kern.log"
SIM_KMSG = ".sim/kmsg"  # the demo host's kernel log, as kmsg records

_MARK = re.compile(b"|".join([rb"NVRM|AER|PCIe Bus Error", *map(re.escape, MARKS)]))

_H = "[0-9a-fA-F]"
_ADDR = rf"(?:{_H}{{4,8}}:)?{_H}{{2}}:{_H}{{2}}(?:\.[0-7])?"  # Xid lines omit the function
_ADDR_F = rf"{_H}{{4,8}}:{_H}{{2}}:{_H}{{2}}\.[0-7]"

_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?(?P<addr>{_ADDR})\): ?(?P<code>[0-9]{{1,6}})\b,?\s*(?P<rest>.*)",
                  re.A | re.S)
_PID = re.compile(r"pid=(?:'([^']*)'|\"([^\"]*)\"|([^,\s]*))\s*(?:,\s*|$)")
_NAME = re.compile(r"name=(?:'([^']*)'\s*|\"([^\"]*)\"\s*|([^,]*))(?:,\s*|$)")  # the name is stripped
_THE_GPU = re.compile(rf"NVRM: The NVIDIA GPU (?P<addr>{_ADDR})\b", re.A)
_ANY_ADDR = re.compile(rf"(?<![0-9a-fA-F:])(?:PCI:)?({_ADDR})(?![0-9a-fA-F:])", re.A)
_FALLEN = "fallen off the bus"
_CLASS = r"(?P<cls>Corrected|Uncorrected \(Non-Fatal\)|Uncorrected \(Fatal\))"
_AER_SUMMARY = re.compile(rf"[\w.-]{{1,64}} (?P<port>{_ADDR_F}): AER: (?:Multiple )?{_CLASS} error (?:message )?"
                          rf"received(?: from|:) (?:(?P<dev>{_ADDR_F})|id=(?P<id>{_H}{{4}}))", re.A)
_AER_DEVICE = re.compile(rf"[\w.-]{{1,64}} (?P<dev>{_ADDR_F}): (?:AER: )?PCIe Bus Error: severity={_CLASS}", re.A)


class LogDenied(PermissionError):
    """The host's log may not be read: /dev/kmsg needs root (or CAP_SYSLOG under kernel.dmesg_restrict),
    kern.log is usually readable by root and the adm group only."""


class Readable(Protocol):
    def read(self, n: int, /) -> Any: ...


@functools.lru_cache(maxsize=4096)  # a log names the same few addresses over and over
def normalise(addr: str) -> str:
    """`0000:3b:00`, `3b:00`, `00000009:01:00.0` → `DDDD:BB:DD.F` (function 0 when omitted)."""
    head, _, fn = addr.partition(".")
    parts = head.split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    return format_pci_address(int(parts[0], 16), int(parts[1], 16), int(parts[2], 16), int(fn or 0))


@dataclass
class _Held:
    line: int
    origin: str  # "xid", "bus" (fallen off the bus without an Xid), "aer", "aer-summary", "aer-folded", "host"…
    kind: str
    gpu: str
    xid: int | None
    pid: int | None
    process: str | None
    text: str
    severity: str
    action: str
    port: str | None
    time: Time
    failure: str | None = None

    def event(self) -> KernelEvent:
        when, clock, stamp = self.time
        return KernelEvent(kind=self.kind, time=when, gpu=self.gpu, xid=self.xid, pid=self.pid,
                           process=self.process, text=self.text, severity=self.severity, action=self.action,
                           port=self.port, clock=clock, stamp=stamp, failure=self.failure)


_NO_TIME: Time = (None, None, None)


def _pid_name(rest: str) -> tuple[int | None, str | None, str]:
    """`pid=…, name=…, text` (each part optional, values quoted or not) → pid, process, text."""
    pid: int | None = None
    process: str | None = None
    m = _PID.match(rest)
    if m:
        raw = next((g for g in m.groups() if g is not None), "")
        pid = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 10 else None
        rest = rest[m.end():]
    m = _NAME.match(rest)
    if m:
        name = next((g for g in m.groups() if g is not None), "").strip()
        process = None if name in ("", "<unknown>") else name
        rest = rest[m.end():]
    return pid, process, rest.strip()


class _FileParser:
    """The line state of one log: the record above (for continuation lines), a pending three-line
    fallen-off-the-bus message, and the events held for WINDOW lines."""

    def __init__(self, newest: dict[str, float]) -> None:
        self.newest = newest
        self.held: list[_Held] = []
        # line number and time of the last candidate record, and whether it is another program's
        self.last: tuple[int, Time, bool] = (-2, _NO_TIME, False)
        self.pending: tuple[int, str, list[str], Time] | None = None

    def note(self, clock: str | None, stamp: float | None) -> None:
        if clock is None or stamp is None:
            return
        if clock == SYSLOG or stamp > self.newest.get(clock, float("-inf")):
            self.newest[clock] = stamp  # syslog stamps have no year: the last one is the newest

    def sample(self, block: bytes) -> None:
        """The stamps of the last line of each clock in a block (whether it holds an event or not)."""
        data = b"\n" + block
        for pattern, names in zip(BLOCK_STAMPS, GROUPS):
            found = pattern.findall(data)
            if found:
                last = found[-1] if isinstance(found[-1], tuple) else (found[-1],)
                _, clock, stamp = _stamp({n: v.decode() if v else None for n, v in zip(names, last)})
                self.note(clock, stamp)

    def line(self, lineno: int, raw: bytes, head: bool | None = None) -> list[KernelEvent] | None:
        """Take one candidate line (cut at MAX_LINE); returns the events now ready (held WINDOW lines), if
        any. `head`: for a line starting with blanks that does not follow the last candidate, whether
        the record it continues is another program's (kernel_prefix.head_foreign)."""
        text = raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r\n")
        body = text.lstrip()
        m = PREFIX.match(body)
        if m:
            when = _stamp(m)
            self.note(when[1], when[2])
            other = foreign(m)
            msg = body[m.end():]
            parts = msg.split("\\x0a") if m.group("usec") is not None and "\\x0a" in msg else [msg]
        else:
            continues = len(body) != len(text) and self.last[0] == lineno - 1
            when = self.last[1] if continues else _NO_TIME
            other = self.last[2] if continues else bool(head) and len(body) != len(text)
            parts = [body]
        self.last = (lineno, when, other)
        if not other:  # another program's line (or its continuation) is never an event
            for part in parts:
                self._message(lineno, part, when)
        if not self.held or self.held[0].line + WINDOW >= lineno:
            return None
        ready = []
        while self.held and self.held[0].line + WINDOW < lineno:
            ready.append(self.held.pop(0).event())
        return ready

    def finish(self) -> Iterator[KernelEvent]:
        for h in self.held:
            yield h.event()
        self.held.clear()

    # -- one message (the text after the stamp) --
    def _message(self, lineno: int, msg: str, when: Time) -> None:
        i = msg.find("NVRM:")
        if (hl := host_line(msg)) is not None:
            if not fold(self.held, lineno, hl, WINDOW) and hl.gpu is not None:  # else folded or dropped
                f = failure(hl.name)
                self.held.append(_Held(lineno, "host", HOST, hl.gpu, None, None, None, hl.text, f.severity,
                                       f.action, None, when, hl.name))
        elif i >= 0:
            self._nvrm(lineno, msg[i:], when)
        else:
            self._aer(lineno, msg, when)

    def _nvrm(self, lineno: int, msg: str, when: Time) -> None:
        m = _XID.match(msg)
        if m:
            code = int(m.group("code"))
            pid, process, text = _pid_name(m.group("rest"))
            severity, action = severity_action(code, text)
            ev = _Held(lineno, "xid", XID, normalise(m.group("addr")), code, pid, process, text, severity, action,
                       None, when)
            if code == FALLEN_OFF_BUS:
                for h in self.held:  # the same loss told without the Xid just before: one event
                    if h.origin == "bus" and h.gpu == ev.gpu and lineno - h.line <= WINDOW:
                        ev.line = h.line
                        self.held[self.held.index(h)] = ev
                        return
            self.held.append(ev)
            return
        m = _THE_GPU.match(msg)
        if m:  # `NVRM: The NVIDIA GPU 0000:b3:00.0` / `(PCI ID: …) installed in this system has` / `fallen off …`
            self.pending = (lineno, normalise(m.group("addr")), [msg[5:].strip()], when)
            self._pending_done()
            return
        if self.pending is not None and lineno - self.pending[0] <= 3:
            self.pending[2].append(msg[5:].strip())
            self._pending_done()
            return
        if _FALLEN in msg:
            a = _ANY_ADDR.search(msg)
            if a:
                self._bus(lineno, normalise(a.group(1)), msg[5:].strip(), when)

    def _pending_done(self) -> None:
        assert self.pending is not None
        line, gpu, parts, when = self.pending
        text = " ".join(p for p in parts if p)
        if _FALLEN in text:
            self.pending = None
            self._bus(line, gpu, text, when)
        elif len(parts) >= 4:
            self.pending = None

    def _bus(self, lineno: int, gpu: str, text: str, when: Time) -> None:
        """Fallen off the bus without an Xid line: Xid 79, unless that Xid was just logged for the GPU."""
        if any(h.origin == "xid" and h.xid == FALLEN_OFF_BUS and h.gpu == gpu and lineno - h.line <= WINDOW
               for h in self.held):
            return
        info = lookup(FALLEN_OFF_BUS)
        self.held.append(_Held(lineno, "bus", XID, gpu, FALLEN_OFF_BUS, None, None, text, info.severity,
                               info.action, None, when))

    def _aer(self, lineno: int, msg: str, when: Time) -> None:
        m = _AER_SUMMARY.search(msg) if ": AER: " in msg else None
        if m:
            cls = AER_CLASS_NAMES[m.group("cls")]
            port = normalise(m.group("port"))
            if m.group("dev"):
                dev = normalise(m.group("dev"))
            elif m.group("id"):  # old kernels: id=BBDF (bus, device << 3 | function) in the port's domain
                n = int(m.group("id"), 16)
                dev = format_pci_address(int(port.split(":")[0], 16), n >> 8, (n >> 3) & 0x1F, n & 7)
            else:
                dev = port
            self.held.append(_Held(lineno, "aer-summary", AER, dev, None, None, None, msg[m.start():], cls,
                                   AER_ACTIONS[cls], port, when))
            return
        m = _AER_DEVICE.search(msg) if "PCIe Bus Error: severity=" in msg else None
        if m:
            cls = AER_CLASS_NAMES[m.group("cls")]
            dev = normalise(m.group("dev"))
            for h in reversed(self.held):  # the device's own line after the port's summary: one event
                if h.origin == "aer-summary" and h.gpu == dev and h.severity == cls and lineno - h.line <= WINDOW:
                    h.text = f"{h.text}; {msg[m.start():]}"
                    h.origin = "aer-folded"
                    return
            self.held.append(_Held(lineno, "aer", AER, dev, None, None, None, msg[m.start():], cls,
                                   AER_ACTIONS[cls], None, when))


def _blocks(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """Blocks of whole lines (each ends with a newline); a line longer than MAX_LINE is cut there."""
    tail = b""
    dropping = False  # the current line passed MAX_LINE: skip to its end
    while data := read(CHUNK):
        if dropping:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data, dropping = data[nl:], False
        block = tail + data if tail else data
        end = block.rfind(b"\n")
        if end < 0:
            tail = block
        else:
            tail = block[end + 1:]
            yield block[:end + 1]
        if len(tail) > MAX_LINE:
            tail, dropping = tail[:MAX_LINE], True
    if tail:
        yield tail + b"\n"


class _TextAsBytes:
    def __init__(self, f: io.TextIOBase) -> None:
        self.f = f

    def read(self, n: int) -> bytes:
        return self.f.read(n).encode("utf-8", "surrogateescape")


class KernelLog:
    """Reads events from one or more logs. `newest` holds each clock's newest stamp seen (events.within
    judges --since against it); `lines` counts the lines read."""

    def __init__(self) -> None:
        self.newest: dict[str, float] = {}
        self.lines = 0

    def events(self, f: Readable) -> Iterator[KernelEvent]:
        """The events of one log (a binary or text file object), in log order."""
        if isinstance(f, io.TextIOBase):
            buf = getattr(f, "buffer", None)
            read = buf.read if buf is not None else _TextAsBytes(f).read
        else:
            read = f.read
        parser = _FileParser(self.newest)
        base = 0  # line number of the block's first line
        carry = False  # the record open at the end of the last block is another program's
        for block in _blocks(read):
            pos, counted, line = 0, 0, base
            while (m := _MARK.search(block, pos)) is not None:
                start = block.rfind(b"\n", 0, m.start()) + 1
                end = block.find(b"\n", m.start())
                line += block.count(b"\n", counted, start)
                counted = start
                if m.end() - start > MAX_LINE:  # past the cut: not a candidate, as a block's cut tail is not
                    pos = end + 1
                    continue
                head = None
                if block[start:start + 1].isspace() and parser.last[0] != line - 1:
                    head = head_foreign(block, start, pos, MAX_LINE)
                    if head is None:
                        head = parser.last[2] if pos else carry
                ready = parser.line(line, block[start:end], head)
                if ready:
                    yield from ready
                pos = end + 1
            tail = head_foreign(block, len(block), pos, MAX_LINE)
            carry = tail if tail is not None else (parser.last[2] if pos else carry)
            base = line + block.count(b"\n", counted)
            parser.sample(block)
        self.lines += base
        yield from parser.finish()

    def text(self, text: str | bytes) -> list[KernelEvent]:
        """The events of a log held in memory (tests, pasted text)."""
        data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
        return list(self.events(io.BytesIO(data)))


def parse(text: str | bytes) -> list[KernelEvent]:
    return KernelLog().text(text)


# -- the host's log --
def _open_in_root(root: Root, rel: str, whole: bool) -> IO[bytes] | None:
    """A regular file below the root opened for streaming, None when absent, not a regular file or
    leading out of the root. PermissionError is raised."""
    path = root.resolve(rel)
    if path is None:
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if whole else os.O_NOFOLLOW))
    except PermissionError:
        raise
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb", buffering=0)


class _KmsgRecords:
    """/dev/kmsg as a stream: each read() returns one record; EAGAIN (no more) is the end."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, n: int) -> bytes:
        while True:
            try:
                return os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return b""
            except PermissionError as e:
                raise LogDenied(e.errno, e.strerror, "/dev/kmsg") from None
            except OSError as e:
                if e.errno == errno.EPIPE:  # records overwritten while reading: go on with the next
                    continue
                return b""


def host_sources(root: Root, live: bool) -> list[str]:
    """The logs a host's events are read from: /dev/kmsg on the machine we run on (kern.log when it
    has none), else the tree's var/log/kern.log and the demo's .sim/kmsg, where present."""
    if live:
        return [KMSG] if root.exists(KMSG) else ([KERN_LOG] if root.exists(KERN_LOG) else [])
    return [rel for rel in (KERN_LOG, SIM_KMSG) if root.exists(rel)]


def read_host(root: Root, live: bool, log: KernelLog) -> Iterator[KernelEvent]:
    """The host's events, from the sources above in turn. Raises LogDenied when one may not be read."""
    whole = os.path.realpath(root.path) == "/"
    for rel in host_sources(root, live):
        if rel == KMSG:
            path = root.resolve(KMSG)
            if path is None:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except PermissionError as e:
                raise LogDenied(e.errno, e.strerror, "/dev/kmsg") from None
            except OSError:
                continue
            try:
                if stat.S_ISCHR(os.fstat(fd).st_mode):
                    yield from log.events(_KmsgRecords(fd))
                    continue
            finally:
                os.close(fd)
        try:
            f = _open_in_root(root, rel, whole)
        except PermissionError as e:
            raise LogDenied(e.errno, e.strerror, "/" + rel) from None
        if f is not None:
            with f:
                yield from log.events(f)
