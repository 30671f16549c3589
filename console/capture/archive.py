"""The capture archive on disk: written deterministically (the same entries give the same bytes: sorted
members, mtime 0, uid/gid 0, fixed modes, gzip without a name or time) within console/capture/limits.py,
and extracted defensively (an archive is input from elsewhere): its raw headers are checked first
(tarscan.prescan: sizes, counts, header fields), then tarfile streams each member to disk, refusing
absolute paths, `..`, links leading out, devices, hard links and FIFOs; nothing is written through a link.
"""
from __future__ import annotations

import gzip
import io
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from nodeconsole.console.capture import FORMAT, MANIFEST, ROOT_DIR, SCHEMA, limits
from nodeconsole.console.capture.boundedjson import load_json
from nodeconsole.console.capture.recording import DIR, LINK, Entry
from nodeconsole.console.capture.tarscan import READ_AHEAD, ArchiveError, Unpacked, prescan, unreadable

__all__ = ["ArchiveError", "archive_bytes", "extract_archive", "manifest_of", "write_archive"]

DIR_MODE, FILE_MODE, LINK_MODE = 0o755, 0o644, 0o777
TOPS = {MANIFEST, "nvml.json", "audit.jsonl", "doctor.json", ROOT_DIR, "libvirt"}


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


def _padded(size: int) -> int:
    return -(-size // 512) * 512


def check_limits(members: Mapping[str, Entry]) -> None:
    """ArchiveError when the archive of `members` would be one a replay refuses (limits.py): too many
    members, a member, a name or a link target too large, too much in all."""
    if len(members) > limits.MAX_MEMBERS:
        raise ArchiveError(f"the capture would hold {len(members)} members (at most {limits.MAX_MEMBERS})")
    total = 1024  # the end-of-archive blocks
    for path, entry in members.items():
        total += 512 + _padded(len(entry.data))
        for text in (path, entry.target):
            size = len(text.encode()) + 1
            if size > limits.MAX_HEADER_FIELD:
                raise ArchiveError(f"the capture's member {path[:200]!r} has a name or target of {size} bytes")
            total += 512 + _padded(size) if size > 100 else 0
        if len(entry.data) > limits.MAX_MEMBER_BYTES:
            raise ArchiveError(f"the capture's member {path!r} would be {len(entry.data)} bytes "
                               f"(at most {limits.MAX_MEMBER_BYTES >> 20} MiB)")
    if total > limits.MAX_TOTAL_BYTES:
        raise ArchiveError(f"the capture would be {total >> 20} MiB unpacked (at most {limits.MAX_TOTAL_BYTES >> 20} MiB)")


def write_archive(entries: Mapping[str, Entry], out: IO[bytes], level: int = 6) -> None:
    """Write `entries` (archive path → entry) as a gzip-compressed tar: the manifest first, then every
    path in sorted order, parents before children."""
    members = with_parents(entries)
    check_limits(members)
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


def extract_archive(path: str | os.PathLike[str], dest: Path) -> dict[str, Any]:
    """Check the archive at `path`, lay it out below the empty private directory `dest` and return its
    manifest (checked to be a capture of a schema this release reads). ArchiveError: the first problem
    (`dest` may then hold part of the archive: the caller removes it)."""
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise ArchiveError(e.strerror or str(e)) from None
    if size > limits.MAX_ARCHIVE_BYTES:
        raise ArchiveError(f"larger than {limits.MAX_ARCHIVE_BYTES >> 20} MiB")
    try:
        with Unpacked(path, limits.MAX_TOTAL_BYTES) as src:
            prescan(src)
        with Unpacked(path, limits.MAX_TOTAL_BYTES + READ_AHEAD) as src:
            with tarfile.open(fileobj=src, mode="r|") as tf:  # type: ignore[call-overload]
                names = _extract(tf, os.path.realpath(dest))
    except (tarfile.TarError, EOFError, ValueError) as e:
        raise unreadable(f"{type(e).__name__}: {e}") from None
    except OSError as e:
        raise ArchiveError(f"cannot extract ({e.strerror or e})") from None
    manifest = manifest_of(dest)
    if ROOT_DIR not in names:
        raise ArchiveError(f"no {ROOT_DIR}/ tree in the capture")
    return manifest


def _members(tf: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """Every member, forgotten once read (tarfile would keep them all), counted again (belt and braces)."""
    count = 0
    while (m := tf.next()) is not None:
        tf.members.clear()  # type: ignore[attr-defined]
        count += 1
        if count > limits.MAX_MEMBERS:
            raise ArchiveError(f"more than {limits.MAX_MEMBERS} members")
        yield m


def _extract(tf: tarfile.TarFile, base: str) -> set[str]:
    """Directories and files as they come (each file created, never opened through a link), links
    last, each checked to resolve inside its top folder. The names of the top folders met."""
    seen: set[str] = set()
    tops: set[str] = set()
    links: list[tuple[str, str]] = []
    checked: set[str] = set()
    for m in _members(tf):
        name = _check_name(m.name)
        top = name.split("/", 1)[0]
        if top not in TOPS:
            continue  # something a later release adds: not ours to serve
        if name in seen:
            raise ArchiveError(f"member {name!r} appears twice")
        seen.add(name)
        tops.add(top)
        if m.isdir():
            os.makedirs(os.path.join(base, name), mode=DIR_MODE, exist_ok=True)
        elif m.issym():
            _check_link(name, m.linkname)
            links.append((name, m.linkname))
        elif m.isreg():
            _write_file(tf, m, base, name, checked)
        else:
            kind = ("a hard link" if m.islnk() else "a device file" if m.isdev() else
                    "a FIFO" if m.isfifo() else "an unsupported member type")
            raise ArchiveError(f"member {name!r} is {kind}")
    _place_links(base, links)
    return tops


def _write_file(tf: tarfile.TarFile, m: tarfile.TarInfo, base: str, name: str, checked: set[str]) -> None:
    if m.size > limits.MAX_MEMBER_BYTES:
        raise ArchiveError(f"member {name!r} is too large ({m.size} bytes)")
    path = os.path.join(base, name)
    parent = os.path.dirname(path)
    if parent not in checked:
        os.makedirs(parent, mode=DIR_MODE, exist_ok=True)
        if os.path.realpath(parent) != parent:  # no links exist yet; this is belt and braces
            raise ArchiveError(f"member {name!r} would be written through a link")
        checked.add(parent)
    src = tf.extractfile(m)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
    with os.fdopen(fd, "wb") as f:
        if src is not None:
            shutil.copyfileobj(src, f, 1 << 20)


def _place_links(base: str, links: list[tuple[str, str]]) -> None:
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


def manifest_of(dest: Path) -> dict[str, Any]:
    """The extracted capture's manifest, checked to be a capture of a schema this release reads."""
    try:
        fd = os.open(dest / MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise ArchiveError(f"no {MANIFEST}: not a nodeconsole capture") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ArchiveError(f"{MANIFEST} is not a file: not a nodeconsole capture")
        data = f.read(limits.MAX_MEMBER_BYTES + 1)
    manifest = load_json(data, MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError("not a nodeconsole capture (wrong format in the manifest)")
    schema = manifest.get("schema")
    if not isinstance(schema, int) or not 1 <= schema <= SCHEMA:
        raise ArchiveError(f"capture schema {schema!r} is not one this release reads (1..{SCHEMA})")
    return manifest
