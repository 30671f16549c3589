"""Redacting a capture's members by what they are, so the capture's own structure is never rewritten
and a name that equals a structural word (a host called `node`, VMs called `dev`, `default`, `memory`)
is replaced only where it is a name:

- XML (`*.xml`: libvirt's node file, domain definitions, capabilities) is parsed; element text and
  attribute values are redacted, element and attribute names never, nor the values of libvirt-schema
  attributes that are enumerations (`type='pci'`, `mode='strict'`, `unit='KiB'`…) or the text of
  enumerated elements (`<type>hvm</type>`, `<on_crash>`…). Comments are dropped.
- JSON (`*.json`, and each record of `audit.jsonl`): values, never keys (but for the UUIDs and MACs in
  them), and not the values of enumerations and identifiers (`status`, `id`, `stored_as`…).
- everything else (the tree's files, the kernel log): as text; Proxmox VE's VM configs and mappings
  (etc/pve/qemu-server, etc/pve/mapping) lose their descriptions (`#` lines, `description`) outright.
- member paths and link targets: only their UUIDs and MACs (an mdev's directory), so the tree keeps its
  layout; the one place a host path is a name, libvirt's `run/libvirt/qemu/NAME.pid`, takes the VM's
  pseudonym.

The names come from the caller (host and VM names) and from the members themselves: the audit log's who,
NVML's process names and GPU serials, the `name=` fields of the kernel log's lines.
"""
from __future__ import annotations

import io
import json
import posixpath
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import Any

from nodeconsole.console.capture import AUDIT, MANIFEST, NVML_STATE, ROOT_DIR
from nodeconsole.console.capture.recording import FILE, LINK, Entry
from nodeconsole.console.capture.redact import Redactor, audit_who, redact_audit, redact_json

# Attributes whose values are enumerations of libvirt's schemas (domain, capabilities, node file).
_ENUM_ATTRS = frozenset({
    "type", "mode", "unit", "managed", "placement", "state", "policy", "bus", "offset", "model", "arch",
    "machine", "device", "memAccess", "cache", "io", "discard", "sgio", "rawio", "relabel", "present",
    "primary", "multifunction", "check", "match", "fallback", "tickpolicy", "track", "access", "dumpCore",
    "migratable", "startupPolicy", "error_policy", "rerror_policy", "autoport", "keymap", "sharePolicy",
    "connected", "enabled", "readonly", "secure", "format", "backend", "ioeventfd", "event_idx", "queues",
    "copy_on_read", "detect_zeroes", "sync", "tray", "rotation_rate", "role", "script", "trustGuestRxFilters",
})
_ENUM_TAG_ATTRS = frozenset({("boot", "dev"), ("driver", "name"), ("feature", "name"), ("timer", "name"),
                             ("suspend-to-mem", "enabled"), ("suspend-to-disk", "enabled"), ("counter", "name"),
                             ("pages", "size"), ("bootmenu", "enable"), ("entry", "name")})
# Elements whose text is an enumeration.
_ENUM_TEXT = frozenset({"type", "on_poweroff", "on_reboot", "on_crash", "on_lockfailure", "arch", "model",
                        "vendor", "os_type", "machine", "uri_transport", "runstate", "doi"})
_NAME_TEXT = frozenset({"name", "title", "hostname"})
_PID_DIR = f"{ROOT_DIR}/run/libvirt/qemu/"
# Proxmox VE's VM configs and resource mappings: their free-text descriptions are dropped
_PVE_DIRS = (f"{ROOT_DIR}/etc/pve/qemu-server/", f"{ROOT_DIR}/etc/pve/mapping/", f"{ROOT_DIR}/etc/pve/nodes/")
REDACTED_TEXT = b"(redacted)"
_KERNEL_NAME = re.compile(r"\bname=([^,\n]{1,64}),")  # NVRM: Xid (PCI:…): 79, pid=1234, name=python3, …


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def redact_xml(data: bytes, red: Redactor) -> bytes | None:
    """An XML document redacted (module comment); None when it does not parse."""
    prefixes: dict[str, str] = {}
    try:
        parsed = ET.iterparse(io.BytesIO(data), events=("start-ns",))
        for _event, ns in parsed:
            prefixes.setdefault(ns[0], ns[1])
        root = parsed.root  # type: ignore[attr-defined]
    except (ET.ParseError, ValueError, RecursionError):
        return None
    for el in root.iter():
        tag = _local(el.tag)
        if el.text:
            el.text = red.ids(el.text) if tag in _ENUM_TEXT else red.value(el.text, tag in _NAME_TEXT)
        if el.tail:
            el.tail = red.text(el.tail)
        for attr, value in el.attrib.items():
            name = _local(attr)
            enum = name in _ENUM_ATTRS or (tag, name) in _ENUM_TAG_ATTRS
            el.attrib[attr] = red.ids(value) if enum else red.value(value)
    for prefix, uri in prefixes.items():
        if prefix and not re.fullmatch(r"ns\d+", prefix):
            ET.register_namespace(prefix, uri)
    try:
        text = ET.tostring(root, encoding="unicode", default_namespace=prefixes.get("") or None)
    except ValueError:
        return None
    head = "<?xml version='1.0' encoding='UTF-8'?>\n" if data.lstrip().startswith(b"<?xml") else ""
    return (head + text + ("\n" if data.endswith(b"\n") else "")).encode()


