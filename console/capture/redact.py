"""`capture --redact`: names, UUIDs, MAC addresses and GPU serial numbers replaced by stable pseudonyms,
the same in every member of the archive, so a replay still ties VMs to GPUs (an mdev's UUID is the same
pseudonym in sysfs, the domain XML and the NVML state).

The names: the host's (its short name host-N, the full FQDN host-N.invalid, each other label of the FQDN
but the last domain-N), the VMs' (vm-N), the users' who made changes (user-N; root stays), the SSH
addresses they came from (client-N), the GPU processes' (proc-N: NVML's process names, the `name=` fields
of kernel lines) and GPU serials (serial-N), each numbered in sorted order (the host the capture is of is
host-1). A name is replaced wherever it occurs bounded by characters that are not letters or digits (`.`,
`-`, `_`, `/`, `@` and the rest), in one pass with the UUIDs and MACs (a pseudonym is never rewritten
again; a name never matches inside a UUID). A short name without a letter (a VM called `42`) is replaced
only where a value is that name whole and names something (`<name>`, a JSON `name`, `vm`, `host`…): as a
word it would rename numbers everywhere.

UUIDs and MACs are derived from a keyed hash (HMAC-SHA256 with a key made for this capture and kept
nowhere), so they cannot be reversed by trying likely values; a MAC becomes a locally administered unicast
address. Case is kept (an upper-case UUID stays upper-case).

What is structure is never rewritten: console/capture/redact_members.py applies this to each member by
its kind (XML, JSON, text) and leaves element and attribute names, JSON keys and member paths alone.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import posixpath
import re
import uuid as uuidlib
from collections.abc import Iterable
from typing import Any
from xml.sax.saxutils import escape

_UUID = r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Za-z])"
_MAC = r"(?<![0-9A-Za-z:])[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}(?![0-9A-Za-z:])"
_IDS = re.compile(f"(?P<uuid>{_UUID})|(?P<mac>{_MAC})")
_ALNUM = r"[^\W_]"  # a letter or a digit, of any script
# Labels before a country code that belong to the registry, not the host's owner (example.co.uk).
_SECOND_LEVEL = frozenset({"ac", "co", "com", "edu", "gov", "go", "ne", "net", "or", "org"})
# JSON keys whose string values are our own or the libraries' enumerations and identifiers: kept (but for
# the UUIDs and MACs in them).
_KEEP_KEYS = frozenset({"format", "origin", "status", "via", "model", "state", "remote_type", "not_supported",
                        "id", "group", "role", "mode", "kind", "severity", "result", "action", "stored_as",
                        "type"})
# JSON keys whose value is a name (a name without letters is replaced only there, and only whole).
NAME_KEYS = frozenset({"name", "vm", "vm_id", "hostname", "host", "user", "sudo_user", "ssh_client", "title"})
_STATUS_MAPS = frozenset({"snapshot_sources"})  # {source: "ok" | the reason}
_WHO_NAMES = ("user", "sudo_user")


def _numbered(names: Iterable[str], prefix: str, first: str = "") -> dict[str, str]:
    rest = sorted({n for n in names if n and n != first})
    ordered = ([first] if first else []) + rest
    return {n: f"{prefix}-{i + 1}" for i, n in enumerate(ordered)}


def host_pseudonyms(hostnames: Iterable[str], primary: str = "") -> dict[str, str]:
    """Each host's short name → host-N (the primary host first, the others in sorted order), each FQDN →
    host-N.invalid, each label of an FQDN but the first and the last (the top-level domain, and a
    registry's `co`/`com`… before a country code) → domain-N."""
    primary = primary.strip()
    hosts = {h.strip() for h in (*hostnames, primary) if h and h.strip()}
    shorts = _numbered((h.split(".")[0] for h in hosts), "host", primary.split(".")[0])
    out: dict[str, str] = {}
    labels: set[str] = set()
    for h in sorted(hosts):
        parts = h.split(".")
        if len(parts) > 1:
            out[h] = shorts[parts[0]] + ".invalid"
            middle = parts[1:-1]
            if len(parts) > 3 and len(parts[-1]) == 2 and middle and middle[-1] in _SECOND_LEVEL:
                middle = middle[:-1]
            labels.update(label for label in middle if label)
    out.update(shorts)
    for label, pseudo in _numbered(labels, "domain").items():
        out.setdefault(label, pseudo)
    return out


def process_names(names: Iterable[str]) -> set[str]:
    """A GPU process's name as redacted: its base name (`/usr/bin/python3` → `python3`), none for a
    placeholder (`<unknown>`)."""
    out = set()
    for n in names:
        base = posixpath.basename(n.strip())
        if base and not base.startswith("<"):
            out.add(base)
    return out


def _variants(name: str) -> set[str]:
    """The spellings a name takes in a file: as is, XML-escaped, JSON-escaped."""
    return {name, escape(name, {"'": "&apos;", '"': "&quot;"}), escape(name), json.dumps(name)[1:-1]} - {""}


def _word(name: str) -> bool:
    """Whether a name is replaced as a word, anywhere: one with a letter, or a long number (a GPU serial);
    a short number would rename numbers everywhere."""
    return any(c.isalpha() for c in name) or len(name) >= 8


class Redactor:
    def __init__(self, hostnames: Iterable[str], vm_names: Iterable[str], serials: Iterable[str] = (),
                 key: bytes | None = None, *, users: Iterable[str] = (), clients: Iterable[str] = (),
                 processes: Iterable[str] = (), primary: str = "") -> None:
        self.key = key if key is not None else os.urandom(32)
        self.names: dict[str, str] = {}
        groups = (host_pseudonyms(hostnames, primary), _numbered(vm_names, "vm"),
                  _numbered((u for u in users if u != "root"), "user"), _numbered(clients, "client"),
                  _numbered(process_names(processes), "proc"), _numbered(serials, "serial"))
        for group in groups:
            for original, pseudo in group.items():
                self.names.setdefault(original, pseudo)
        self._spelled: dict[str, str] = {}  # in text, a name may also be spelled XML- or JSON-escaped
        for original, pseudo in self.names.items():
            for form in _variants(original) if _word(original) else ():
                self._spelled.setdefault(form, pseudo)
        words = sorted(self._spelled, key=len, reverse=True)
        alternatives = "|".join(re.escape(w) for w in words)
        name = f"|(?P<name>(?<!{_ALNUM})(?:{alternatives})(?!{_ALNUM}))" if words else ""
        self._all = re.compile(f"(?P<uuid>{_UUID})|(?P<mac>{_MAC}){name}")

    def _digest(self, kind: str, value: str) -> bytes:
        return hmac.new(self.key, f"{kind}:{value.lower()}".encode(), hashlib.sha256).digest()

    def _replace(self, m: re.Match[str]) -> str:
        text = m.group(0)
        if m.lastgroup == "name":
            return self._spelled[text]
        if m.lastgroup == "uuid":
            new = str(uuidlib.UUID(bytes=self._digest("uuid", text)[:16], version=4))
        else:
            raw = bytearray(self._digest("mac", text)[:6])
            raw[0] = (raw[0] & 0xFC) | 0x02  # locally administered, unicast
            new = ":".join(f"{b:02x}" for b in raw)
        return new.upper() if text.upper() == text and any(c.isalpha() for c in text) else new

    def ids(self, text: str) -> str:
        """UUIDs and MACs only (member paths, link targets and JSON keys: structure that may hold them)."""
        return _IDS.sub(self._replace, text)

    def text(self, text: str) -> str:
        """Free text: names, UUIDs and MACs."""
        return self._all.sub(self._replace, text)

    def value(self, text: str, names_something: bool = False) -> str:
        """A value (XML text or attribute, JSON string); `names_something`: the value is a name's field,
        where a name of digits only is replaced too (when it is the whole value)."""
        if names_something and text in self.names:
            return self.names[text]
        return self.text(text)

    def data(self, data: bytes) -> bytes:
        """A file's content (binary safe: bytes that are not UTF-8 pass through unchanged)."""
        return self.text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def redact_json(obj: Any, red: Redactor, key: str = "") -> Any:
    """A JSON document's values redacted, its keys kept (but for the UUIDs and MACs in them); values of
    the keys that hold enumerations or identifiers (`status`, `id`, `model`…) kept."""
    if isinstance(obj, str):
        if key in _KEEP_KEYS or (key in _STATUS_MAPS and obj == "ok"):
            return red.ids(obj)
        return red.value(obj, key in NAME_KEYS)
    if isinstance(obj, list):
        return [redact_json(x, red, key) for x in obj]
    if isinstance(obj, dict):
        return {red.ids(k): redact_json(v, red, key if key in _STATUS_MAPS else k) for k, v in obj.items()}
    return obj


def _records(data: bytes) -> tuple[list[bytes], list[dict | None]]:
    lines = data.split(b"\n")
    records: list[dict | None] = []
    for line in lines:
        try:
            obj = json.loads(line.decode("utf-8")) if line.strip() else None
        except (UnicodeDecodeError, ValueError, RecursionError):
            obj = None
        records.append(obj if isinstance(obj, dict) else None)
    return lines, records


def audit_who(data: bytes) -> tuple[set[str], set[str]]:
    """The user names (`who.user`, `who.sudo_user`; root is a role, not a person) and SSH client
    addresses (`who.ssh_client`) of the audit log's records."""
    users: set[str] = set()
    clients: set[str] = set()
    for obj in _records(data)[1]:
        who = obj.get("who") if obj is not None else None
        if not isinstance(who, dict):
            continue
        users.update(v for k in _WHO_NAMES if isinstance(v := who.get(k), str) and v and v != "root")
        if isinstance(who.get("ssh_client"), str) and who["ssh_client"]:
            clients.add(who["ssh_client"])
    return users, clients


def redact_audit(data: bytes, red: Redactor | None = None) -> bytes:
    """The audit log redacted: every record's values through `red` (by default one that knows only the
    log's own users and SSH clients), never its keys; a user's uid is dropped (it names the account as
    well as the name does) but root's, a role rather than a person, which stays. A line that is not a
    whole JSON record (a record torn by a crash) becomes an empty line: it may hold the same names, and
    the log's reader skips it."""
    lines, records = _records(data)
    if red is None:
        users, clients = audit_who(data)
        red = Redactor((), (), users=users, clients=clients)
    out = []
    for line, obj in zip(lines, records):
        if obj is None:
            out.append(b"" if line.strip() else line)
            continue
        who = obj.get("who")
        if isinstance(who, dict):
            obj = {**obj, "who": {k: v for k, v in who.items() if k != "uid" or v == 0}}
        try:
            out.append(json.dumps(redact_json(obj, red), sort_keys=True, separators=(",", ":")).encode())
        except RecursionError:  # nested deeper than the reader takes: it skips such a line anyway
            out.append(b"")
    return b"\n".join(out)
