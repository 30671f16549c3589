"""Proxmox VE's PCI resource mappings (`/etc/pve/mapping/pci.cfg`) and a `hostpciN`'s host functions,
resolved against the host's sysfs (through the root seam).

pci.cfg (PVE::Mapping::PCI, a section config): an `ID` line opens a mapping; its properties follow on
tab-indented lines: `map node=NODE,path=ADDR[;ADDR],id=VVVV:DDDD[,subsystem-id=VVVV:DDDD][,iommugroup=G]`
(one per node and device; several on one node are a pool), `mdev 1`, `description TEXT`. At a VM's start
Proxmox takes the node's first path no other VM holds, and refuses when a path's vendor:device (or
subsystem, or IOMMU group) no longer matches sysfs ("hardware probably changed"): such an entry, and a
hostpci naming a mapping pci.cfg lacks, are reported here.

A `hostpciN` address without a function (`41:00`) stands for every function of the device present in
sysfs (PVE::SysFSTools::lspci), an address not present is reported.

Guessed: the node is `/etc/pve/local`'s target (nodes/NAME), else the host name's first label; for a
running VM the path taken is the one `/run/qemu-server/pci-id-reservations` reserves for its vmid, else
(and for a stopped VM) the node's first path that matches sysfs; an mdev GPU path is used the same way.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from nodeconsole.console.root import Root
from nodeconsole.console.vms.proxmox_conf import HostPci, pci_host_id, property_string

PCI_CFG = "etc/pve/mapping/pci.cfg"
RESERVATIONS = "run/qemu-server/pci-id-reservations"
_DEVICES = "sys/bus/pci/devices"


@dataclass(frozen=True)
class MapEntry:
    """One `map` line: a device (one or more functions) of the mapping on one node."""
    node: str
    paths: tuple[str, ...]
    id: str | None = None  # vendor:device, lower case
    subsystem_id: str | None = None
    iommugroup: int | None = None
    line: int = 0


@dataclass(frozen=True)
class PciMapping:
    name: str
    entries: tuple[MapEntry, ...] = ()
    mdev: bool = False
    description: str = ""


@dataclass(frozen=True)
class PciMappings:
    """pci.cfg parsed: the mappings by ID, and the lines it could not read ("PATH:LINE: …")."""
    mappings: dict[str, PciMapping]
    errors: tuple[str, ...] = ()


def parse_pci_cfg(text: str, path: str = "/" + PCI_CFG) -> PciMappings:
    """pci.cfg's mappings; a line that is neither an ID nor a known property is reported and skipped."""
    found: dict[str, PciMapping] = {}
    errors: list[str] = []
    current: PciMapping | None = None
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            current = found[line.strip()] = PciMapping(line.strip())
            continue
        key, _, value = line.strip().partition(" ")
        if current is None:
            errors.append(f"{path}:{number}: {key!r} outside a mapping")
        elif key == "map":
            try:
                entry = _map_entry(value.strip(), number)
            except ValueError as e:
                errors.append(f"{path}:{number}: map: {e}")
                continue
            current = found[current.name] = PciMapping(current.name, current.entries + (entry,), current.mdev,
                                                       current.description)
        elif key == "mdev":
            current = found[current.name] = PciMapping(current.name, current.entries, value.strip() == "1",
                                                       current.description)
        elif key == "description":
            current = found[current.name] = PciMapping(current.name, current.entries, current.mdev, value.strip())
        else:
            errors.append(f"{path}:{number}: unknown property {key!r}")
    return PciMappings(found, tuple(errors))


def _map_entry(value: str, line: int) -> MapEntry:
    opts = property_string(value, None)
    for need in ("node", "path"):
        if need not in opts:
            raise ValueError(f"{need}= is required")
    paths = tuple(pci_host_id(p) for p in opts["path"].split(";") if p.strip())
    group = opts.get("iommugroup")
    if group is not None and not (group.isascii() and group.isdigit()):
        raise ValueError(f"iommugroup={group!r} is not a number")
    return MapEntry(opts["node"], paths, opts.get("id", "").lower() or None,
                    opts.get("subsystem-id", "").lower() or None, int(group) if group is not None else None, line)


def read_mappings(root: Root) -> PciMappings:
    text = root.read_bytes(PCI_CFG)
    return parse_pci_cfg(text.decode("utf-8", "replace")) if text is not None else PciMappings({})


