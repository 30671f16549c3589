"""Proxmox VE's VM configurations (`/etc/pve/qemu-server/<vmid>.conf`) read as qemu-server reads them,
and what Proxmox derives from them: vCPUs, memory, huge pages, NUMA cells, CPU affinity, host PCI devices.

The file (qemu-server's parse_vm_config): `key: value` lines; `#` lines are the description of the section
they are in (%XX-decoded); `[PENDING]` holds the changes waiting for a running VM's restart, with
`delete: KEY[,KEY…]` (a `!` before a key forces the delete); `[special:cloudinit]` what cloud-init last
generated; every other `[name]` is a snapshot. Blank lines are skipped; a line of none of these forms is
reported (`PATH:LINE: …`) and skipped, as Proxmox warns and skips it; a key given twice in a section is
reported (Proxmox keeps the later line, e.g. a second `hostpci0`); a value we interpret that Proxmox
would refuse is reported the same way and read as absent. The VM is still listed.

Derived as Proxmox does (qemu-server's config_to_command, PCI.pm, Memory.pm):
- vCPUs: `vcpus` when set (the hot-plugged count), else `sockets` × `cores` (both default 1).
- memory: `memory: [current=]MiB` (default 512); `balloon: MiB` (0: no balloon).
- `hugepages: any|2|1024` (MiB page sizes); `numa: 1` and `numaN: cpus=…,hostnodes=…,memory=…,policy=…`
  (lists of `a[-b]` joined by `;`); `affinity: CPULIST` (the whole QEMU process, PVE ≥ 7.3).
- `hostpciN` (N 0–15): `[host=]ADDR[;ADDR…]` or `mapping=ID`, with pcie, x-vga, rombar, romfile, mdev,
  legacy-igd, the id overrides and `driver`; an address is `[DOMAIN:]BUS:DEV[.FN]` (domain 0000 implied),
  one without a function standing for every function of the device (resolved against sysfs elsewhere,
  console/vms/proxmox_mapping.py).

Guessed (not read from qemu-server's code, only from its documentation): `memory` accepting a `max=` key
beside `current=` (read, ignored); booleans also written on/off/yes/no/true/false; `hugepages` without
`numa: 1` reported (Proxmox refuses to start such a VM, we believe); a NUMA cell with `hostnodes` and no
`policy` reported (likewise); snapshot section names are matched case-insensitively.
"""
from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from nodeconsole.console.cpulist import parse_cpulist

T = TypeVar("T")

N = TypeVar("N")

PENDING = "PENDING"
CLOUDINIT = "special:cloudinit"
MAX_HOSTPCI = 16
DEFAULT_MEMORY_MIB = 512
HUGEPAGE_SIZES = ("any", "2", "1024")
NUMA_POLICIES = ("bind", "preferred", "interleave")
LOCKS = ("backup", "clone", "create", "migrate", "rollback", "snapshot", "snapshot-delete", "suspending",
         "suspended")

_SECTION = re.compile(r"^\[([A-Za-z][A-Za-z0-9_\-]+|special:cloudinit)\]\s*$", re.IGNORECASE)
_KEY = re.compile(r"^([a-z][a-z_]*\d*):\s*(.+?)\s*$")
_PCI_ID = re.compile(r"^(?:([0-9a-f]{4,}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.([0-7]))?$")
_HEX_ID = re.compile(r"^(?:0x)?[0-9a-f]{4}$")
_TRUE, _FALSE = ("1", "on", "yes", "true"), ("0", "off", "no", "false")
_HOSTPCI_KEYS = ("host", "mapping", "pcie", "x-vga", "rombar", "romfile", "mdev", "legacy-igd", "vendor-id",
                 "device-id", "sub-vendor-id", "sub-device-id", "driver")
_HOSTPCI_BOOLS = ("pcie", "x-vga", "rombar", "legacy-igd")


@dataclass(frozen=True)
class ConfLine:
    key: str
    value: str
    line: int  # 1-based line number in the file


@dataclass(frozen=True)
class Section:
    """One section of the file: the main one (name ""), [PENDING], [special:cloudinit] or a snapshot."""
    name: str
    lines: tuple[ConfLine, ...] = ()
    description: str = ""
    delete: tuple[str, ...] = ()  # [PENDING]'s `delete:` keys, a force mark `!` dropped

    def get(self, key: str) -> ConfLine | None:
        """The key's line (the last one when repeated: Proxmox keeps the last)."""
        found = None
        for ln in self.lines:
            if ln.key == key:
                found = ln
        return found

    def keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(ln.key for ln in self.lines))


