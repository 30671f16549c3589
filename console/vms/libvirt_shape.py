"""libvirt's side of the VM backend's shape (console/vms/shape.py `VmShape`): read from and written to
domain XML through the one splicing editor (console/domain_xml.py, console/domain_edits.py).

What an edit writes, and nothing else of the definition changes:
- <vcpu> (its `current` attribute dropped: current = maximum), <memory> and <currentMemory> in KiB;
  <vcpupin>s of vCPUs beyond the new count are removed (libvirt refuses them);
- <memoryBacking><hugepages><page size unit='KiB'/></hugepages> (other <memoryBacking> children kept);
- <numatune><memory mode nodeset/> and one <memnode cellid mode='strict' nodeset/> per guest cell;
- <cpu><numa><cell id cpus memory unit='KiB'/></numa> (the <cpu> element's mode, model and features
  kept) and <cpu><topology sockets='1' dies='1' cores threads/> when threads per core > 1 or the
  existing topology no longer matches the vCPU count.
Reading is lenient (what the guest gets: a lower <vcpu current> or <currentMemory> is the count/size);
each edit is read back and must say what was asked (ValueError otherwise).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from nodeconsole.console.domain_edits import set_numa_memory, set_vcpupin
from nodeconsole.console.domain_xml import DOMAIN_ORDER, NUMATUNE_ORDER, Doc, El, Spec, find_path
from nodeconsole.console.libvirt_xml import _UNITS
from nodeconsole.console.vms.backend import VmConfigError
from nodeconsole.console.vms.shape import GuestCell, VmShape

CPU_ORDER = ("model", "vendor", "topology", "cache", "maxphysaddr", "feature", "numa")
MAX_TOKEN = 1 << 20  # a saved definition read back from an audit log: at most 1 MiB


def _kib(el: ET.Element | None, size: str | None = None) -> int | None:
    if el is None:
        return None
    text = (size if size is not None else el.text or "").strip()
    factor = _UNITS.get((el.get("unit") or "KiB").strip().lower())
    if not text.isdigit() or factor is None:
        raise ValueError(f"<{el.tag}> size {text!r} {el.get('unit')!r} is not a memory size")
    return int(text) * factor // 1024


def _count(text: str | None, what: str) -> int:
    text = (text or "").strip()
    if not text.isdigit():
        raise ValueError(f"{what} {text!r} is not a number")
    return int(text)


def read_shape(xml: str) -> VmShape:
    """The shape a domain XML says. ValueError when it is not well formed or a number is not one."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(f"domain XML is not well formed: {e}") from None
    vcpu = root.find("./vcpu")
    vcpus = _count(vcpu.text, "<vcpu>") if vcpu is not None else 1
    if vcpu is not None and vcpu.get("current") is not None:
        vcpus = _count(vcpu.get("current"), "<vcpu current>")
    memory = _kib(root.find("./memory")) or 0
    current = _kib(root.find("./currentMemory"))
    huge = root.find("./memoryBacking/hugepages")
    pages = huge.findall("./page") if huge is not None else []
    hugepage = None if huge is None else \
        _kib(pages[0], pages[0].get("size", "")) if len(pages) == 1 and pages[0].get("nodeset") is None else 0
    mem = root.find("./numatune/memory")
    numa = (mem.get("mode") or "strict", mem.get("nodeset") or "") if mem is not None else None
    memnodes = {m.get("cellid"): m.get("nodeset") or "" for m in root.findall("./numatune/memnode")
                if (m.get("mode") or "strict") == "strict"}
    cells = tuple(GuestCell(id=_count(c.get("id"), "<cell id>"), cpus=c.get("cpus") or "",
                            memory_kib=_kib(c, c.get("memory", "")) or 0, host_nodes=memnodes.get(c.get("id"), ""))
                  for c in root.findall("./cpu/numa/cell"))
    topo = root.find("./cpu/topology")
    threads = _count(topo.get("threads", "1"), "<topology threads>") if topo is not None else 1
    return VmShape(vcpus=vcpus, memory_kib=current if current is not None else memory, hugepage_kib=hugepage,
                   numa=numa, cells=cells, threads_per_core=threads)


