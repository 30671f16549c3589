"""What changed between two captures (`nodeconsole diff A B`), or between a capture and the host now (the
host captured in memory first, so both sides are read the same way).

Each side is a capture opened as a replay: one snapshot (`Collector(replay_host(path)).collect()`) and
the archive's other members: the VMs' inactive definitions, /proc/cmdline, /sys/module, the /etc and
/boot files read, the kernel log's GPU events, the audit log, the doctor's report and the manifest's
versions. The comparison is a list of `Change`s {topic, subject, what, before, after}, grouped by
topic in TOPICS order. Values that move with time (utilization, temperatures, power, memory used, load,
a VM's CPU use) are never compared; health counters count only when they grew; events and audit
records count when B has them and A does not.
"""
from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.capture import AUDIT, DOCTOR, INACTIVE_DIR, limits
from nodeconsole.console.capture.archive import ArchiveError
from nodeconsole.console.capture.boundedjson import load_json
from nodeconsole.console.cpulist import format_cpulist

# topic → heading, in the order the text lists them
TOPICS: dict[str, str] = {
    "capture": "What each capture could read",
    "versions": "Versions",
    "kernel": "Kernel (command line, modules, huge pages)",
    "files": "Configuration files (/etc, /boot)",
    "gpus": "GPUs: drivers and owners",
    "devices": "Other PCI devices",
    "iommu": "IOMMU groups",
    "mig": "MIG layouts",
    "vgpu": "vGPU instances",
    "vms": "VM definitions",
    "health": "Health counters that grew",
    "events": "New kernel-log GPU events",
    "audit": "Audit records (changes made in between)",
    "doctor": "Doctor checks",
}
# Health counters: a change only when the count grew (a volatile counter resets at reboot).
HEALTH = ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "ecc_volatile_corrected",
          "ecc_aggregate_corrected", "retired_pages", "remapped_rows_pending", "remapped_rows_failure",
          "remapped_rows_uncorrectable", "remapped_rows_correctable", "pcie_replay_count")
HEALTH_PREFIXES = ("ecc_", "retired_", "remapped_")
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")  # each link's data-link error counters
# Configuration trees compared file by file (what the capture read of them: the doctor's and the
# plans' files, the boot loader's).
CONFIG_DIRS = ("etc", "boot")
MAX_CONFIG_FILES = 5000
MAX_FILE_TEXT = 256 << 10
MAX_AUDIT_READ = limits.MAX_MEMBER_BYTES  # what a replay opens


class DiffError(Exception):
    """A side cannot be read (the reason in one line)."""


@dataclass(frozen=True)
class Change:
    topic: str  # a key of TOPICS
    subject: str  # what changed: a PCI address, a VM name, a group, a module, a check id, a file
    what: str  # which property ("driver", "hostdevs", "added", "removed", …)
    before: Any = None
    after: Any = None
    note: str = ""  # a line of context (a doctor check's finding, why a source failed)

    def to_dict(self) -> dict[str, Any]:
        out = {"topic": self.topic, "subject": self.subject, "what": self.what, "before": self.before,
               "after": self.after}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Side:
    """What one capture says, as far as the diff compares it."""
    label: str  # the file as given, or "live"
    manifest: dict[str, Any]
    snapshot: dict[str, Any]  # HostSnapshot.to_dict()
    vm_config: dict[str, dict[str, Any]] = field(default_factory=dict)  # VM name → its inactive definition
    cmdline: str | None = None
    modules: set[str] | None = None
    files: dict[str, str] = field(default_factory=dict)  # /etc, /boot path → text
    events: list[dict[str, Any]] = field(default_factory=list)
    audit: list[AuditRecord] = field(default_factory=list)
    doctor: dict[str, Any] | None = None

    @property
    def title(self) -> str:
        host = self.manifest.get("hostname") or "?"
        return f"{self.label} ({host}, captured {self.manifest.get('captured_at') or '?'})"


@dataclass
class Diff:
    a: Side
    b: Side
    changes: list[Change]
    notes: list[str] = field(default_factory=list)  # what the reader should know (redaction, other host)

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.changes]

    @property
    def gpu_index(self) -> dict[str, int]:
        out = {g["address"]: g.get("index") for g in self.a.snapshot.get("gpus") or ()}
        out.update({g["address"]: g.get("index") for g in self.b.snapshot.get("gpus") or ()})
        return {k: v for k, v in out.items() if isinstance(v, int)}