@dataclass(frozen=True)
class QemuConf:
    """One VM's configuration file, parsed."""
    vmid: int
    path: str  # as messages show it (/etc/pve/qemu-server/100.conf)
    main: Section
    pending: Section | None = None
    cloudinit: Section | None = None
    snapshots: tuple[Section, ...] = ()
    errors: tuple[str, ...] = ()  # "PATH:LINE: what is wrong"


def parse_conf(vmid: int, path: str, text: str) -> QemuConf:
    """The file's sections; a line Proxmox cannot parse is reported in `errors` and skipped."""
    sections: list[tuple[str, list[ConfLine], list[str], list[str]]] = [("", [], [], [])]
    errors: list[str] = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        name, lines, descr, delete = sections[-1]
        if (m := _SECTION.match(line)) is not None:
            title = m.group(1)
            title = PENDING if title.upper() == PENDING else CLOUDINIT if title.lower() == CLOUDINIT else title
            sections.append((title, [], [], []))
        elif line.startswith("#"):
            descr.append(urllib.parse.unquote(line[1:]))
        elif (m := _KEY.match(line)) is not None and m.group(1) == "delete":
            if name != PENDING:
                errors.append(f"{path}:{number}: 'delete' is only allowed in [PENDING]")
            else:
                delete.extend(k.lstrip("!") for k in re.split(r"[,;\s]+", m.group(2)) if k.lstrip("!"))
        elif m is not None:
            twice = next((ln.line for ln in lines if ln.key == m.group(1)), None)
            if twice is not None:
                errors.append(f"{path}:{number}: {m.group(1)} is given again (first on line {twice}): Proxmox "
                              "keeps this one")
            lines.append(ConfLine(m.group(1), m.group(2), number))
        else:
            errors.append(f"{path}:{number}: cannot parse {line.strip()[:80]!r}")
    made = [Section(n, tuple(ls), "\n".join(d), tuple(dl)) for n, ls, d, dl in sections]
    by_kind = {s.name: s for s in made[1:] if s.name in (PENDING, CLOUDINIT)}
    return QemuConf(vmid, path, made[0], by_kind.get(PENDING), by_kind.get(CLOUDINIT),
                    tuple(s for s in made[1:] if s.name not in (PENDING, CLOUDINIT)), tuple(errors))


# -- property strings (PVE::JSONSchema parse_property_string) -------------------------------------------

def property_string(value: str, default_key: str | None) -> dict[str, str]:
    """`k=v,k2=v2` (a bare first value is `default_key`'s) as a dict; ValueError with the reason."""
    out: dict[str, str] = {}
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        key, eq, val = part.partition("=")
        if not eq:
            if default_key is None or default_key in out:
                raise ValueError(f"{part!r} is not key=value")
            key, val = default_key, part
        if key in out:
            raise ValueError(f"{key!r} given twice")
        out[key] = val
    return out


