"""PCIe: acs (read from each port's config space) and pcie-link."""
from __future__ import annotations

from dataclasses import dataclass, field

from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, Verdict, names, skipped
from nodeconsole.console.doctor.model import CheckResult, Fix
from nodeconsole.console.health import LINK_NARROW, LINK_SLOW, link_state
from nodeconsole.console.iommu import slot_of
from nodeconsole.console.model import Gpu, PciDevice

ISOLATING = facts.ACS_SV | facts.ACS_RR | facts.ACS_CR | facts.ACS_UF  # what Linux asks of a port
REDIRECT = facts.ACS_RR | facts.ACS_CR  # peer requests and completions go up to the root complex
PCIE_CAP = 0x10
PORT_TYPES = {4: "root port", 5: "switch upstream port", 6: "switch downstream port"}


def config_path(address: str) -> str:
    return f"sys/bus/pci/devices/{address}/config"


def port_type(config: bytes) -> int | None:
    """The PCI Express capability's device/port type (4 root port, 5 upstream, 6 downstream), None when
    the config space has no capability list or no PCIe capability."""
    if len(config) < 0x40 or not config[0x06] & 0x10:
        return None
    ptr, seen = config[0x34] & 0xFC, set()
    while 0x40 <= ptr <= len(config) - 4 and ptr not in seen:
        seen.add(ptr)
        if config[ptr] == PCIE_CAP:
            return (config[ptr + 2] >> 4) & 0xF
        ptr = config[ptr + 1] & 0xFC
    return None


@dataclass
class Port:
    """A port above one or more GPUs: a switch's downstream port (switch = its upstream port) or a root
    port (switch None)."""
    address: str
    switch: str | None
    gpus: list[Gpu] = field(default_factory=list)
    acs: int | None = None  # ACS control; None: no ACS capability
    readable: bool = True


def _ports(ctx: Context) -> dict[str, Port]:
    by_addr = ctx.by_addr
    ports: dict[str, Port] = {}
    for g in ctx.snap.gpus:
        dev = by_addr.get(g.address)
        port = by_addr.get(dev.parent) if dev is not None and dev.parent else None
        if port is None:
            continue
        if port.address not in ports:
            ports[port.address] = _read_port(ctx, port)
        ports[port.address].gpus.append(g)
    return ports


def _read_port(ctx: Context, port: PciDevice) -> Port:
    up = ctx.by_addr.get(port.parent) if port.parent else None
    config = ctx.files.read_bytes(config_path(port.address), 4096)
    kind = port_type(config) if config else None
    if kind == 6 or (kind is None and up is not None and up.is_bridge):
        switch = up.address if up is not None else port.address
    else:
        switch = None
    if config is None or len(config) < 0x104:
        return Port(port.address, switch, readable=False)
    return Port(port.address, switch, acs=facts.acs_control(config))


def _acs_text(ctrl: int | None) -> str:
    if ctrl is None:
        return "no ACS capability"
    bits = [n for n, b in (("SV", facts.ACS_SV), ("TB", facts.ACS_TB), ("RR", facts.ACS_RR),
                           ("CR", facts.ACS_CR), ("UF", facts.ACS_UF), ("EC", facts.ACS_EC),
                           ("DT", facts.ACS_DT)) if ctrl & b]
    return f"ACS control {ctrl:#06x} ({' '.join(bits) or 'nothing on'})"