# -- reading a side ---------------------------------------------------------------------------------

def load_side(path: str | os.PathLike[str], label: str | None = None) -> Side:
    """Open the capture at `path` and read what the diff compares. DiffError when it is not a capture."""
    from nodeconsole.console.capture.replay import open_replay
    from nodeconsole.console.cli import UsageError
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.root import Root
    from nodeconsole.console.seams import replay_host

    name = label or str(path)
    try:
        opened = open_replay(path)
        seams = replay_host(path)  # the same extraction, opened once per process
    except ArchiveError as e:
        raise DiffError(f"{name}: {_one_line(str(e))}") from None
    except UsageError as e:  # replay_host's names --replay: say it for this file instead
        raise DiffError(f"{name}: {_one_line(str(e).partition(': ')[2] or str(e))}") from None
    collector = Collector(seams)
    try:
        snap = collector.collect()
    finally:
        collector.close()
    top = Root(opened.dir)
    root = seams.root
    side = Side(label=name, manifest=dict(opened.manifest), snapshot=snap.to_dict())
    side.vm_config = _vm_configs(top)
    cmdline = root.read("proc/cmdline")
    side.cmdline = cmdline.strip() if cmdline is not None else None
    side.modules = set(root.listdir("sys/module")) if root.isdir("sys/module") else None
    side.files = _config_files(root)
    side.events = _events(root, snap)
    side.audit = _audit(opened.dir / AUDIT) if opened.has_audit else []
    doctor = top.read_bytes(DOCTOR)
    if doctor is not None:
        try:
            value = load_json(doctor, DOCTOR)
            side.doctor = value if isinstance(value, dict) else None
        except ArchiveError:
            side.doctor = None
    return side


def _one_line(reason: str) -> str:
    """A reason on one line: a multi-line one (tarfile's tries of each compression) without its details."""
    return reason if "\n" not in reason else reason.split(" (")[0].splitlines()[0]


def capture_now(seams: Any) -> bytes:
    """A capture of the host behind `seams` now, in memory (as `nodeconsole capture` takes it)."""
    from nodeconsole.actions.audit import AuditLog
    from nodeconsole.actions.runner import ActionHost
    from nodeconsole.console.capture.replay import PLAN_PROGRAMS
    from nodeconsole.console.capture.take import take_capture

    host = ActionHost.from_seams(seams)
    log = AuditLog(host.audit.path)
    try:
        with open(log.path, "rb") as f:  # the console's own audit log, as `capture` reads it
            audit: bytes | None = f.read(MAX_AUDIT_READ + 1)
        records = log.records()
    except OSError:
        audit, records = None, []
    if audit is not None and len(audit) > MAX_AUDIT_READ:
        audit = None
    programs = {name: host.commands.which(name) for name in PLAN_PROGRAMS}
    return take_capture(seams, changes=records, audit=audit, programs=programs).data


def live_side(seams: Any) -> Side:
    """The host behind `seams` now: captured in memory, read like a capture, and the extraction removed."""
    from nodeconsole.console.capture.replay import open_replay
    from nodeconsole.console.capture.scratch import discard

    data = capture_now(seams)
    fd, tmp = tempfile.mkstemp(prefix="nodeconsole-diff-", suffix=".tar.gz")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        side = load_side(tmp, label="live")
        # everything is read: drop the extraction (a later open of the same name extracts afresh)
        discard(open_replay(tmp).dir)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return side