def boolean(value: str, what: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{what}={value!r} is not a boolean (0 or 1)")


def integer(value: str, what: str, lowest: int = 0) -> int:
    if not value.isascii() or not value.isdigit() or int(value) < lowest:
        raise ValueError(f"{what}={value!r} is not a whole number of at least {lowest}")
    return int(value)


def id_ranges(value: str, what: str) -> tuple[int, ...]:
    """numaN's `a[-b];c…` lists (cpus, hostnodes)."""
    try:
        return parse_cpulist(value.replace(";", ","))
    except ValueError:
        raise ValueError(f"{what}={value!r} is not a list of numbers and ranges a-b joined by ';'") from None


# -- hostpciN -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HostPci:
    """One `hostpciN` line: the host addresses as written (canonical: domain added, lower case; one
    without a function is `DDDD:BB:DD`) or a mapping, and its options."""
    index: int
    hosts: tuple[str, ...] = ()
    mapping: str | None = None
    pcie: bool = False
    x_vga: bool = False
    mdev: str | None = None
    driver: str | None = None  # "vfio" | "keep" (PVE 9)
    options: tuple[tuple[str, str], ...] = ()  # every option as written
    line: int = 0


def pci_host_id(text: str) -> str:
    """A hostpci address `[DOMAIN:]BUS:DEV[.FN]` canonical (domain 0000 implied); ValueError otherwise."""
    m = _PCI_ID.match(text.strip().lower())
    if m is None or int(m.group(3), 16) > 0x1F:
        raise ValueError(f"{text!r} is not a PCI address ([DOMAIN:]BUS:DEV[.FN], e.g. 0000:41:00.0 or 41:00)")
    dom = int(m.group(1), 16) if m.group(1) else 0
    base = f"{dom:04x}:{m.group(2)}:{m.group(3)}"
    return base if m.group(4) is None else f"{base}.{m.group(4)}"


def parse_hostpci(index: int, value: str, line: int = 0) -> HostPci:
    """One hostpciN value; ValueError saying what Proxmox would refuse."""
    opts = property_string(value, "host")
    unknown = [k for k in opts if k not in _HOSTPCI_KEYS]
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}")
    if ("host" in opts) == ("mapping" in opts):
        raise ValueError("needs either host=ADDR or mapping=ID" if "host" not in opts else
                         "host= and mapping= exclude each other")
    hosts = tuple(pci_host_id(h) for h in opts.get("host", "").split(";") if h.strip()) if "host" in opts else ()
    if "host" in opts and not hosts:
        raise ValueError("host= names no address")
    flags = {k: boolean(opts[k], k) for k in _HOSTPCI_BOOLS if k in opts}
    for k in ("vendor-id", "device-id", "sub-vendor-id", "sub-device-id"):
        if k in opts and not _HEX_ID.match(opts[k].lower()):
            raise ValueError(f"{k}={opts[k]!r} is not a hex id (e.g. 0x10de)")
    if "driver" in opts and opts["driver"] not in ("vfio", "keep"):
        raise ValueError(f"driver={opts['driver']!r} is not vfio or keep")
    if "mdev" in opts and len(hosts) > 1:
        raise ValueError("mdev= takes one device, not several (ADDR;ADDR)")
    return HostPci(index, hosts, opts.get("mapping"), flags.get("pcie", False), flags.get("x-vga", False),
                   opts.get("mdev"), opts.get("driver"), tuple(opts.items()), line)


# -- NUMA cells -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NumaCell:
    """One `numaN` line: the guest CPUs of the cell, the host nodes its memory comes from, and how."""
    index: int
    cpus: tuple[int, ...]
    hostnodes: tuple[int, ...] = ()
    memory_mib: int | None = None
    policy: str | None = None  # bind | preferred | interleave


def parse_numa_cell(index: int, value: str) -> NumaCell:
    opts = property_string(value, "cpus")
    unknown = [k for k in opts if k not in ("cpus", "hostnodes", "memory", "policy")]
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}")
    if "cpus" not in opts:
        raise ValueError("cpus= is required")
    policy = opts.get("policy")
    if policy is not None and policy not in NUMA_POLICIES:
        raise ValueError(f"policy={policy!r} is not one of {', '.join(NUMA_POLICIES)}")
    hostnodes = id_ranges(opts["hostnodes"], "hostnodes") if "hostnodes" in opts else ()
    if hostnodes and policy is None:
        raise ValueError("hostnodes= needs a policy= (bind, preferred or interleave)")
    memory = integer(opts["memory"], "memory", 1) if "memory" in opts else None
    return NumaCell(index, id_ranges(opts["cpus"], "cpus"), hostnodes, memory, policy)


# -- what Proxmox derives from a section ----------------------------------------------------------------

@dataclass(frozen=True)
class VmSettings:
    """What Proxmox makes of one section of a VM's config (its main section, or the main section with the
    pending changes applied)."""
    name: str | None = None
    sockets: int = 1
    cores: int = 1
    vcpus: int = 1  # online vCPUs: `vcpus` when set, else sockets × cores
    memory_mib: int = DEFAULT_MEMORY_MIB
    balloon_mib: int | None = None
    numa: bool = False
    cells: tuple[NumaCell, ...] = ()
    hugepages: str | None = None  # any | 2 | 1024 (MiB)
    affinity: tuple[int, ...] = ()
    hostpci: tuple[HostPci, ...] = ()
    lock: str | None = None
    template: bool = False
    uuid: str = ""  # smbios1's uuid=
    problems: tuple[str, ...] = ()  # "PATH:LINE: KEY: what is wrong"


def _one(section: Section, key: str, parse: Callable[[str], T], problems: list[str], path: str) -> T | None:
    """The key's parsed value (None when absent or refused; a refusal is reported with its line)."""
    ln = section.get(key)
    if ln is None:
        return None
    try:
        return parse(ln.value)
    except ValueError as e:
        problems.append(f"{path}:{ln.line}: {key}: {e}")
        return None