def edit_shape(xml: str, shape: VmShape) -> str:
    """`xml` with exactly `shape` (see the module docstring); ValueError for a bad shape (nothing
    edited) or an edit that does not read back as asked."""
    shape.check()
    before = read_shape(xml)
    xml = _sizes(xml, shape)
    if before.hugepage_kib != shape.hugepage_kib:
        xml = _hugepages(xml, shape.hugepage_kib)
    if before.key()[3] != shape.key()[3]:
        xml = set_numa_memory(xml, *shape.numa) if shape.numa else set_numa_memory(xml, None, None)
    if before.key()[4] != shape.key()[4]:
        xml = _cells(xml, shape.cells)
    xml = _topology(xml, shape)
    after = read_shape(xml)
    if after.key() != shape.key():
        raise ValueError(f"the edited domain XML does not say what was asked: {after.describe()}, "
                         f"not {shape.describe()}")
    return xml


def _sizes(xml: str, shape: VmShape) -> str:
    doc = Doc(xml)
    vcpu = doc.root.kid("vcpu")
    if vcpu is None:
        _insert_text(doc, "vcpu", (("placement", "static"),), str(shape.vcpus))
    else:
        doc.set_text(vcpu, str(shape.vcpus))
        doc.del_attr(_kid(doc, "vcpu"), "current")
    for tag in ("memory", "currentMemory"):
        el = doc.root.kid(tag)
        if el is None:
            if tag == "memory":
                _insert_text(doc, tag, (("unit", "KiB"),), str(shape.memory_kib))
            continue  # no <currentMemory>: it is <memory>
        doc.set_text(el, str(shape.memory_kib))
        doc.set_attr(_kid(doc, tag), "unit", "KiB")
    xml = doc.text
    for pin in find_path(Doc(xml).root, "cputune/vcpupin"):
        vcpu_id = pin.attrs.get("vcpu", "")
        if vcpu_id.isdigit() and int(vcpu_id) >= shape.vcpus:
            xml = set_vcpupin(xml, int(vcpu_id), None)
    return xml


def _kid(doc: Doc, tag: str) -> El:
    el = doc.root.kid(tag)
    assert el is not None
    return el


def _insert_text(doc: Doc, tag: str, attrs: tuple[tuple[str, str], ...], text: str) -> None:
    """A new domain child with character content, where libvirt writes it."""
    q = doc.quote.decode()
    raw = (f"<{tag}" + "".join(f" {k}={q}{v}{q}" for k, v in attrs) + f">{text}</{tag}>").encode()
    rank = DOMAIN_ORDER.index(tag)
    known = [c for c in doc.root.children if c.tag in DOMAIN_ORDER]
    earlier = [c for c in known if DOMAIN_ORDER.index(c.tag) < rank]
    later = [c for c in known if DOMAIN_ORDER.index(c.tag) > rank]
    doc.insert(doc.root, raw, after=earlier[-1] if earlier else None, before=later[0] if later and not earlier else None)


def _hugepages(xml: str, page_kib: int | None) -> str:
    doc = Doc(xml)
    backing = doc.root.kid("memoryBacking")
    huge = backing.kid("hugepages") if backing is not None else None
    if huge is not None:
        doc.remove(huge)
    if page_kib is None:
        doc.drop_if_empty("memoryBacking")
        return doc.text
    spec: Spec = ("hugepages", (), (("page", (("size", str(page_kib)), ("unit", "KiB")), ()),))
    backing = doc.root.kid("memoryBacking")
    if doc.ensure("memoryBacking", spec) is not None:
        assert backing is not None
        doc.insert(backing, spec, before=backing.children[0] if backing.children else None)
    return doc.text


