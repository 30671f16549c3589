"""A capture's tar stream checked from its raw 512-byte headers before tarfile parses any of it.

`Unpacked` is the archive decompressed (gzip, xz, bzip2 or plain) behind a bound on the bytes it yields:
a gzip bomb counts against limits.MAX_TOTAL_BYTES. `prescan` walks the headers as tarfile would (same
number fields, same checksums, the same rule for which members carry data, pax `size` overrides) and
refuses, before reading their data: a GNU long name/link record or pax header over MAX_HEADER_FIELD,
a chain of extension headers, a pax header that is not well-formed records or holds a long run of digits
(tarfile's pax regexes are quadratic on those on interpreters without the CVE-2024-6232 fix; with runs
of at most MAX_PAX_DIGITS and MAX_PAX_TOTAL bytes of pax headers in all, their cost is small), sparse and
unknown member types, more than MAX_MEMBERS members, a member over MAX_MEMBER_BYTES, and more than
MAX_TOTAL_BYTES in all. No regex runs over unbounded data here.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import zlib
from dataclasses import dataclass
from types import TracebackType
from typing import IO

from nodeconsole.console.capture import limits

BLOCK = 512
READ_AHEAD = 64 << 10  # tarfile's stream reads ahead one record (10 KiB) past the end of the archive
EXTENSIONS = {b"L": "long name", b"K": "long link name", b"x": "pax"}
# ustar types tarfile reads as members; hard links, devices and FIFOs pass here (no data follows them)
# and are refused by name when extracted.
MEMBER_TYPES = frozenset({b"0", b"\0", b"7", b"1", b"2", b"3", b"4", b"5", b"6"})
_DATA_TYPES = frozenset({b"0", b"\0", b"7"})
_HIGH = bytes(range(128, 256))


class ArchiveError(Exception):
    """Not a capture this console can open (the reason in one line)."""


def unreadable(detail: str) -> ArchiveError:
    return ArchiveError(f"not a readable archive ({detail})")


class Unpacked:
    """The archive at `path` decompressed, yielding at most `limit` bytes (ArchiveError past them)."""

    def __init__(self, path: str | os.PathLike[str], limit: int) -> None:
        self.file: IO[bytes] = open(path, "rb")
        magic = self.file.read(6)
        self.file.seek(0)
        self.stream: IO[bytes] | gzip.GzipFile | lzma.LZMAFile | bz2.BZ2File
        if magic.startswith(b"\x1f\x8b"):
            self.stream = gzip.GzipFile(fileobj=self.file, mode="rb")
        elif magic.startswith(b"\xfd7zXZ\x00"):
            self.stream = lzma.LZMAFile(self.file)
        elif magic.startswith(b"BZh"):
            self.stream = bz2.BZ2File(self.file)
        else:
            self.stream = self.file
        self.limit = limit
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        room = self.limit - self.count + 1
        n = room if n is None or n < 0 else min(n, room)
        try:
            data = self.stream.read(n)
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:
            raise unreadable(f"{type(e).__name__}: {e}") from None
        self.count += len(data)
        if self.count > self.limit:
            raise ArchiveError(f"more than {limits.MAX_TOTAL_BYTES >> 20} MiB unpacked")
        return data

    def exact(self, n: int) -> bytes:
        parts, got = [], 0
        while got < n:
            data = self.read(min(n - got, 1 << 20))
            if not data:
                break
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def close(self) -> None:
        if self.stream is not self.file:
            self.stream.close()
        self.file.close()

    def __enter__(self) -> Unpacked:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


@dataclass
class Scan:
    members: int = 0
    unpacked: int = 0  # bytes up to the end of the archive
    pax: int = 0  # bytes of pax headers


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _number(field: bytes, offset: int) -> int:
    """A header number as tarfile's nti() reads it (octal text, or base-256 with a 0x80/0xff mark)."""
    if field[0] in (0o200, 0o377):
        value = int.from_bytes(field[1:], "big")
        if field[0] == 0o377:
            raise unreadable(f"a negative number in the header at byte {offset}")
        return value
    try:
        return int(field.split(b"\0", 1)[0].decode("ascii").strip() or "0", 8)
    except ValueError:
        raise unreadable(f"a bad number in the header at byte {offset}") from None


def _check_sum(block: bytes, offset: int) -> None:
    """tarfile's check: the sum of the header's bytes (the checksum field as spaces), unsigned or signed."""
    body = block[:148] + b" " * 8 + block[156:]
    unsigned, stored = sum(body), _number(block[148:156], offset)
    if stored != unsigned and stored != unsigned - 256 * (512 - len(body.translate(None, _HIGH))):
        raise unreadable(f"a bad header checksum at byte {offset}")