def _memory(value: str) -> int:
    opts = property_string(value, "current")
    unknown = [k for k in opts if k not in ("current", "max")]
    if unknown or "current" not in opts:
        raise ValueError(f"{value!r} is not [current=]MiB")
    return integer(opts["current"], "current", 16)


def _hugepages(value: str) -> str:
    if value not in HUGEPAGE_SIZES:
        raise ValueError(f"{value!r} is not any, 2 or 1024")
    return value


def _lock(value: str) -> str:
    if value not in LOCKS:
        raise ValueError(f"{value!r} is not a lock Proxmox sets ({', '.join(LOCKS)})")
    return value


def _uuid(value: str) -> str:
    return property_string(value, None).get("uuid", "").lower()


def _indexed(section: Section, prefix: str, parse: Callable[[int, str, int], N], problems: list[str],
             path: str) -> list[N]:
    """Every `PREFIXn` line parsed (n in 0..15 for hostpci, any for numa), in index order."""
    out: list[tuple[int, N]] = []
    for ln in section.lines:
        rest = ln.key[len(prefix):]
        if not ln.key.startswith(prefix) or not rest.isdigit() or section.get(ln.key) is not ln:
            continue  # not PREFIXn, or not its last line (the one Proxmox keeps)
        if prefix == "hostpci" and int(rest) >= MAX_HOSTPCI:
            problems.append(f"{path}:{ln.line}: {ln.key}: Proxmox has hostpci0 to hostpci{MAX_HOSTPCI - 1}")
            continue
        try:
            out.append((int(rest), parse(int(rest), ln.value, ln.line)))
        except ValueError as e:
            problems.append(f"{path}:{ln.line}: {ln.key}: {e}")
    return [value for _, value in sorted(out, key=lambda x: x[0])]


def settings(section: Section, path: str) -> VmSettings:
    """What Proxmox derives from `section` (see the module's doc); a value it would refuse is reported."""
    p: list[str] = []
    sockets = _one(section, "sockets", lambda v: integer(v, "sockets", 1), p, path) or 1
    cores = _one(section, "cores", lambda v: integer(v, "cores", 1), p, path) or 1
    vcpus = _one(section, "vcpus", lambda v: integer(v, "vcpus", 0), p, path) or 0
    if vcpus > sockets * cores:
        ln = section.get("vcpus")
        p.append(f"{path}:{ln.line if ln else 0}: vcpus: {vcpus} is more than sockets × cores = {sockets * cores}")
        vcpus = 0
    numa = _one(section, "numa", lambda v: boolean(v, "numa"), p, path) or False
    hugepages = _one(section, "hugepages", _hugepages, p, path)
    if hugepages is not None and not numa:
        ln = section.get("hugepages")
        p.append(f"{path}:{ln.line if ln else 0}: hugepages: needs numa: 1 (Proxmox refuses to start the VM)")
    cells = _indexed(section, "numa", lambda i, v, _n: parse_numa_cell(i, v), p, path)
    memory = _one(section, "memory", _memory, p, path)
    return VmSettings(
        name=_one(section, "name", str, p, path), sockets=sockets, cores=cores, vcpus=vcpus or sockets * cores,
        memory_mib=memory or DEFAULT_MEMORY_MIB,
        balloon_mib=_one(section, "balloon", lambda v: integer(v, "balloon"), p, path), numa=numa,
        cells=tuple(cells) if numa else (), hugepages=hugepages,
        affinity=_one(section, "affinity", _affinity, p, path) or (),
        hostpci=tuple(_indexed(section, "hostpci", parse_hostpci, p, path)),
        lock=_one(section, "lock", _lock, p, path),
        template=_one(section, "template", lambda v: boolean(v, "template"), p, path) or False,
        uuid=_one(section, "smbios1", _uuid, p, path) or "", problems=tuple(p))


def _affinity(value: str) -> tuple[int, ...]:
    cpus = parse_cpulist(value)
    if not cpus:
        raise ValueError("names no CPU")
    return cpus


def with_pending(conf: QemuConf) -> Section:
    """The main section as it will be after the restart: [PENDING]'s values over it, its deletes gone."""
    if conf.pending is None:
        return conf.main
    changed = {ln.key for ln in conf.pending.lines} | set(conf.pending.delete)
    kept = [ln for ln in conf.main.lines if ln.key not in changed]
    return Section("", tuple(kept) + conf.pending.lines, conf.main.description)