def _vm_configs(top: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(top.listdir(INACTIVE_DIR)):
        if not name.endswith(".xml"):
            continue
        data = top.read_bytes(f"{INACTIVE_DIR}/{name}")
        if data is None:
            continue
        try:
            vm_name, facts = domain_facts(data.decode("utf-8", "replace"))
        except ValueError:
            continue
        out[vm_name] = facts
    return out


_UNITS = {"b": 1, "bytes": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1024 ** 2, "mib": 1024 ** 2,
          "mb": 1000 ** 2, "g": 1024 ** 3, "gib": 1024 ** 3, "gb": 1000 ** 3, "t": 1024 ** 4,
          "tib": 1024 ** 4, "tb": 1000 ** 4}


def _kib(el: ET.Element | None) -> int | None:
    if el is None:
        return None
    try:
        value = int((el.text or "").strip())
    except ValueError:
        return None
    factor = _UNITS.get((el.get("unit") or "KiB").strip().lower())
    return value * factor // 1024 if factor is not None else None


def domain_facts(xml: str) -> tuple[str, dict[str, Any]]:
    """A domain definition's name and the facts the diff compares: vCPUs, memory, pins, emulator pins,
    numatune, huge pages and hostdevs (ValueError when the XML cannot be read)."""
    from nodeconsole.console.libvirt_xml import parse_domain

    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(str(e)) from None
    parsed = parse_domain(xml)
    name = (root.findtext("name") or "").strip()
    return name, {
        "uuid": (root.findtext("uuid") or "").strip().lower() or None,
        "vcpus": parsed.vcpus,
        "memory_kib": _kib(root.find("memory")),
        "current_memory_kib": _kib(root.find("currentMemory")),
        "pins": _pins((p.vcpu, p.cpus) for p in parsed.pins),
        "emulator_pins": format_cpulist(parsed.emulator_pins) or None,
        "numatune": _numatune(parsed.numa_mode, parsed.numa_nodeset),
        "hugepages_kib": parsed.hugepages_kib,
        "hostdevs": _hostdevs((h.type, h.address, h.uuid) for h in parsed.hostdevs),
    }


def _pins(pins: Iterable[tuple[int, Iterable[int]]]) -> dict[str, str]:
    return {str(vcpu): format_cpulist(cpus) for vcpu, cpus in sorted(pins, key=lambda p: p[0])}


def _numatune(mode: str | None, nodeset: Iterable[int]) -> str | None:
    return f"{mode} {format_cpulist(nodeset)}".strip() if mode else None


def _hostdevs(devs: Iterable[tuple[str, str | None, str | None]]) -> list[str]:
    return sorted(f"{kind} {address or uuid or '?'}" for kind, address, uuid in devs)


def _live_vm(vm: Mapping[str, Any]) -> dict[str, Any]:
    """A snapshot VM's facts (its live definition when it runs), in domain_facts' form."""
    return {
        "uuid": (vm.get("uuid") or "").lower() or None,
        "state": vm.get("state"),
        "vcpus": vm.get("vcpus"),
        "pins": _pins((int(p["vcpu"]), p.get("cpus") or ()) for p in vm.get("pins") or ()),
        "emulator_pins": format_cpulist(vm.get("emulator_pins") or ()) or None,
        "numatune": _numatune(vm.get("numa_mode"), vm.get("numa_nodeset") or ()),
        "hugepages_kib": vm.get("hugepages_kib"),
        "hostdevs": _hostdevs((h.get("type") or "?", h.get("address"), h.get("uuid")) for h in vm.get("hostdevs") or ()),
    }


def _config_files(root: Any) -> dict[str, str]:
    """Every regular file below CONFIG_DIRS in the capture (what was read of them), as text."""
    out: dict[str, str] = {}
    stack = [d for d in CONFIG_DIRS if root.isdir(d)]
    while stack and len(out) < MAX_CONFIG_FILES:
        rel = stack.pop()
        for name in sorted(root.listdir(rel)):
            path = f"{rel}/{name}"
            if root.readlink(path) is not None:
                continue  # a link: its target is compared where it lies
            if root.isdir(path):
                stack.append(path)
                continue
            data = root.read_bytes(path, limit=MAX_FILE_TEXT)
            if data is not None:
                out["/" + path] = data.decode("utf-8", "replace")
    return out


def _events(root: Any, snap: Any) -> list[dict[str, Any]]:
    from nodeconsole.console.events import tie_to_vms
    from nodeconsole.console.sources.kernel_log import KernelLog, read_host

    try:
        events = list(read_host(root, False, KernelLog()))
    except OSError:
        return []
    return [e.to_dict() for e in tie_to_vms(events, snap)]


def _audit(path: Path) -> list[AuditRecord]:
    from nodeconsole.console.audit_log import AuditReader

    try:
        return AuditReader(path).records()
    except OSError:
        return []


# -- comparing --------------------------------------------------------------------------------------

def _unknown(value: Any) -> bool:
    return value is None or value == "N/A"


class _Changes:
    def __init__(self) -> None:
        self.out: list[Change] = []

    def add(self, topic: str, subject: str, what: str, before: Any, after: Any, note: str = "") -> None:
        self.out.append(Change(topic, subject, what, before, after, note))

    def fields(self, topic: str, subject: str, a: Mapping[str, Any], b: Mapping[str, Any],
               names: Iterable[tuple[str, str]]) -> None:
        """A change for every field (key, what) whose value differs."""
        for key, what in names:
            if a.get(key) != b.get(key):
                self.add(topic, subject, what, a.get(key), b.get(key))


def compare(a: Side, b: Side) -> Diff:
    """Everything that differs from `a` to `b`, in TOPICS order."""
    ch = _Changes()
    notes: list[str] = []
    for side in (a, b):
        if side.manifest.get("redacted"):
            notes.append(f"{side.label} is redacted: names, UUIDs and MAC addresses are pseudonyms, which "
                         "differ between captures")
    if (a.manifest.get("hostname") or "") != (b.manifest.get("hostname") or ""):
        notes.append(f"the captures are of different hosts: {a.manifest.get('hostname') or '?'} and "
                     f"{b.manifest.get('hostname') or '?'}")
    _sources(ch, a, b)
    _versions(ch, a, b)
    _kernel(ch, a, b)
    _files(ch, a, b)
    _gpus(ch, a, b)
    _devices(ch, a, b)
    _iommu(ch, a, b)
    _mig(ch, a, b)
    _vgpu(ch, a, b)
    _vms(ch, a, b, notes)
    _health(ch, a, b)
    _new_events(ch, a, b)
    _new_audit(ch, a, b)
    _doctor(ch, a, b)
    order = {t: i for i, t in enumerate(TOPICS)}
    changes = sorted(ch.out, key=lambda c: order[c.topic])  # stable: each topic keeps its own order
    return Diff(a, b, changes, notes)


def diff_files(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> Diff:
    return compare(load_side(a), load_side(b))


def _status(value: Any) -> str | None:
    if isinstance(value, dict):
        status = str(value.get("status") or "")
        reason = str(value.get("reason") or "")
        return f"{status}: {reason}" if reason and status != "ok" else status or None
    return str(value) if value is not None else None


def _sources(ch: _Changes, a: Side, b: Side) -> None:
    """A source one capture read and the other could not (what follows lacks its part)."""
    sa, sb = a.manifest.get("sources") or {}, b.manifest.get("sources") or {}
    for name in sorted(set(sa) | set(sb)):
        before, after = _status(sa.get(name)), _status(sb.get(name))
        # "skipped" is what the host has (no audit log yet, no kernel log): only a failure is news
        if (before or "").startswith("failed") != (after or "").startswith("failed"):
            ch.add("capture", name, "status", before, after)


def _versions(ch: _Changes, a: Side, b: Side) -> None:
    va, vb = a.manifest.get("versions") or {}, b.manifest.get("versions") or {}
    for name in sorted(set(va) | set(vb)):
        if va.get(name) != vb.get(name):
            ch.add("versions", name, "version", va.get(name), vb.get(name))


def _kernel(ch: _Changes, a: Side, b: Side) -> None:
    if a.cmdline is not None and b.cmdline is not None and a.cmdline != b.cmdline:
        ch.add("kernel", "/proc/cmdline", "command line", a.cmdline, b.cmdline)
    if a.modules is not None and b.modules is not None:
        for name in sorted(b.modules - a.modules):
            ch.add("kernel", name, "module", "not loaded", "loaded")
        for name in sorted(a.modules - b.modules):
            ch.add("kernel", name, "module", "loaded", "not loaded")
    na = {n["id"]: dict(map(tuple, n.get("hugepages") or ())) for n in a.snapshot.get("numa_nodes") or ()}
    nb = {n["id"]: dict(map(tuple, n.get("hugepages") or ())) for n in b.snapshot.get("numa_nodes") or ()}
    for node in sorted(set(na) & set(nb)):
        for size in sorted(set(na[node]) | set(nb[node])):
            before, after = na[node].get(size, 0), nb[node].get(size, 0)
            if before != after:
                ch.add("kernel", f"NUMA node {node}", f"huge pages {_size(size)}", before, after)


def _files(ch: _Changes, a: Side, b: Side) -> None:
    for path in sorted(set(a.files) | set(b.files)):
        before, after = a.files.get(path), b.files.get(path)
        if before == after:
            continue
        what = "added" if before is None else "removed" if after is None else "content"
        ch.add("files", path, what, before, after)


def _by(items: Iterable[Mapping[str, Any]] | None, key: str) -> dict[Any, Mapping[str, Any]]:
    return {item[key]: item for item in items or () if item.get(key) is not None}


def _gpu_summary(gpu: Mapping[str, Any]) -> str:
    return f"{gpu.get('name') or '?'} on {gpu.get('driver') or 'no driver'}"


def _gpus(ch: _Changes, a: Side, b: Side) -> None:
    ga, gb = _by(a.snapshot.get("gpus"), "address"), _by(b.snapshot.get("gpus"), "address")
    da, db = _by(a.snapshot.get("pci_devices"), "address"), _by(b.snapshot.get("pci_devices"), "address")
    for addr in sorted(set(ga) | set(gb)):
        x, y = ga.get(addr), gb.get(addr)
        if x is None or y is None:
            ch.add("gpus", addr, "added" if x is None else "removed", _gpu_summary(x) if x else None,
                   _gpu_summary(y) if y else None)
            continue
        ch.fields("gpus", addr, x, y, [("driver", "driver")])
        oa, ob = x.get("owner") or {}, y.get("owner") or {}
        ch.fields("gpus", addr, oa, ob, [("kind", "owner")])
        if sorted(oa.get("vms") or ()) != sorted(ob.get("vms") or ()):
            ch.add("gpus", addr, "VMs", sorted(oa.get("vms") or ()), sorted(ob.get("vms") or ()))
        if addr in da and addr in db:
            ch.fields("gpus", addr, da[addr], db[addr], [("driver_override", "driver_override")])


def _device_summary(dev: Mapping[str, Any]) -> str:
    name = " ".join(str(p) for p in (dev.get("vendor_name"), dev.get("device_name")) if p) or dev.get("class_name")
    return f"{name or '?'} on {dev.get('driver') or 'no driver'}"


def _devices(ch: _Changes, a: Side, b: Side) -> None:
    gpus = {g["address"] for s in (a, b) for g in s.snapshot.get("gpus") or ()}
    da, db = _by(a.snapshot.get("pci_devices"), "address"), _by(b.snapshot.get("pci_devices"), "address")
    for addr in sorted((set(da) | set(db)) - gpus):
        x, y = da.get(addr), db.get(addr)
        if x is None or y is None:
            ch.add("devices", addr, "added" if x is None else "removed", _device_summary(x) if x else None,
                   _device_summary(y) if y else None)
            continue
        ch.fields("devices", addr, x, y, [("driver", "driver"), ("driver_override", "driver_override"),
                                          ("sriov_numvfs", "SR-IOV VFs")])


def _iommu(ch: _Changes, a: Side, b: Side) -> None:
    ia, ib = a.snapshot.get("iommu") or {}, b.snapshot.get("iommu") or {}
    ga, gb = _by(ia.get("groups"), "id"), _by(ib.get("groups"), "id")
    if ia.get("enabled") != ib.get("enabled"):
        # the IOMMU turned on or off: every group came or went; their number says it
        ch.add("iommu", "IOMMU", "enabled", ia.get("enabled"), ib.get("enabled"))
        if len(ga) != len(gb):
            ch.add("iommu", "IOMMU", "groups", len(ga), len(gb))
        return
    for gid in sorted(set(ga) | set(gb)):
        x, y = ga.get(gid), gb.get(gid)
        subject = f"group {gid}"
        if x is None or y is None:
            ch.add("iommu", subject, "added" if x is None else "removed", list(x["devices"]) if x else None,
                   list(y["devices"]) if y else None)
            continue
        if sorted(x.get("devices") or ()) != sorted(y.get("devices") or ()):
            ch.add("iommu", subject, "devices", sorted(x.get("devices") or ()), sorted(y.get("devices") or ()))
        if x.get("viable") != y.get("viable"):
            ch.add("iommu", subject, "viable", x.get("viable"), y.get("viable"), note=str(y.get("reason") or ""))


def _mig_instances(mig: Mapping[str, Any]) -> list[str]:
    out = []
    for inst in mig.get("instances") or ():
        text = f"{inst.get('profile')} at slice {inst.get('start')}"
        cis = list(inst.get("compute_instances") or ())
        if cis and cis != [inst.get("profile")]:
            text += f" (compute instances {', '.join(map(str, cis))})"
        out.append(text)
    return sorted(out)


def _mig(ch: _Changes, a: Side, b: Side) -> None:
    ga, gb = _by(a.snapshot.get("gpus"), "address"), _by(b.snapshot.get("gpus"), "address")
    for addr in sorted(set(ga) & set(gb)):
        ma, mb = ga[addr].get("mig") or {}, gb[addr].get("mig") or {}
        if _unknown(ma.get("mode")) or _unknown(mb.get("mode")):
            continue  # not read on one side (a GPU on vfio-pci, no NVML): nothing to compare
        ch.fields("mig", addr, ma, mb, [("mode", "mode"), ("pending_mode", "pending mode")])
        before, after = _mig_instances(ma), _mig_instances(mb)
        if before != after:
            ch.add("mig", addr, "instances", before, after)


def _vgpu_instances(gpu: Mapping[str, Any]) -> list[str]:
    return sorted(f"{i.get('type_name') or '?'} {i.get('uuid') or '?'}"
                  for i in (gpu.get("vgpu") or {}).get("instances") or ())


def _vgpu(ch: _Changes, a: Side, b: Side) -> None:
    ga, gb = _by(a.snapshot.get("gpus"), "address"), _by(b.snapshot.get("gpus"), "address")
    for addr in sorted(set(ga) & set(gb)):
        before, after = _vgpu_instances(ga[addr]), _vgpu_instances(gb[addr])
        if before != after:
            ch.add("vgpu", addr, "instances", before, after)


VM_FIELDS = (("state", "state"), ("uuid", "uuid"), ("vcpus", "vCPUs"), ("memory_kib", "memory"),
             ("current_memory_kib", "current memory"), ("pins", "vCPU pins"), ("emulator_pins", "emulator pins"),
             ("numatune", "numatune"), ("hugepages_kib", "huge pages"), ("hostdevs", "hostdevs"))


def _libvirt_ok(side: Side) -> bool:
    return (side.snapshot.get("sources") or {}).get("libvirt") == "ok"


def _vm_summary(live: Mapping[str, Any] | None, config: Mapping[str, Any] | None) -> dict[str, Any]:
    merged = {**(config or {}), **{k: v for k, v in (live or {}).items() if v is not None}}
    return {what: merged[key] for key, what in VM_FIELDS if merged.get(key) not in (None, [], {})}


def _vms(ch: _Changes, a: Side, b: Side, notes: list[str]) -> None:
    if not (_libvirt_ok(a) and _libvirt_ok(b)):
        notes.append("VM definitions are not compared: libvirt was not read on "
                     + " and ".join(s.label for s in (a, b) if not _libvirt_ok(s)))
        return
    la = {vm["name"]: _live_vm(vm) for vm in a.snapshot.get("vms") or ()}
    lb = {vm["name"]: _live_vm(vm) for vm in b.snapshot.get("vms") or ()}
    for name in sorted(set(la) | set(lb) | set(a.vm_config) | set(b.vm_config)):
        in_a = name in la or name in a.vm_config
        in_b = name in lb or name in b.vm_config
        if not (in_a and in_b):
            ch.add("vms", name, "added" if not in_a else "removed",
                   _vm_summary(la.get(name), a.vm_config.get(name)) if in_a else None,
                   _vm_summary(lb.get(name), b.vm_config.get(name)) if in_b else None)
            continue
        live_a, live_b = la.get(name, {}), lb.get(name, {})
        conf_a, conf_b = a.vm_config.get(name, {}), b.vm_config.get(name, {})
        for key, what in VM_FIELDS:
            live = (live_a.get(key), live_b.get(key)) if key in live_a or key in live_b else None
            conf = (conf_a.get(key), conf_b.get(key)) if key in conf_a or key in conf_b else None
            if live is not None and live[0] != live[1]:
                ch.add("vms", name, what, *live)
            # the persistent definition: named apart only when it changed otherwise than the live one
            # (a shut-off VM's live definition is its persistent one)
            if conf is not None and conf[0] != conf[1] and conf != live:
                ch.add("vms", name, what if live is None else f"{what} (next boot)", *conf)


def _health(ch: _Changes, a: Side, b: Side) -> None:
    ga, gb = _by(a.snapshot.get("gpus"), "address"), _by(b.snapshot.get("gpus"), "address")
    for addr in sorted(set(ga) & set(gb)):
        x, y = ga[addr], gb[addr]
        keys = [k for k in y if k in HEALTH or k.startswith(HEALTH_PREFIXES)]
        for key in sorted(keys, key=lambda k: (k not in HEALTH, HEALTH.index(k) if k in HEALTH else 0, k)):
            before, after = x.get(key), y.get(key)
            if _grew(before, after):
                ch.add("health", addr, key, before, after)
        la = {lk.get("link"): lk for lk in x.get("nvlinks") or () if isinstance(lk, dict)}
        for link in y.get("nvlinks") or ():
            if isinstance(link, dict) and link.get("link") in la:
                for key in NVLINK_COUNTERS:
                    if _grew(la[link["link"]].get(key), link.get(key)):
                        ch.add("health", addr, f"nvlink {link['link']} {key}", la[link["link"]].get(key), link.get(key))


def _grew(before: Any, after: Any) -> bool:
    return (isinstance(before, int) and isinstance(after, int) and not isinstance(before, bool)
            and not isinstance(after, bool) and after > before)


def _event_key(e: Mapping[str, Any]) -> tuple[Any, ...]:
    return (e.get("kind"), e.get("time"), e.get("gpu"), e.get("xid"), e.get("text"))


def _event_what(e: Mapping[str, Any]) -> str:
    return f"Xid {e['xid']}" if e.get("xid") is not None else str(e.get("kind") or "event")


def _new_events(ch: _Changes, a: Side, b: Side) -> None:
    seen = {_event_key(e) for e in a.events}
    for e in b.events:
        if _event_key(e) not in seen:
            ch.add("events", str(e.get("gpu") or "?"), _event_what(e), None,
                   {k: e.get(k) for k in ("time", "text", "severity", "vms")})


def _new_audit(ch: _Changes, a: Side, b: Side) -> None:
    seen = {r.id for r in a.audit}
    for r in b.audit:
        if r.id in seen:
            continue
        ch.add("audit", r.id, r.action or "change", None,
               {"title": r.title, "result": r.result, "when": r.when, "who": (r.who or {}).get("user"),
                **({"undoes": r.undoes} if r.undoes else {})})


def _doctor(ch: _Changes, a: Side, b: Side) -> None:
    if a.doctor is None or b.doctor is None:
        return
    ca, cb = _by(a.doctor.get("checks"), "id"), _by(b.doctor.get("checks"), "id")
    for cid in list(ca) + [c for c in cb if c not in ca]:
        x, y = ca.get(cid), cb.get(cid)
        before = x.get("status") if x else None
        after = y.get("status") if y else None
        if before != after:
            ch.add("doctor", str(cid), "status", before, after, note=str((y or x or {}).get("finding") or ""))


# -- the readable list ------------------------------------------------------------------------------

def _size(kib: int) -> str:
    for unit, n in (("T", 1 << 30), ("G", 1 << 20), ("M", 1 << 10)):
        if kib >= n and kib % n == 0:
            return f"{kib // n}{unit}"
    return f"{kib}K"


def _bytes(kib: Any) -> str:
    if not isinstance(kib, int):
        return _value(kib)
    for unit, n in (("TiB", 1 << 30), ("GiB", 1 << 20), ("MiB", 1 << 10)):
        if kib >= n:
            value = kib / n
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{kib} KiB"


def _value(v: Any) -> str:
    if v is None or v == [] or v == {} or v == "":
        return "(none)"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k} {_value(x)}" for k, x in v.items())
    return str(v)


def _list_delta(before: list[Any], after: list[Any]) -> str:
    added = [x for x in after if x not in before]
    removed = [x for x in before if x not in after]
    if not added and not removed:
        return f"{_value(before)} → {_value(after)}"
    return ", ".join([f"+{_value(x)}" for x in added] + [f"-{_value(x)}" for x in removed])


def _dict_delta(before: dict[str, Any], after: dict[str, Any]) -> str:
    parts = []
    for k in list(before) + [k for k in after if k not in before]:
        x, y = before.get(k), after.get(k)
        if x != y:
            parts.append(f"+{k}:{_value(y)}" if x is None else f"-{k}:{_value(x)}" if y is None
                         else f"{k}:{_value(x)}→{_value(y)}")
    return ", ".join(parts)


def _text_lines(before: str, after: str, limit: int = 12) -> list[str]:
    import difflib

    out = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
           if not line.startswith(("---", "+++", "@@"))]
    return out[:limit] + ([f"… {len(out) - limit} more lines"] if len(out) > limit else [])