def _cells(xml: str, cells: tuple[GuestCell, ...]) -> str:
    """Exactly these guest cells and their <memnode>s (the old ones, with their distances, go)."""
    doc = Doc(xml)
    while memnodes := find_path(doc.root, "numatune/memnode"):
        doc.remove(memnodes[0])
    doc.drop_if_empty("numatune")
    if numa := find_path(doc.root, "cpu/numa"):
        doc.remove(numa[0])
        doc.drop_if_empty("cpu")
    if not cells:
        return doc.text
    spec: Spec = ("numa", (), tuple(("cell", (("id", str(c.id)), ("cpus", c.cpus), ("memory", str(c.memory_kib)),
                                              ("unit", "KiB")), ()) for c in sorted(cells, key=lambda c: c.id)))
    _into_cpu(doc, spec)
    for c in sorted(cells, key=lambda c: c.id):
        if not c.host_nodes:
            continue
        node: Spec = ("memnode", (("cellid", str(c.id)), ("mode", "strict"), ("nodeset", c.host_nodes)), ())
        numatune = doc.ensure("numatune", node)
        if numatune is not None:
            doc.insert_ordered(numatune, node, NUMATUNE_ORDER, key=_cellid, sub=c.id)
    return doc.text


def _cellid(el: El) -> int:
    text = el.attrs.get("cellid", "")
    return int(text) if text.isdigit() else -1


def _into_cpu(doc: Doc, spec: Spec) -> None:
    cpu = doc.ensure("cpu", spec)
    if cpu is not None:
        doc.insert_ordered(cpu, spec, CPU_ORDER)


def _topology(xml: str, shape: VmShape) -> str:
    """<topology> for threads per core > 1, or rewritten when the existing one no longer multiplies out
    to the vCPU count; left alone otherwise."""
    doc = Doc(xml)
    threads = shape.threads_per_core
    topo = next(iter(find_path(doc.root, "cpu/topology")), None)
    cores = str(shape.vcpus // threads)
    if topo is None:
        if threads > 1:
            _into_cpu(doc, ("topology", (("sockets", "1"), ("dies", "1"), ("cores", cores), ("threads", str(threads))),
                            ()))
        return doc.text
    product = 1
    for name in ("sockets", "dies", "clusters", "cores", "threads"):
        value = topo.attrs.get(name, "1")
        product *= int(value) if value.isdigit() else 0
    if product == shape.vcpus and topo.attrs.get("threads", "1") == str(threads):
        return xml
    for name, value in (("sockets", "1"), ("dies", "1"), ("clusters", "1"), ("cores", cores),
                        ("threads", str(threads))):
        el = find_path(doc.root, "cpu/topology")[0]
        if name in el.attrs or name in ("sockets", "cores", "threads"):
            doc.set_attr(el, name, value)
    return doc.text


def check_saved_definition(token: object, vm: str, current: str) -> str:
    """`token` checked to be a saved definition of `vm`: a domain XML of that name and of the UUID of
    its `current` definition (an audit log is a file anyone with access could have edited)."""
    if not isinstance(token, str) or not token.strip() or len(token) > MAX_TOKEN:
        raise VmConfigError(f"the saved definition must be a domain XML of at most {MAX_TOKEN >> 20} MiB")
    try:
        saved, now = ET.fromstring(token), ET.fromstring(current)
    except ET.ParseError as e:
        raise VmConfigError(f"the saved definition is not well-formed XML: {e}") from None
    if saved.tag != "domain":
        raise VmConfigError(f"the saved definition is a <{saved.tag}>, not a <domain>")
    name = (saved.findtext("./name") or "").strip()
    if name != vm:
        raise VmConfigError(f"the saved definition is of VM {name!r}, not {vm!r}")
    uuid, want = ((d.findtext("./uuid") or "").strip().lower() for d in (saved, now))
    if uuid != want:
        raise VmConfigError(f"the saved definition has UUID {uuid or 'none'!r}; VM {vm} has {want or 'none'!r}")
    return token
