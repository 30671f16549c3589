"""The libvirt side of a capture: every domain's live and inactive definition and its run state, the
capabilities, and a test-driver node file that serves the domains again (`test:///ABS/node.xml`).

The node file holds the host's CPU and memory (virNodeInfo) and each domain's live definition (what the
console reads: a running domain's pins and devices as they are now), with its run state in the test
driver's namespace. The live domain id is dropped: the test driver numbers running domains itself.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

TEST_NS = "http://libvirt.org/schemas/domain/test/1.0"
_ID_ATTR = re.compile(r"""\s+id=(?:'[^']*'|"[^"]*")""")
_XML_INACTIVE = 2  # libvirt.VIR_DOMAIN_XML_INACTIVE


@dataclass
class Domain:
    name: str
    uuid: str
    state: int  # virDomainState
    live_xml: str
    inactive_xml: str


@dataclass
class LibvirtDump:
    node_info: list[Any]  # virNodeInfo: model, memory MiB, CPUs, MHz, nodes, sockets, cores, threads
    capabilities: str
    domains: list[Domain] = field(default_factory=list)
    hostname: str = ""
    versions: dict[str, str] = field(default_factory=dict)


def dump_libvirt(uri: str) -> LibvirtDump:
    """Read everything from `uri` (read-only connection). libvirt errors propagate (the capture
    records the reason)."""
    import libvirt

    from nodeconsole.console.sources.libvirt_src import format_version

    libvirt.registerErrorHandler(lambda *_args: None, None)
    conn = libvirt.openReadOnly(uri)
    try:
        dump = LibvirtDump(node_info=list(conn.getInfo()), capabilities=conn.getCapabilities())
        try:  # the test driver answers this machine's name, which is not the host's
            dump.hostname = "" if uri.startswith("test:") else conn.getHostname()
        except libvirt.libvirtError:
            pass
        dump.versions["libvirt"] = format_version(conn.getLibVersion())
        try:
            kind, version = conn.getType(), conn.getVersion()
            dump.versions["hypervisor"] = f"{kind} {format_version(version)}"
            if kind.upper() == "QEMU":
                dump.versions["qemu"] = format_version(version)
        except libvirt.libvirtError:
            pass
        for dom in conn.listAllDomains():
            try:
                dump.domains.append(Domain(dom.name(), dom.UUIDString(), int(dom.state()[0]), dom.XMLDesc(0),
                                           dom.XMLDesc(_XML_INACTIVE)))
            except libvirt.libvirtError as e:
                if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise  # undefined while we read: simply not there any more
        dump.domains.sort(key=lambda d: (d.name, d.uuid))
        return dump
    finally:
        conn.close()


def _node_domain(xml: str, state: int) -> str:
    """A domain definition as the test driver's node file holds it: its namespace declared, the run
    state added, the live id dropped, indented one level."""
    xml = xml.strip()
    start = xml.find("<domain")
    end = xml.find(">", start)
    if start < 0 or end < 0 or not xml.endswith("</domain>"):
        raise ValueError("not a domain definition")
    head = _ID_ATTR.sub("", xml[start:end])
    if "xmlns:test=" not in head:
        head += f" xmlns:test='{TEST_NS}'"
    body = xml[end:-len("</domain>")]
    text = f"{head}{body}  <test:runstate>{state}</test:runstate>\n</domain>"
    return "".join(f"  {line}\n" if line else "\n" for line in text.split("\n"))


def node_file(dump: LibvirtDump) -> str:
    """The test-driver node file of the dump."""
    model, memory_mib, cpus, mhz, nodes, sockets, cores, threads = dump.node_info[:8]
    out = ["<node>\n  <cpu>\n",
           f"    <mhz>{int(mhz)}</mhz>\n    <model>{_escape(str(model))}</model>\n",
           f"    <active>{int(cpus)}</active>\n    <nodes>{int(nodes)}</nodes>\n",
           f"    <sockets>{int(sockets)}</sockets>\n    <cores>{int(cores)}</cores>\n",
           f"    <threads>{int(threads)}</threads>\n  </cpu>\n  <memory>{int(memory_mib) * 1024}</memory>\n"]
    out += [_node_domain(d.live_xml, d.state) for d in dump.domains]
    out.append("</node>\n")
    return "".join(out)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
