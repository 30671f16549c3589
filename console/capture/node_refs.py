"""The references of a captured libvirt node file, checked before libvirt's test driver reads it.

The test driver includes other files where the node file says so (`<domain file='x.xml'/>`, networks,
interfaces, pools, their volumes, node devices): a relative path from the node file's folder, an
absolute one as it is. A replay serves nothing but the capture: every `file` attribute of the node file's
top levels (any namespace: libxml2's lookup ignores it) must be a relative path to a regular file inside
the extracted capture. A capture writes none (its node file holds every domain inline). The node file
declares no DOCTYPE either (no entities to expand). Parsed with expat as a stream: memory stays small.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from xml.parsers import expat

from nodeconsole.console.capture import NODE_FILE
from nodeconsole.console.capture.tarscan import ArchiveError

REF_DEPTH = 2  # <node> is 0; <domain file=…> 1; <pool><volume file=…> 2


def references(path: str | os.PathLike[str]) -> list[str]:
    """The `file` attributes of the node file's elements down to REF_DEPTH."""
    refs: list[str] = []
    depth = 0

    def start(_name: str, attrs: dict[str, str]) -> None:
        nonlocal depth
        if depth <= REF_DEPTH:
            refs.extend(v for k, v in attrs.items() if k.rpartition(":")[2] == "file")
        depth += 1

    def end(_name: str) -> None:
        nonlocal depth
        depth -= 1

    def doctype(*_args: object) -> None:
        raise ArchiveError(f"{NODE_FILE} declares a DOCTYPE (not a libvirt node file of a capture)")

    parser = expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = doctype
    try:
        with open(path, "rb") as f:
            parser.ParseFile(f)
    except expat.ExpatError as e:
        raise ArchiveError(f"{NODE_FILE} is not well-formed XML ({e})") from None
    return refs


def check_node_file(dest: Path) -> None:
    """ArchiveError when the node file below `dest` (if any) would make libvirt read anything but a
    regular file of the capture."""
    node = os.path.join(dest, NODE_FILE)
    if not os.path.lexists(node):
        return
    base = os.path.realpath(dest)
    for ref in references(node):
        shown = ref[:200]
        if not ref or ref.startswith("/") or "\x00" in ref:
            raise ArchiveError(f"{NODE_FILE} refers to {shown!r}: only files inside the capture are read")
        real = os.path.realpath(os.path.join(os.path.dirname(node), ref))
        if not real.startswith(base + os.sep):
            raise ArchiveError(f"{NODE_FILE} refers to {shown!r}, outside the capture")
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise ArchiveError(f"{NODE_FILE} refers to {shown!r}: {e.strerror or e}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ArchiveError(f"{NODE_FILE} refers to {shown!r}, which is not a regular file")
        finally:
            os.close(fd)