def describe(c: Change) -> list[str]:
    """A change in words: the first line, and any lines below it (a file's changed lines)."""
    b, a = c.before, c.after
    if c.topic == "files":
        if c.what == "content":
            return [f"{c.subject}: changed", *_text_lines(b or "", a or "")]
        return [f"{c.subject}: {c.what}", *_text_lines(b or "", a or "")] if c.what == "added" else [
            f"{c.subject}: {c.what}"]
    if c.topic == "audit":
        info = a or {}
        extra = ", ".join(str(x) for x in (info.get("result"), info.get("who"), info.get("when")) if x)
        return [f"{c.subject} {c.what}: {_value(info.get('title'))}" + (f" ({extra})" if extra else "")]
    if c.topic == "events":
        info = a or {}
        vms = info.get("vms") or []
        return [f"{c.subject} {c.what} at {_value(info.get('time'))}: {_value(info.get('text'))}"
                + (f" (VM {', '.join(vms)})" if vms else "")]
    if c.what in ("added", "removed"):
        return [f"{c.subject}: {c.what}" + (f" ({_value(a if c.what == 'added' else b)})"
                                             if (a if c.what == "added" else b) is not None else "")]
    if c.what == "command line" and isinstance(b, str) and isinstance(a, str):
        return [f"{c.subject}: {_list_delta(b.split(), a.split())}"]
    if isinstance(b, dict) and isinstance(a, dict):
        return [f"{c.subject} {c.what}: {_dict_delta(b, a)}"]
    if isinstance(b, list) and isinstance(a, list):
        return [f"{c.subject} {c.what}: {_list_delta(b, a)}"]
    if c.what.startswith(("memory", "current memory")):
        text = f"{_bytes(b)} → {_bytes(a)}"
    elif c.what.startswith("huge pages") and c.topic == "vms":
        text = f"{_bytes(b) if b else _value(b)} → {_bytes(a) if a else _value(a)}"
    else:
        text = f"{_value(b)} → {_value(a)}"
    return [f"{c.subject} {c.what}: {text}" + (f" — {c.note}" if c.note else "")]


def render(diff: Diff) -> list[tuple[str, str]]:
    """The readable list as (style, line) pairs: style "heading", "note", "change", "detail" or ""
    (plain). Host text stays text: callers print it as such (never as markup)."""
    out: list[tuple[str, str]] = [("", f"A: {diff.a.title}"), ("", f"B: {diff.b.title}")]
    out += [("note", f"note: {n}") for n in diff.notes]
    if not diff.changes:
        out.append(("", "no changes"))
        return out
    index = diff.gpu_index
    out.append(("", f"{len(diff.changes)} change{'s' if len(diff.changes) != 1 else ''}"))
    topic = None
    for c in diff.changes:
        if c.topic != topic:
            topic = c.topic
            out.append(("heading", TOPICS[topic]))
        lines = describe(c)
        first = lines[0]
        if c.topic in ("gpus", "mig", "vgpu", "health") and c.subject in index:
            first = first.replace(c.subject, f"GPU {index[c.subject]} {c.subject}", 1)
        out.append(("change", f"  {first}"))
        out += [("detail", f"      {line}") for line in lines[1:]]
    return out


def text(diff: Diff) -> str:
    return "\n".join(line for _style, line in render(diff)) + "\n"