def node_name(root: Root) -> str:
    """This Proxmox node's name: /etc/pve/local's target, else the host name's first label."""
    target = root.readlink("etc/pve/local")
    if target and target.rstrip("/").split("/")[-2:-1] == ["nodes"]:
        return target.rstrip("/").split("/")[-1]
    name = root.read("etc/hostname") or root.read("proc/sys/kernel/hostname") or ""
    return name.split(".")[0]


def functions(root: Root, host: str) -> tuple[str, ...]:
    """The PCI functions a hostpci address stands for: itself, or every function of a device named
    without one; () when sysfs has none of them."""
    present = root.listdir(_DEVICES)
    if "." in host:
        return (host,) if host in present else ()
    return tuple(a for a in present if a.startswith(host + "."))


def _pci_id(root: Root, address: str, a: str, b: str) -> str | None:
    va, vb = root.read(f"{_DEVICES}/{address}/{a}"), root.read(f"{_DEVICES}/{address}/{b}")
    if not va or not vb:
        return None
    return f"{va.lower().removeprefix('0x')}:{vb.lower().removeprefix('0x')}"


def entry_mismatch(root: Root, entry: MapEntry) -> str | None:
    """Why the entry no longer matches sysfs (Proxmox refuses the VM's start then), None when it does."""
    for path in entry.paths:
        fns = functions(root, path)
        if not fns:
            return f"{path} is not on this host"
        first = fns[0]
        if entry.id is not None and (now := _pci_id(root, first, "vendor", "device")) != entry.id:
            return f"{path} is {now or 'unreadable'} in sysfs, the mapping says id={entry.id}"
        if entry.subsystem_id is not None and \
                (sub := _pci_id(root, first, "subsystem_vendor", "subsystem_device")) != entry.subsystem_id:
            return f"{path} has subsystem {sub or 'unreadable'}, the mapping says subsystem-id={entry.subsystem_id}"
        group = root.link_name(f"{_DEVICES}/{first}/iommu_group")
        if entry.iommugroup is not None and group is not None and group != str(entry.iommugroup):
            return f"{path} is in IOMMU group {group}, the mapping says iommugroup={entry.iommugroup}"
    return None


def reserved_by(root: Root) -> dict[str, int]:
    """Which vmid reserved each PCI address at its start (pci-id-reservations, JSON)."""
    data = root.read_bytes(RESERVATIONS)
    try:
        table = json.loads(data) if data else {}
    except ValueError:
        return {}
    out: dict[str, int] = {}
    for addr, held in table.items() if isinstance(table, dict) else ():
        vmid = held.get("vmid") if isinstance(held, dict) else held
        if isinstance(vmid, (int, str)) and str(vmid).isdigit():
            out[str(addr).lower()] = int(vmid)
    return out


@dataclass(frozen=True)
class Resolved:
    """A hostpci line's host functions, and what is wrong with it."""
    addresses: tuple[str, ...]
    problems: tuple[str, ...] = ()


def resolve_hostpci(root: Root, pci: HostPci, vmid: int, running: bool, maps: PciMappings, node: str,
                    reserved: dict[str, int]) -> Resolved:
    """The host functions of `pci` (its addresses, or its mapping's path on this node)."""
    where = f"hostpci{pci.index}"
    if pci.mapping is None:
        out: list[str] = []
        problems: list[str] = []
        for host in pci.hosts:
            fns = functions(root, host)
            out.extend(fns or ((host,) if "." in host else ()))
            if not fns:
                problems.append(f"{where}: no PCI device {host} on this host")
        return Resolved(tuple(out), tuple(problems))
    mapping = maps.mappings.get(pci.mapping)
    if mapping is None:
        return Resolved((), (f"{where}: mapping {pci.mapping!r} is not in /{PCI_CFG}",))
    here = [e for e in mapping.entries if e.node == node]
    if not here:
        return Resolved((), (f"{where}: mapping {pci.mapping!r} has no device on node {node or '?'}",))
    bad = {id(e): why for e in here if (why := entry_mismatch(root, e)) is not None}
    mine = [e for e in here if running and any(reserved.get(a) == vmid for p in e.paths for a in functions(root, p))]
    pick = (mine or [e for e in here if id(e) not in bad] or here)[0]
    wrong = tuple(f"{where}: mapping {pci.mapping!r} (/{PCI_CFG}:{e.line}): {bad[id(e)]}"
                  for e in here if id(e) in bad)
    addrs = [a for p in pick.paths for a in (functions(root, p) or ((p,) if "." in p else ()))]
    return Resolved(tuple(addrs), wrong)