def _name(block: bytes, long_name: bytes | None) -> str:
    raw = long_name if long_name is not None else block[0:100]
    if long_name is None and block[257:263] == b"ustar\0" and block[345]:
        raw = block[345:500].split(b"\0", 1)[0] + b"/" + raw
    return raw.split(b"\0", 1)[0][:200].decode("utf-8", "replace")


def pax_size(data: bytes, size: int, offset: int) -> int | None:
    """The `size` a pax header's records give (None: none). The records must tile the header exactly,
    the padding after them be NUL (tarfile reads on into it), and no run of digits be long."""
    if re.search(rb"[0-9]{%d}" % (limits.MAX_PAX_DIGITS + 1), data):
        raise ArchiveError(f"a pax header at byte {offset} holds a run of more than {limits.MAX_PAX_DIGITS} digits")
    if data[size:].count(0) != len(data) - size:
        raise unreadable(f"data after the records of the pax header at byte {offset}")
    found, pos = None, 0
    while pos < size:
        space = data.find(b" ", pos, min(pos + 12, size))
        length = int(data[pos:space]) if space > pos and data[pos:space].isdigit() else 0
        end = pos + length
        equals = data.find(b"=", space + 1, end)
        if length < 5 or end > size or data[end - 1:end] != b"\n" or equals <= space + 1:
            raise unreadable(f"a malformed record in the pax header at byte {offset}")
        keyword, value = data[space + 1:equals], data[equals + 1:end - 1]
        if keyword.startswith(b"GNU.sparse"):
            raise ArchiveError(f"a sparse member (pax header at byte {offset})")
        if keyword == b"size":
            if not (value.isdigit() and len(value) <= 20):
                raise unreadable(f"a bad size in the pax header at byte {offset}")
            found = int(value)
        pos = end
    return found


def prescan(src: Unpacked) -> Scan:
    """Walk every header of `src` up to the end of the archive (ArchiveError: the first problem)."""
    scan = Scan()
    chain, long_name, size_override = 0, None, None
    while True:
        offset = src.count
        block = src.exact(BLOCK)
        if len(block) < BLOCK or block.count(0) == BLOCK:  # the end, where tarfile ends too
            if offset == 0:
                raise unreadable("empty or truncated")
            if chain:
                raise unreadable(f"an extension header at the end (byte {offset})")
            scan.unpacked = src.count
            return scan
        _check_sum(block, offset)
        kind, size = block[156:157], _number(block[124:136], offset)
        if kind in EXTENSIONS:
            chain += 1
            if chain > limits.MAX_HEADER_CHAIN:
                raise ArchiveError(f"more than {limits.MAX_HEADER_CHAIN} extension headers in a row (byte {offset})")
            if size > limits.MAX_HEADER_FIELD:
                raise ArchiveError(f"a {EXTENSIONS[kind]} header of {size} bytes at byte {offset} "
                                   f"(at most {limits.MAX_HEADER_FIELD})")
            data = src.exact(_padded(size))
            if len(data) < _padded(size):
                raise unreadable("truncated")
            if kind == b"x":
                scan.pax += len(data)
                if scan.pax > limits.MAX_PAX_TOTAL:
                    raise ArchiveError(f"more than {limits.MAX_PAX_TOTAL >> 10} KiB of pax headers")
                size_override = pax_size(data, size, offset)
            elif kind == b"L":
                long_name = data[:size]
            continue
        if kind not in MEMBER_TYPES:
            raise ArchiveError(f"member {_name(block, long_name)!r} is of an unsupported type {kind!r}")
        scan.members += 1
        if scan.members > limits.MAX_MEMBERS:
            raise ArchiveError(f"more than {limits.MAX_MEMBERS} members")
        size = size if size_override is None else size_override
        directory = kind == b"\0" and block[0:100].split(b"\0", 1)[0].endswith(b"/")  # old-style directory
        if kind in _DATA_TYPES and not directory:
            _skip_data(src, block, long_name, size)
        chain, long_name, size_override = 0, None, None


def _skip_data(src: Unpacked, block: bytes, long_name: bytes | None, size: int) -> None:
    if size > limits.MAX_MEMBER_BYTES:
        raise ArchiveError(f"member {_name(block, long_name)!r} is too large ({size} bytes; "
                           f"at most {limits.MAX_MEMBER_BYTES >> 20} MiB a member)")
    if src.count + _padded(size) > limits.MAX_TOTAL_BYTES:
        raise ArchiveError(f"more than {limits.MAX_TOTAL_BYTES >> 20} MiB unpacked")
    left = _padded(size)
    while left:
        got = len(src.read(min(left, 1 << 20)))
        if not got:
            raise unreadable("truncated")
        left -= got