def check_acs(ctx: Context) -> CheckResult:
    v = Verdict("acs")
    snap = ctx.snap
    if not snap.gpus:
        return skipped("acs", "no NVIDIA GPU found")
    ports = _ports(ctx)
    unreadable = [p for p in ports.values() if not p.readable]
    if unreadable:
        sizes = {len(ctx.files.read_bytes(config_path(p.address), 4096) or b"") for p in unreadable}
        v.missing.append(f"the config space of {names([p.address for p in unreadable], 4)} is unreadable "
                         f"({'/'.join(str(s) for s in sorted(sizes))} bytes: reading the ACS capability "
                         "needs root on the host itself; a captured tree holds only the first 64)")
    for p in ports.values():
        if p.readable:
            v.read(config_path(p.address), _acs_text(p.acs))
    # switches whose downstream ports do not isolate: the GPUs below share an IOMMU group
    open_ports = [p for p in ports.values() if p.readable and p.switch and (p.acs or 0) & ISOLATING != ISOLATING]
    by_switch: dict[str, list[Port]] = {}
    for p in open_ports:
        by_switch.setdefault(p.switch or "", []).append(p)
    for switch, plist in sorted(by_switch.items()):
        gpus = [g for p in plist for g in p.gpus]
        groups = sorted({g.iommu_group for g in gpus if g.iommu_group is not None})
        shared = []
        for gid in groups:
            grp = snap.group(gid)
            if grp is None:
                continue
            slots = {slot_of(g.address) for g in gpus if g.iommu_group == gid}
            others = [a for a in grp.devices if slot_of(a) not in slots
                      and not (ctx.by_addr.get(a) is not None and ctx.by_addr[a].is_bridge)]
            members = [f"GPU {g.index}" for g in gpus if g.iommu_group == gid]
            if len(members) > 1 or others:
                shared.append(f"group {gid} holds {', '.join(members)}" + (f" and {names(others, 3)}" if others else ""))
        what = "has no ACS" if all(p.acs is None for p in plist) else "does not enable ACS isolation"
        if shared:
            v.warns.append(f"switch {switch} {what}: {'; '.join(shared)}")
        elif not groups and len(gpus) > 1:
            v.warns.append(f"switch {switch} {what}: {names([ctx.label(g) for g in gpus], 4)} would share an "
                           "IOMMU group")
    if v.warns:
        v.fix = Fix("put the GPUs that go to different VMs in slots under ports with ACS (or pass the whole "
                    "group to one VM); pcie_acs_override only hides the problem", (), False, False)
    pairs = _redirected_pairs(ports)
    if pairs:
        v.notes.append(f"ACS sends P2P between {names(pairs, 6)} through the root complex (about half "
                       "the bandwidth)")
    isolated = len([p for p in ports.values() if p.readable and p.acs is not None and p.acs & ISOLATING == ISOLATING])
    return v.result(f"{isolated} of {len(ports)} GPU ports isolate with ACS")


def _redirected_pairs(ports: dict[str, Port]) -> list[str]:
    """GPU pairs under different downstream ports of one switch with RR and CR on: their peer traffic
    is redirected to the root complex."""
    by_switch: dict[str, list[Port]] = {}
    for p in ports.values():
        if p.switch and p.readable and p.acs is not None and p.acs & REDIRECT == REDIRECT:
            by_switch.setdefault(p.switch, []).append(p)
    out = []
    for plist in by_switch.values():
        for i, a in enumerate(plist):
            for b in plist[i + 1:]:
                out += [f"GPU {x.index}-{y.index}" for x in a.gpus for y in b.gpus]
    return out


def check_pcie_link(ctx: Context) -> CheckResult:
    v = Verdict("pcie-link")
    gpus = ctx.snap.gpus
    if not gpus:
        return skipped("pcie-link", "no NVIDIA GPU found")
    narrow, slow, unread = [], [], []
    for g in gpus:
        link = g.link
        if not link.current_width or not link.max_width:
            unread.append(g.address)
            continue
        v.read(f"sys/bus/pci/devices/{g.address}/current_link_width",
               f"x{link.current_width} of x{link.max_width}, {link.current_speed or '?'} of {link.max_speed or '?'}")
        state = link_state(link)  # the one link rule, the GPU health verdict's too (console/health.py)
        if state == LINK_NARROW:
            narrow.append(f"{ctx.label(g)} at x{link.current_width} of x{link.max_width}")
        elif state == LINK_SLOW:
            slow.append(f"GPU {g.index} at {link.current_speed} of {link.max_speed}")
    if narrow:
        v.warns.append(f"link trained below its width: {names(narrow, 4)}")
        v.fix = Fix("reseat the card, check its riser and slot (a link that trains narrow stays narrow until "
                    "the next reset)", (), False, False)
    if unread:
        v.missing.append(f"the link of {names(unread, 4)} is not readable (current_link_width / max_link_width)")
    if slow:
        v.notes.append(f"below top speed (normal while a GPU idles): {names(slow, 4)}")
    return v.result(f"all {len(gpus) - len(unread)} GPUs at their full link width")
