"""PCI configuration space of a synthetic host (`sys/bus/pci/devices/X/config`): the header with the
function's ids and class, bus numbers on bridges, a PCI Express capability with the port type and the
link, and the extended capabilities: AER everywhere on PCIe, then ACS on root ports and switch
downstream ports (and multifunction endpoints with ACS) — unless the spec says the ports have no ACS.

PCIe functions get the 4096 bytes of extended config space; conventional PCI functions (behind a
PCIe-to-PCI bridge) the 256 bytes of PCI."""
from __future__ import annotations

from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.gen_pci import Func, PciLayout
from nodeconsole.console.demo.spec import HostSpec, Link, PciDev, walk

# PCI Express capability: device/port type (bits 7:4 of the capabilities register)
ENDPOINT, ROOT_PORT, UPSTREAM, DOWNSTREAM, PCIE_TO_PCI, RCIEP = 0x0, 0x4, 0x5, 0x6, 0x7, 0x9
CONVENTIONAL = -1  # behind a PCIe-to-PCI bridge: no PCI Express capability
ACS_ID, AER_ID = 0x000D, 0x0001
ACS_CAPS = 0x5F  # SV TB RR CR UF DT supported (egress control is not)
ACS_ON = 0x1D  # SV RR CR UF: what Linux enables for isolation
PM_AT, PCIE_AT, AER_AT, ACS_AT = 0x40, 0x60, 0x100, 0x148


def port_types(spec: HostSpec) -> dict[str, int]:
    """Address → PCI Express device/port type (CONVENTIONAL for plain PCI) of every spec function."""
    kinds: dict[str, int] = {}
    for addr, dev, parent, _hb in walk(spec):
        up = kinds.get(parent) if parent else None
        if up is None:
            kinds[addr] = ROOT_PORT if dev.is_bridge else RCIEP
        elif up in (CONVENTIONAL, PCIE_TO_PCI):
            kinds[addr] = CONVENTIONAL
        elif up == UPSTREAM:
            kinds[addr] = DOWNSTREAM if dev.is_bridge else ENDPOINT
        elif dev.is_bridge:
            kinds[addr] = UPSTREAM if any(c.is_bridge for c in dev.children) else PCIE_TO_PCI
        else:
            kinds[addr] = ENDPOINT
    return kinds


def has_acs(dev: PciDev | None, kind: int) -> bool:
    """Root ports and downstream ports have ACS unless built without (acs=False); an endpoint only when
    it is a multifunction device with ACS (acs=True)."""
    if dev is None:
        return False
    if kind in (ROOT_PORT, DOWNSTREAM):
        return dev.acs is not False
    return kind in (ENDPOINT, RCIEP) and dev.acs is True


def config_space(f: Func, kind: int, multifunction: bool, primary_bus: int) -> bytes:
    """The config space bytes of one function."""
    conventional = kind == CONVENTIONAL
    cfg = bytearray(256 if conventional else 4096)
    bridge = f.subordinate is not None
    _put(cfg, 0x00, 2, f.vendor)
    _put(cfg, 0x02, 2, f.device)
    _put(cfg, 0x04, 2, 0x0407 if bridge else 0x0406)  # I/O, memory, bus master; INTx off on endpoints
    _put(cfg, 0x06, 2, 0x0010)  # capabilities list
    _put(cfg, 0x08, 4, f.class_id << 8 | (0xA1 if f.gpu else 0x00))
    cfg[0x0E] = (1 if bridge else 0) | (0x80 if multifunction else 0)
    if bridge:
        dev = f.dev
        assert dev is not None and dev.secondary_bus is not None  # bridges come from the spec
        cfg[0x18:0x1B] = bytes([primary_bus, dev.secondary_bus, f.subordinate or 0])
    else:
        _put(cfg, 0x2C, 2, f.sub_vendor)
        _put(cfg, 0x2E, 2, f.sub_device)
        cfg[0x3D] = 1  # INTA
    cfg[0x3C] = 0xFF
    cfg[0x34] = PM_AT
    _put(cfg, PM_AT, 2, 0x01 | ((0 if conventional else PCIE_AT) << 8))  # power management
    _put(cfg, PM_AT + 2, 2, 0x0003)
    if conventional:
        return bytes(cfg)
    _pcie_capability(cfg, kind, f.link or Link(5, 16))
    acs = has_acs(f.dev, kind)
    _put(cfg, AER_AT, 4, AER_ID | 2 << 16 | (ACS_AT if acs else 0) << 20)
    if acs:
        _put(cfg, ACS_AT, 4, ACS_ID | 1 << 16)
        _put(cfg, ACS_AT + 4, 2, ACS_CAPS)
        _put(cfg, ACS_AT + 6, 2, ACS_ON)
    return bytes(cfg)


def _pcie_capability(cfg: bytearray, kind: int, link: Link) -> None:
    max_gen, max_width = link.max_gen or link.gen, link.max_width or link.width
    slot = 0x100 if kind in (ROOT_PORT, DOWNSTREAM) else 0
    _put(cfg, PCIE_AT, 2, 0x10)  # capability id, last in the list
    _put(cfg, PCIE_AT + 2, 2, 0x2 | kind << 4 | slot)
    _put(cfg, PCIE_AT + 4, 4, 0x8FC2 if kind in (ENDPOINT, RCIEP) else 0x8002)  # device capabilities
    _put(cfg, PCIE_AT + 0x0C, 4, max_gen | max_width << 4 | 0x00400C00)  # link capabilities
    _put(cfg, PCIE_AT + 0x12, 2, link.gen | link.width << 4)  # link status
    _put(cfg, PCIE_AT + 0x2C, 4, sum(2 << g for g in range(max_gen)))  # supported speeds vector


def _put(cfg: bytearray, at: int, size: int, value: int) -> None:
    cfg[at:at + size] = value.to_bytes(size, "little")


def write_config(w: TreeWriter, spec: HostSpec, pci: PciLayout) -> None:
    """`config` of every function: the spec's and their SR-IOV VFs (PCIe endpoints without ACS)."""
    kinds = port_types(spec)
    slots: dict[str, int] = {}
    for addr, f in pci.funcs.items():
        if f.physfn is None:  # VFs share a slot number with their PF but are not its functions
            key = addr.rsplit(".", 1)[0]
            slots[key] = slots.get(key, 0) + 1
    for addr, f in pci.funcs.items():
        kind = kinds.get(addr, ENDPOINT)
        multifunction = f.physfn is None and slots[addr.rsplit(".", 1)[0]] > 1
        primary = int(addr.split(":")[1], 16)
        w.raw_bytes(f"{f.path}/config", config_space(f, kind, multifunction, primary))
