"""The capture archive on disk: written deterministically (the same entries give the same bytes: sorted
members, mtime 0, uid/gid 0, fixed modes, gzip without a name or time) and extracted defensively (an
archive is input from elsewhere: absolute paths, `..`, links leading out, devices, hard links, unknown
member types and oversized members are refused, and nothing is ever written through a link).
"""
from __future__ import annotations

import gzip
import io
import json
import os
import posixpath
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from nodeconsole.console.capture import FORMAT, MANIFEST, ROOT_DIR, SCHEMA
from nodeconsole.console.capture.recording import DIR, FILE, LINK, Entry

DIR_MODE, FILE_MODE, LINK_MODE = 0o755, 0o644, 0o777
# Limits on what an archive may hold (a capture of a large host is a few MiB).
MAX_ARCHIVE = 512 << 20  # compressed bytes
MAX_MEMBERS = 500_000
MAX_MEMBER = 64 << 20  # one file (the audit log is the largest)
MAX_TOTAL = 2 << 30  # all files together
TOPS = {MANIFEST, "nvml.json", "audit.jsonl", "doctor.json", ROOT_DIR, "libvirt"}


class ArchiveError(Exception):
    """Not a capture this console can open (the reason in one line)."""


# -- writing ------------------------------------------------------------------------------------------

def with_parents(entries: Mapping[str, Entry]) -> dict[str, Entry]:
    """`entries` plus a directory entry for every parent they lack."""
    out = dict(entries)
    for path in entries:
        head = posixpath.dirname(path)
        while head and head not in out:
            out[head] = Entry(DIR)
            head = posixpath.dirname(head)
    return out


def write_archive(entries: Mapping[str, Entry], out: IO[bytes], level: int = 6) -> None:
    """Write `entries` (archive path → entry) as a gzip-compressed tar: the manifest first, then every
    path in sorted order, parents before children."""
    members = with_parents(entries)
    order = sorted(members, key=lambda p: (p != MANIFEST, p))
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=level) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tf:
            for path in order:
                entry = members[path]
                info = tarfile.TarInfo(path)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if entry.kind == DIR:
                    info.type, info.mode = tarfile.DIRTYPE, DIR_MODE
                    tf.addfile(info)
                elif entry.kind == LINK:
                    info.type, info.mode, info.linkname = tarfile.SYMTYPE, LINK_MODE, entry.target
                    tf.addfile(info)
                else:
                    info.type, info.mode, info.size = tarfile.REGTYPE, FILE_MODE, len(entry.data)
                    tf.addfile(info, io.BytesIO(entry.data))


def archive_bytes(entries: Mapping[str, Entry], level: int = 6) -> bytes:
    buf = io.BytesIO()
    write_archive(entries, buf, level)
    return buf.getvalue()


# -- reading ------------------------------------------------------------------------------------------

def _check_name(name: str) -> str:
    if not name or name.startswith("/") or "\x00" in name:
        raise ArchiveError(f"member {name!r} has an absolute or empty path")
    parts = name.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ArchiveError(f"member {name!r} leads out of the archive (.. or empty components)")
    return "/".join(parts)


def _check_link(name: str, target: str) -> None:
    if not target or target.startswith("/") or "\x00" in target:
        raise ArchiveError(f"link {name!r} points at an absolute path {target!r}")
    top = name.split("/", 1)[0]
    dest = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if not (dest == top or dest.startswith(top + "/")):
        raise ArchiveError(f"link {name!r} points out of the archive ({target!r})")


