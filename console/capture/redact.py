"""`capture --redact`: host names, VM names, UUIDs, MAC addresses and GPU serial numbers replaced by stable
pseudonyms, the same in every file of the archive, in file names and in link targets, so a replay still
ties VMs to GPUs (an mdev's UUID is the same pseudonym in sysfs, the domain XML and the NVML state).
Who made each change (the audit log's user names and the SSH address they came from) is replaced too,
in those fields only (a user named like a word of the host's files must not rename the files).

Names become host-N and vm-N (numbered in sorted order); UUIDs and MACs are derived from a keyed hash
(HMAC-SHA256 with a key made for this capture and kept nowhere), so they cannot be reversed by trying
likely values; a MAC becomes a locally administered unicast address. Case is kept (an upper-case UUID
stays upper-case). Names are replaced as whole tokens (not inside a longer word), also in their XML- and
JSON-escaped forms.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import uuid as uuidlib
from collections.abc import Iterable
from typing import Any
from xml.sax.saxutils import escape

_UUID = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
                   r"(?![0-9A-Za-z])")
_MAC = re.compile(r"(?<![0-9A-Za-z:])[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}(?![0-9A-Za-z:])")
_NAME_CHARS = r"A-Za-z0-9_.\-"


def _variants(name: str) -> set[str]:
    """The spellings a name takes in the files: as is, XML-escaped, JSON-escaped."""
    return {name, escape(name, {"'": "&apos;", '"': "&quot;"}), escape(name), json.dumps(name)[1:-1]} - {""}


class Redactor:
    def __init__(self, hostnames: Iterable[str], vm_names: Iterable[str], serials: Iterable[str] = (),
                 key: bytes | None = None) -> None:
        self.key = key if key is not None else os.urandom(32)
        self.names: dict[str, str] = {}
        hosts = sorted({h for h in hostnames if h})
        shorts = sorted({h.split(".")[0] for h in hosts})
        for h in hosts:
            pseudo = f"host-{shorts.index(h.split('.')[0]) + 1}"
            self.names[h] = pseudo if "." not in h else pseudo + ".invalid"
        for i, short in enumerate(shorts):
            self.names.setdefault(short, f"host-{i + 1}")
        for i, vm in enumerate(sorted({v for v in vm_names if v})):
            self.names.setdefault(vm, f"vm-{i + 1}")
        for i, serial in enumerate(sorted({s for s in serials if s})):
            self.names.setdefault(serial, f"serial-{i + 1}")
        spelled: dict[str, str] = {}
        for original, pseudo in self.names.items():
            for form in _variants(original):
                spelled.setdefault(form, pseudo)
        self._spelled = spelled
        alternatives = "|".join(re.escape(s) for s in sorted(spelled, key=len, reverse=True))
        self._names = re.compile(f"(?<![{_NAME_CHARS}])(?:{alternatives})(?![{_NAME_CHARS}])") if spelled else None

    def _digest(self, kind: str, value: str) -> bytes:
        return hmac.new(self.key, f"{kind}:{value.lower()}".encode(), hashlib.sha256).digest()

    def _uuid(self, m: re.Match[str]) -> str:
        text = m.group(0)
        new = str(uuidlib.UUID(bytes=self._digest("uuid", text)[:16], version=4))
        return new.upper() if text.upper() == text and any(c.isalpha() for c in text) else new

    def _mac(self, m: re.Match[str]) -> str:
        text = m.group(0)
        raw = bytearray(self._digest("mac", text)[:6])
        raw[0] = (raw[0] & 0xFC) | 0x02  # locally administered, unicast
        new = ":".join(f"{b:02x}" for b in raw)
        return new.upper() if text.upper() == text and any(c.isalpha() for c in text) else new

    def text(self, text: str) -> str:
        text = _UUID.sub(self._uuid, text)
        text = _MAC.sub(self._mac, text)
        if self._names is not None:
            text = self._names.sub(lambda m: self._spelled[m.group(0)], text)
        return text

    def data(self, data: bytes) -> bytes:
        """A file's content (binary safe: bytes that are not UTF-8 pass through unchanged)."""
        return self.text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


_WHO_NAMES = ("user", "sudo_user")


def redact_audit(data: bytes) -> bytes:
    """The audit log with who made each change replaced: user names (`who.user`, `who.sudo_user`) by
    user-N and the SSH client address (`who.ssh_client`) by client-N, numbered in sorted order, in
    those fields and wherever else the records spell them as a whole word (a path below /home/NAME, a
    message); a user's uid is dropped (it names the account as well as the name does) but root's, a
    role rather than a person, which stays. A line that is not a whole JSON record (a record torn by a
    crash) becomes an empty line: it may hold the same names, and the log's reader skips it."""
    lines = data.split(b"\n")
    records: list[dict | None] = []
    users: set[str] = set()
    clients: set[str] = set()
    for line in lines:
        try:
            obj = json.loads(line.decode("utf-8")) if line.strip() else None
        except (UnicodeDecodeError, ValueError, RecursionError):
            obj = None
        records.append(obj if isinstance(obj, dict) else None)
        who = obj.get("who") if isinstance(obj, dict) else None
        if not isinstance(who, dict):
            continue
        users.update(v for k in _WHO_NAMES if isinstance(v := who.get(k), str) and v and v != "root")
        if isinstance(who.get("ssh_client"), str) and who["ssh_client"]:
            clients.add(who["ssh_client"])
    pseudo = {u: f"user-{i + 1}" for i, u in enumerate(sorted(users))}
    pseudo.update({c: f"client-{i + 1}" for i, c in enumerate(sorted(clients))})
    words = re.compile(f"(?<![{_NAME_CHARS}])(?:" + "|".join(re.escape(w) for w in sorted(pseudo, key=len, reverse=True))
                       + f")(?![{_NAME_CHARS}])") if pseudo else None

    def scrub(v: Any) -> Any:  # the values only: a user named like a key must not rename the key
        if isinstance(v, str):
            return v if words is None else words.sub(lambda m: pseudo[m.group(0)], v)
        if isinstance(v, list):
            return [scrub(x) for x in v]
        if isinstance(v, dict):
            return {k: scrub(x) for k, x in v.items()}
        return v

    out = []
    for line, obj in zip(lines, records):
        if obj is None:
            out.append(b"" if line.strip() else line)
            continue
        who = obj.get("who")
        if isinstance(who, dict):
            obj = {**obj, "who": {k: v for k, v in who.items() if k != "uid" or v == 0}}
        try:
            out.append(json.dumps(scrub(obj), sort_keys=True, separators=(",", ":")).encode())
        except RecursionError:  # nested deeper than the reader takes: it skips such a line anyway
            out.append(b"")
    return b"\n".join(out)
