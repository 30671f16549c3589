"""The edits actions make to a domain definition, all through console/domain_xml.py's splicing editor.

Each takes the domain's XML text and returns the new text; what an edit does not name stays byte for
byte, and each result is parsed again and checked to say what was asked (ValueError otherwise).
Asking for what is already there returns the very same text.

- vCPU pins, emulator pin: `set_vcpupin`, `set_emulatorpin` (CPU sets as libvirt text, kept verbatim,
  so an undo writes back what was there); `set_vcpu_pins` / `set_emulator_pins` take CPU numbers.
- memory policy: `set_numa_memory` (mode None: no mode attribute, libvirt's strict); `set_numatune`.
- host devices: `add_pci_hostdev` / `remove_pci_hostdev`, `add_mdev_hostdev` / `remove_mdev_hostdev`;
  `take_hostdev` / `put_hostdev` remove one and put that exact element back; `hostdev_place`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.domain_xml import CPUTUNE_ORDER, DOMAIN_ORDER, NUMATUNE_ORDER, Doc, El, Spec, find_path
from nodeconsole.console.libvirt_xml import NUMA_MODES, parse_domain, parse_libvirt_set
from nodeconsole.console.pciaddr import format_pci_address, parse_pci_address


def _vcpu_of(el: El) -> int:
    text = el.attrs.get("vcpu", "")
    return int(text) if text.isdigit() else -1


def _first(els: list[El]) -> El | None:
    return els[0] if els else None


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"the edited domain XML does not say what was asked: {what}")


# -- cputune ------------------------------------------------------------------------------------------

def set_vcpupin(xml: str, vcpu: int, cpuset: str | None) -> str:
    """<vcpupin vcpu=`vcpu` cpuset=`cpuset`/> (None or "": no pin for that vCPU)."""
    doc = Doc(xml)

    def pins() -> list[El]:
        return [p for p in find_path(doc.root, "cputune/vcpupin") if _vcpu_of(p) == vcpu]

    while len(pins()) > 1:  # one pin per vCPU
        doc.remove(pins()[-1])
    if pins():
        pin = pins()[0]
        if cpuset:
            doc.set_attr(pin, "cpuset", cpuset)
        else:
            doc.remove(pin)
            doc.drop_if_empty("cputune")
    elif cpuset:
        _add_to_cputune(doc, ("vcpupin", (("vcpu", str(vcpu)), ("cpuset", cpuset)), ()), sub=vcpu)
    found = [p.attrs.get("cpuset") for p in find_path(doc.root, "cputune/vcpupin") if _vcpu_of(p) == vcpu]
    _check(found == ([cpuset] if cpuset else []), f"vCPU {vcpu} pinned to {cpuset or 'nothing'}")
    return doc.text


def set_emulatorpin(xml: str, cpuset: str | None) -> str:
    """<emulatorpin cpuset=`cpuset`/> (None or "": none)."""
    doc = Doc(xml)
    pins = find_path(doc.root, "cputune/emulatorpin")
    for extra in reversed(pins[1:]):
        doc.remove(extra)
    pin = _first(find_path(doc.root, "cputune/emulatorpin"))
    if pin is not None and cpuset:
        doc.set_attr(pin, "cpuset", cpuset)
    elif pin is not None:
        doc.remove(pin)
        doc.drop_if_empty("cputune")
    elif cpuset:
        _add_to_cputune(doc, ("emulatorpin", (("cpuset", cpuset),), ()))
    found = [p.attrs.get("cpuset") for p in find_path(doc.root, "cputune/emulatorpin")]
    _check(found == ([cpuset] if cpuset else []), f"emulator pinned to {cpuset or 'nothing'}")
    return doc.text


def _add_to_cputune(doc: Doc, spec: Spec, sub: int = 0) -> None:
    cputune = doc.ensure("cputune", spec)
    if cputune is not None:
        doc.insert_ordered(cputune, spec, CPUTUNE_ORDER, key=_vcpu_of, sub=sub)


def set_vcpu_pins(xml: str, pins: Mapping[int, Iterable[int]]) -> str:
    """Set <vcpupin> for the given vCPUs (an empty CPU set removes that vCPU's pin); other pins stay.
    Raises ValueError for a vCPU the domain does not have."""
    nvcpu = parse_domain(xml).vcpus
    for vcpu, cpus in sorted(pins.items()):
        if vcpu < 0 or (nvcpu is not None and vcpu >= nvcpu):
            raise ValueError(f"vCPU {vcpu} does not exist (the domain has {nvcpu} vCPUs)")
        want = tuple(sorted(set(cpus)))
        have = {p.vcpu: p.cpus for p in parse_domain(xml).pins}
        if have.get(vcpu, ()) != want:
            xml = set_vcpupin(xml, vcpu, format_cpulist(want))
    return xml


def set_emulator_pins(xml: str, cpus: Iterable[int]) -> str:
    """Set <emulatorpin cpuset>; an empty CPU set removes it."""
    want = tuple(sorted(set(cpus)))
    doc = Doc(xml)
    has = find_path(doc.root, "cputune/emulatorpin")
    if parse_domain(xml).emulator_pins == want and (want or not has):
        return xml
    return set_emulatorpin(xml, format_cpulist(want))


# -- numatune -----------------------------------------------------------------------------------------

def set_numa_memory(xml: str, mode: str | None, nodeset: str | None) -> str:
    """<numatune><memory mode nodeset/>: nodeset None or "" removes the memory policy; mode None
    leaves no mode attribute (libvirt's strict). A nodeset replaces placement='auto'."""
    doc = Doc(xml)
    mems = find_path(doc.root, "numatune/memory")
    for extra in reversed(mems[1:]):
        doc.remove(extra)
    mem = _first(find_path(doc.root, "numatune/memory"))
    if mem is None and nodeset:
        attrs = ((("mode", mode),) if mode else ()) + (("nodeset", nodeset),)
        spec: Spec = ("memory", attrs, ())
        numatune = doc.ensure("numatune", spec)
        if numatune is not None:
            doc.insert_ordered(numatune, spec, NUMATUNE_ORDER)
    elif mem is not None and not nodeset:
        doc.remove(mem)
        doc.drop_if_empty("numatune")
    elif mem is not None and nodeset:
        for name, value in (("mode", mode), ("nodeset", nodeset)):
            el = find_path(doc.root, "numatune/memory")[0]
            if value is None:
                doc.del_attr(el, name)
            else:
                doc.set_attr(el, name, value, before=("nodeset", "placement") if name == "mode" else ())
        doc.del_attr(find_path(doc.root, "numatune/memory")[0], "placement")
    found = [(m.attrs.get("mode"), m.attrs.get("nodeset")) for m in find_path(doc.root, "numatune/memory")]
    _check(found == ([(mode, nodeset)] if nodeset else []), f"memory {mode or 'strict'} on {nodeset}")
    return doc.text


def set_numatune(xml: str, mode: str | None, nodeset: Iterable[int]) -> str:
    """Set <numatune><memory mode nodeset/>; mode None or an empty nodeset removes the memory policy."""
    nodes = format_cpulist(nodeset)
    if mode is not None and mode not in NUMA_MODES:
        raise ValueError(f"unknown numatune mode {mode!r} (one of {', '.join(NUMA_MODES)})")
    have = parse_domain(xml)
    if mode is None or not nodes:
        return set_numa_memory(xml, None, None) if have.numa_mode is not None else xml
    mem = find_path(Doc(xml).root, "numatune/memory")
    if (have.numa_mode, have.numa_nodeset) == (mode, tuple(parse_libvirt_set(nodes))) and \
            "placement" not in mem[0].attrs:
        return xml
    return set_numa_memory(xml, mode, nodes)


# -- host devices -------------------------------------------------------------------------------------

def _pci_of(dev: El) -> str | None:
    addr = _first(find_path(dev, "source/address"))
    if addr is None or addr.attrs.get("bus") is None:
        return None
    try:
        return format_pci_address(*(int(addr.attrs.get(k, "0"), 0) for k in ("domain", "bus", "slot", "function")))
    except ValueError:
        return None


def _uuid_of(dev: El) -> str | None:
    addr = _first(find_path(dev, "source/address"))
    uuid = addr.attrs.get("uuid") if addr is not None else None
    return uuid.lower() if uuid else None


def _matcher(kind: str, key: str) -> Callable[[El], bool]:
    if kind == "pci":
        address = parse_pci_address(key)
        return lambda d: d.attrs.get("type") == "pci" and _pci_of(d) == address
    uuid = key.lower()
    return lambda d: d.attrs.get("type") == "mdev" and _uuid_of(d) == uuid


def _hostdevs(doc: Doc) -> list[El]:
    return find_path(doc.root, "devices/hostdev")


def _has(xml: str, kind: str, key: str) -> bool:
    want = parse_pci_address(key) if kind == "pci" else key.lower()
    return any(h.type == kind and (h.address if kind == "pci" else h.uuid) == want
               for h in parse_domain(xml).hostdevs)


class Taken(NamedTuple):
    """A <hostdev> taken out: the new XML, its index among the <hostdev> elements and among all of
    <devices>' children, and its exact text."""
    xml: str
    hostdev_index: int
    child: int
    text: str


def put_hostdev(xml: str, what: Spec | str, index: int | None = None, child: int | None = None) -> str:
    """Add a <hostdev> (a spec, or an element's exact text) as <devices>' `child`-th child, else before
    the `index`-th <hostdev>, else after the last one, else at the end of <devices>."""
    doc = Doc(xml)
    item: Spec | bytes = what.encode("utf-8") if isinstance(what, str) else what
    devices = doc.root.kid("devices")
    if devices is None:
        spec = item if not isinstance(item, bytes) else None
        if spec is None:  # an exact element into a new <devices>: open an empty one first
            doc.insert_ordered(doc.root, ("devices", (), ()), DOMAIN_ORDER)
            devices = doc.root.kid("devices")
            assert devices is not None
            doc.insert(devices, item)
        else:
            doc.ensure("devices", spec)
        return doc.text
    hostdevs = devices.kids("hostdev")
    if child is not None:
        kids = devices.children
        doc.insert(devices, item, before=kids[child] if 0 <= child < len(kids) else None)
    elif index is not None and 0 <= index < len(hostdevs):
        doc.insert(devices, item, before=hostdevs[index])
    else:
        doc.insert(devices, item, after=hostdevs[-1] if hostdevs else None)
    return doc.text


def take_hostdev(xml: str, kind: str, key: str) -> Taken | None:
    """Remove the first <hostdev> of `kind` ("pci": `key` a PCI address; "mdev": a UUID); what
    `put_hostdev(taken.xml, taken.text, child=taken.child)` needs to put it back. None when absent."""
    doc = Doc(xml)
    match = _matcher(kind, key)
    for i, dev in enumerate(_hostdevs(doc)):
        if match(dev):
            assert dev.parent is not None
            child = dev.parent.children.index(dev)
            text = doc.data[dev.start:dev.end].decode("utf-8")
            doc.remove(dev)
            return Taken(doc.text, i, child, text)
    return None


def hostdev_place(xml: str, address: str) -> tuple[int, bool] | None:
    """(index among the domain's <hostdev> elements, managed) of the PCI hostdev for `address`."""
    match = _matcher("pci", address)
    for i, dev in enumerate(_hostdevs(Doc(xml))):
        if match(dev):
            return i, dev.attrs.get("managed", "no") == "yes"
    return None


def _remove_all(xml: str, kind: str, key: str) -> str:
    while (taken := take_hostdev(xml, kind, key)) is not None:
        xml = taken[0]
    _check(not _has(xml, kind, key), f"no {kind} hostdev {key}")
    return xml


def pci_hostdev_spec(address: str, managed: bool = True) -> Spec:
    dom, bus, rest = parse_pci_address(address).split(":")
    slot, fn = rest.split(".")
    addr = (("domain", f"0x{dom}"), ("bus", f"0x{bus}"), ("slot", f"0x{slot}"), ("function", f"0x{fn}"))
    return ("hostdev", (("mode", "subsystem"), ("type", "pci"), ("managed", "yes" if managed else "no")),
            (("source", (), (("address", addr, ()),)),))


def mdev_hostdev_spec(uuid: str, model: str = "vfio-pci") -> Spec:
    # mdevs are created outside libvirt, so managed='no' (libvirt cannot detach/reattach them)
    return ("hostdev", (("mode", "subsystem"), ("type", "mdev"), ("managed", "no"), ("model", model)),
            (("source", (), (("address", (("uuid", uuid.lower()),), ()),)),))


def add_pci_hostdev(xml: str, address: str, managed: bool = True, index: int | None = None) -> str:
    """Add a PCI <hostdev> for the host device `address`; unchanged if the domain already has it."""
    if _has(xml, "pci", address):
        return xml
    out = put_hostdev(xml, pci_hostdev_spec(address, managed), index)
    _check(_has(out, "pci", address), f"a hostdev for {address}")
    return out


def remove_pci_hostdev(xml: str, address: str) -> str:
    """Remove the PCI <hostdev> for host device `address`; unchanged if the domain has none."""
    return _remove_all(xml, "pci", address)


def add_mdev_hostdev(xml: str, uuid: str, model: str = "vfio-pci", index: int | None = None) -> str:
    """Add an mdev <hostdev> (e.g. an NVIDIA vGPU) for mediated device `uuid`; unchanged if present."""
    if _has(xml, "mdev", uuid):
        return xml
    out = put_hostdev(xml, mdev_hostdev_spec(uuid, model), index)
    _check(_has(out, "mdev", uuid), f"a hostdev for mdev {uuid}")
    return out


def remove_mdev_hostdev(xml: str, uuid: str) -> str:
    """Remove the mdev <hostdev> for `uuid`; unchanged if the domain has none."""
    return _remove_all(xml, "mdev", uuid)