def read_entries(path: str | os.PathLike[str]) -> dict[str, Entry]:
    """Every entry of the archive at `path`, checked (ArchiveError: the first problem found)."""
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise ArchiveError(e.strerror or str(e)) from None
    if size > MAX_ARCHIVE:
        raise ArchiveError(f"larger than {MAX_ARCHIVE >> 20} MiB")
    entries: dict[str, Entry] = {}
    total = 0
    try:
        with tarfile.open(path, mode="r:*") as tf:
            for m in tf:
                name = _check_name(m.name)
                if name.split("/", 1)[0] not in TOPS:
                    continue  # something a later release adds: not ours to serve
                if name in entries:
                    raise ArchiveError(f"member {name!r} appears twice")
                if len(entries) >= MAX_MEMBERS:
                    raise ArchiveError(f"more than {MAX_MEMBERS} members")
                if m.isdir():
                    entries[name] = Entry(DIR)
                elif m.issym():
                    _check_link(name, m.linkname)
                    entries[name] = Entry(LINK, target=m.linkname)
                elif m.isreg():
                    if m.size > MAX_MEMBER or total + m.size > MAX_TOTAL:
                        raise ArchiveError(f"member {name!r} is too large ({m.size} bytes)")
                    total += m.size
                    f = tf.extractfile(m)
                    data = f.read() if f is not None else b""
                    entries[name] = Entry(FILE, data)
                else:
                    kind = ("a hard link" if m.islnk() else "a device file" if m.isdev() else
                            "a FIFO" if m.isfifo() else "an unsupported member type")
                    raise ArchiveError(f"member {name!r} is {kind}")
    except ArchiveError:
        raise
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile, ValueError) as e:
        raise ArchiveError(f"not a readable archive ({type(e).__name__}: {e})") from None
    return entries


def manifest_of(entries: Mapping[str, Entry]) -> dict[str, Any]:
    """The archive's manifest, checked to be a capture of a schema this release reads."""
    entry = entries.get(MANIFEST)
    if entry is None or entry.kind != FILE:
        raise ArchiveError(f"no {MANIFEST}: not a nodeconsole capture")
    try:
        manifest = json.loads(entry.data)
    except ValueError as e:
        raise ArchiveError(f"{MANIFEST} is not JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError("not a nodeconsole capture (wrong format in the manifest)")
    schema = manifest.get("schema")
    if not isinstance(schema, int) or not 1 <= schema <= SCHEMA:
        raise ArchiveError(f"capture schema {schema!r} is not one this release reads (1..{SCHEMA})")
    return manifest


def extract(entries: Mapping[str, Entry], dest: Path) -> None:
    """Lay `entries` out below the empty directory `dest`: directories, then files (created, never
    opened through a link), then links, each checked to resolve inside `dest`."""
    base = os.path.realpath(dest)
    for name, entry in sorted(entries.items()):
        if entry.kind == DIR:
            os.makedirs(os.path.join(base, name), mode=DIR_MODE, exist_ok=True)
    checked: set[str] = set()
    for name, entry in sorted(entries.items()):
        if entry.kind != FILE:
            continue
        path = os.path.join(base, name)
        parent = os.path.dirname(path)
        if parent not in checked:
            os.makedirs(parent, mode=DIR_MODE, exist_ok=True)
            if os.path.realpath(parent) != parent:  # no links exist yet; this is belt and braces
                raise ArchiveError(f"member {name!r} would be written through a link")
            checked.add(parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
        with os.fdopen(fd, "wb") as f:
            f.write(entry.data)
    links = [(name, entry.target) for name, entry in sorted(entries.items()) if entry.kind == LINK]
    for name, target in links:
        path = os.path.join(base, name)
        os.makedirs(os.path.dirname(path), mode=DIR_MODE, exist_ok=True)
        try:
            os.symlink(target, path)
        except FileExistsError:
            raise ArchiveError(f"link {name!r} collides with another member") from None
    for name, _target in links:  # a chain of links that leads out (q -> ., r -> q/.., p -> r/../x)
        top = os.path.join(base, name.split("/", 1)[0])
        real = os.path.realpath(os.path.join(base, name))
        if not (real == top or real.startswith(top + os.sep)):
            raise ArchiveError(f"link {name!r} leads out of the archive")
