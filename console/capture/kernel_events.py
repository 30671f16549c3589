"""The kernel-log lines a capture keeps: the lines the events source looks at (those holding NVRM, AER or
PCIe Bus Error), the first line of the record such a line continues (which names the program that logged
it) and the log's last line (its newest stamp, which `events --since` measures from).

Line distances matter to the parser (a continuation line follows its record directly; the pieces of one
event are joined within WINDOW lines), so the lines dropped between two kept ones become blank lines,
as many as there were but at most WINDOW + 1: the kept lines parse into the same events, with less.

Bounded for a sick host (console/capture/limits.py): a log is read in chunks, a line longer than
MAX_LOG_LINE is cut and marked "…[cut N bytes]" (a run of NUL bytes never becomes one huge line in
memory), of a file larger than MAX_LOG_READ only the newest part is read, and of the lines kept only
the newest MAX_LOG_KEPT bytes stay (the log is one member; a replay opens members below
MAX_MEMBER_BYTES).
"""
from __future__ import annotations

import errno
import itertools
import os
import stat
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from nodeconsole.console.capture import limits
from nodeconsole.console.root import Root
from nodeconsole.console.sources.kernel_log import _MARK as EVENT_MARK  # the parser's own line filter
from nodeconsole.console.sources.kernel_log import KERN_LOG, KMSG, WINDOW, KernelLog, host_sources

CHUNK = 1 << 16
CUT = "\u2026[cut {} bytes]".encode()


@dataclass(frozen=True)
class KeptLog:
    source: str  # the log read, as a host path ("/dev/kmsg", "/var/log/kern.log")
    rel: str  # where the kept lines go in the captured tree (root-relative)
    data: bytes
    events: int


def cut_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a stream of chunks, each with its newline (the last one may lack it), a line longer
    than MAX_LOG_LINE cut to it and marked; never more than one line's kept part in memory."""
    limit = limits.MAX_LOG_LINE
    head, cut = bytearray(), 0
    for chunk in chunks:
        pos = 0
        while pos < len(chunk):
            nl = chunk.find(b"\n", pos)
            end = len(chunk) if nl < 0 else nl
            keep = max(0, min(end - pos, limit - len(head)))
            head += chunk[pos:pos + keep]
            cut += end - pos - keep
            if nl < 0:
                break
            yield _line(head, cut) + b"\n"
            head, cut, pos = bytearray(), 0, nl + 1
    if head or cut:
        yield _line(head, cut)


def _line(head: bytearray, cut: int) -> bytes:
    return bytes(head) + CUT.replace(b"{}", str(cut).encode()) if cut else bytes(head)


def keep_lines(lines: Iterator[bytes]) -> bytes:
    """The event lines of a log (each with its newline) and its last line, gaps kept short; of those,
    the newest MAX_LOG_KEPT bytes. A kept line that starts with blanks keeps the line its record starts
    with too (whose program logged it)."""
    out: deque[bytes] = deque()
    size = 0
    last_kept = -1
    last: tuple[int, bytes] | None = None
    head: tuple[int, bytes] | None = None  # the last line starting with no blank

    def add(piece: bytes) -> None:
        nonlocal size
        out.append(piece)
        size += len(piece)
        while size > limits.MAX_LOG_KEPT and out:
            size -= len(out.popleft())

    def keep(k: int, line: bytes) -> None:
        nonlocal last_kept
        if last_kept >= 0:
            add(b"\n" * min(k - last_kept - 1, WINDOW + 1))
        add(line.rstrip(b"\n") + b"\n")
        last_kept = k

    for n, line in enumerate(lines):
        last = (n, line)
        if line.strip() and not line[:1].isspace():
            head = (n, line)
        if EVENT_MARK.search(line):
            if head is not None and head[0] > last_kept and head[0] < n:
                keep(*head)
            keep(n, line)
    if last is not None and last[0] != last_kept:
        keep(*last)
    return b"".join(out)


def _file_lines(path: str) -> Iterator[bytes]:
    """The lines of the newest MAX_LOG_READ bytes of the file at `path` (from its first whole line)."""
    with open(path, "rb") as f:
        skip = max(0, os.fstat(f.fileno()).st_size - limits.MAX_LOG_READ)
        if skip:
            f.seek(skip - 1)  # the line holding byte skip-1 is partial (or that byte is its newline)
        lines = cut_lines(iter(lambda: f.read(CHUNK), b""))
        yield from itertools.islice(lines, 1 if skip else 0, None)


def _kmsg_lines(path: str) -> Iterator[bytes]:
    """/dev/kmsg's records from the start of the ring buffer, one per read, until none is left."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISCHR(os.fstat(fd).st_mode):
            yield from _file_lines(path)
            return
        while True:
            try:
                record = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while reading: go on with the next record
                    continue
                raise
            if not record:
                return
            yield from cut_lines([record.rstrip(b"\n") + b"\n"])
    finally:
        os.close(fd)


def kept_logs(root: Root, live: bool) -> list[KeptLog]:
    """The event lines of each log the events source reads on this host. A live host's /dev/kmsg goes
    to var/log/kern.log in the captured tree (a replay reads a tree's logs). PermissionError is
    raised (the log needs root)."""
    out = []
    for rel in host_sources(root, live):
        path = root.resolve(rel)
        if path is None:
            continue
        if rel == KMSG:
            data, dest = keep_lines(_kmsg_lines(path)), KERN_LOG
        else:
            try:
                if not stat.S_ISREG(os.stat(path).st_mode):
                    continue
            except OSError:
                continue
            data, dest = keep_lines(_file_lines(path)), rel
        events = len(KernelLog().text(data))
        out.append(KeptLog("/" + rel, dest, data, events))
    return out
