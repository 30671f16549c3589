"""The drains file: the GPUs an admin marked "no new work" (`nodeconsole gpu drain`), read into the snapshot.

The file lives below the host's root seam at DRAINS_FILE (/var/lib/nodeconsole/drains.json on a host;
on the demo host its generated root is its disk, so the mark survives `demo reboot` like the rest of
/var). actions/drain.py writes it (planned, audited, undoable); this module only reads and judges it:

    {"version": 1, "drains": {"0000:9a:00.0": {"reason": "RMA ticket 42",
                                               "who": {"user": "alice", "uid": 1000, ...},
                                               "when": "2026-12-02T09:15:03Z"}}}

A damaged file or entry never hides the GPUs: what can be read is used, the rest is left out (and
`problems` says what was left out). The reason is the admin's text kept as given: every front end shows
it through console/hosttext.visible.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any

from nodeconsole.console.gpu_events import Drain
from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import Gpu
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root

DRAINS_FILE = "var/lib/nodeconsole/drains.json"
VERSION = 1
REASON_MAX = 200  # characters: one line on a screen
MAX_BYTES = 1 << 20  # a file larger than this is not ours


def reason_problem(reason: object) -> str:
    """Why `reason` is not a drain reason ('' when it is): required, not blank, at most REASON_MAX
    characters, no control characters (a reason is one line of plain text)."""
    if not isinstance(reason, str) or not reason.strip():
        return "a drain needs a reason (--reason TEXT): what is wrong, a ticket"
    if len(reason) > REASON_MAX:
        return f"the reason is {len(reason)} characters long: at most {REASON_MAX}"
    if visible(reason) != reason:
        return f"the reason holds control characters ({visible(reason)}): give one line of plain text"
    return ""


def who_name(who: object) -> str:
    """The user a who() record names: the sudo caller when there is one, else the login user."""
    if isinstance(who, dict):
        for key in ("sudo_user", "user"):
            if isinstance(who.get(key), str) and who[key]:
                return str(who[key])
    return who if isinstance(who, str) and who else "?"


def drain_of(entry: object) -> Drain | None:
    """One entry of the file as a Drain; None when it is malformed."""
    if not isinstance(entry, dict):
        return None
    reason, when = entry.get("reason"), entry.get("when")
    if not isinstance(reason, str) or not isinstance(when, str):
        return None
    return Drain(reason=reason, who=who_name(entry.get("who")), when=when)


def parse(data: bytes | None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The file's entries by GPU address (raw, as stored) and what could not be read. None (no file): none."""
    if data is None:
        return {}, []
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}, [f"/{DRAINS_FILE} is not JSON: its drains are ignored"]
    drains = obj.get("drains") if isinstance(obj, dict) else None
    if not isinstance(drains, dict):
        return {}, [f"/{DRAINS_FILE} has no \"drains\" object: ignored"]
    out: dict[str, dict[str, Any]] = {}
    problems = []
    for addr, entry in drains.items():
        try:
            key = parse_pci_address(str(addr))
        except ValueError:
            problems.append(f"/{DRAINS_FILE}: {visible(addr)} is not a PCI address: ignored")
            continue
        if drain_of(entry) is None:
            problems.append(f"/{DRAINS_FILE}: the drain of {key} is malformed: ignored")
            continue
        out[key] = entry
    return out, problems


def render(entries: dict[str, dict[str, Any]]) -> bytes:
    """The file's bytes for these entries (sorted, one GPU per block, newline at the end)."""
    body = {"version": VERSION, "drains": {a: entries[a] for a in sorted(entries)}}
    return (json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def read_entries(root: Root) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The entries of the host's drains file (through the root seam), and what could not be read."""
    try:
        data = root.read_bytes(DRAINS_FILE, MAX_BYTES)
    except PermissionError:
        return {}, [f"/{DRAINS_FILE} is not readable (permission denied): drains unknown"]
    return parse(data)


@dataclass
class DrainReader:
    """The drains as the collector marks them on each snapshot: the file is read again only when its
    inode, size or modification time changed (one stat per poll)."""
    _sign: tuple[int, int, int] | None = None
    _drains: dict[str, Drain] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def drains(self, root: Root) -> dict[str, Drain]:
        path = root.resolve(DRAINS_FILE)
        try:
            st = os.stat(path) if path is not None else None
        except OSError:
            st = None
        sign = None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)
        if sign != self._sign or sign is None:
            entries, self.problems = read_entries(root) if sign is not None else ({}, [])
            self._drains = {a: d for a, e in entries.items() if (d := drain_of(e)) is not None}
            self._sign = sign
        return self._drains

    def mark_gpus(self, root: Root, gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
        """`gpus` each with its drain set from the file (the very same tuple when nothing changes)."""
        drains = self.drains(root)
        if not drains and all(g.drain is None for g in gpus):
            return gpus
        marked = tuple(g if g.drain == drains.get(g.address) else replace(g, drain=drains.get(g.address))
                       for g in gpus)
        return gpus if all(a is b for a, b in zip(marked, gpus)) else marked