def redact_json_member(data: bytes, red: Redactor) -> bytes | None:
    """A JSON document redacted (values, not keys), written as the capture writes its own; None when it
    is not JSON."""
    try:
        obj = json.loads(data.decode("utf-8"))
        return (json.dumps(redact_json(obj, red), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def redact_path(path: str, red: Redactor) -> str:
    """A member path or link target: its UUIDs and MACs; libvirt's pid file of a VM named as its VM."""
    path = red.ids(path)
    if path.startswith(_PID_DIR):
        head, base = posixpath.split(path)
        stem, dot, ext = base.rpartition(".")
        if dot and ext == "pid" and stem in red.names:
            return f"{head}/{red.names[stem]}.pid"
    return path


def _pve_descriptions(data: bytes) -> bytes:
    """A Proxmox VE config with its free text gone: a VM's `#` description lines, a mapping's
    `description` (the names in the rest are redacted as text)."""
    out = []
    for line in data.split(b"\n"):
        if line.startswith(b"#"):
            line = b"#" + REDACTED_TEXT
        elif line.lstrip().startswith(b"description ") or line.startswith(b"description:"):
            head = line[:len(line) - len(line.lstrip())]
            line = head + (b"description: " if line.startswith(b"description:") else b"description ") + REDACTED_TEXT
        out.append(line)
    return b"\n".join(out)


def _entry(path: str, entry: Entry, red: Redactor) -> Entry:
    if entry.kind == LINK:
        return Entry(LINK, target=red.ids(entry.target))
    if entry.kind != FILE:
        return entry
    if path == AUDIT:
        return Entry(FILE, redact_audit(entry.data, red))
    new = None
    if path.startswith(_PVE_DIRS):
        return Entry(FILE, red.data(_pve_descriptions(entry.data)))
    if path.endswith(".xml"):
        new = redact_xml(entry.data, red)
    elif path.endswith(".json"):
        new = redact_json_member(entry.data, red)
    return Entry(FILE, new if new is not None else red.data(entry.data))


def _json_of(entry: Entry | None) -> Any:
    try:
        return json.loads(entry.data) if entry is not None and entry.kind == FILE else None
    except (ValueError, RecursionError):
        return None


def found_names(entries: dict[str, Entry]) -> dict[str, set[str]]:
    """The names the members themselves hold: users and SSH clients (the audit log's who), GPU processes
    (NVML's and the kernel log's `name=` fields), GPU serials."""
    users: set[str] = set()
    clients: set[str] = set()
    audit = entries.get(AUDIT)
    if audit is not None and audit.kind == FILE:
        users, clients = audit_who(audit.data)
    processes: set[str] = set()
    serials: set[str] = set()
    nvml = _json_of(entries.get(NVML_STATE))
    for gpu in nvml.get("gpus", []) if isinstance(nvml, dict) else []:
        if isinstance(gpu, dict):
            if gpu.get("serial"):
                serials.add(str(gpu["serial"]))
            processes.update(p["name"] for p in gpu.get("processes") or [] if isinstance(p, dict)
                             and isinstance(p.get("name"), str))
    manifest = _json_of(entries.get(MANIFEST))
    stored = ((manifest or {}).get("sources") or {}).get("kernel_log", {}).get("stored_as", [])
    for path in stored if isinstance(stored, list) else []:
        log = entries.get(path) if isinstance(path, str) else None
        if log is not None and log.kind == FILE:
            text = log.data.decode("utf-8", "replace")
            processes.update(m.group(1).strip() for m in _KERNEL_NAME.finditer(text))
    return {"users": users, "clients": clients, "processes": processes, "serials": serials}


def redact_entries(entries: dict[str, Entry], hostnames: Iterable[str], vm_names: Iterable[str],
                   primary: str = "") -> dict[str, Entry]:
    """Every member redacted (module comment); `primary`: the host the capture is of (host-1). The
    manifest says `redacted`."""
    found = found_names(entries)
    red = Redactor(hostnames, vm_names, found["serials"], users=found["users"], clients=found["clients"],
                   processes=found["processes"], primary=primary)
    out = {redact_path(path, red): _entry(path, entry, red) for path, entry in entries.items()}
    manifest = _json_of(out.get(MANIFEST))
    if isinstance(manifest, dict):
        manifest["redacted"] = True
        out[MANIFEST] = Entry(FILE, (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode())
    return out
