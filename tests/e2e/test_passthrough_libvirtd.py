"""The libvirt half of passthrough against a real libvirtd: a PCI hostdev added to (and removed from) a
shut-off guest's persistent config with attachDeviceFlags/detachDeviceFlags(AFFECT_CONFIG), through the
same DomainConfig and step kind the passthrough plan uses. This machine has no IOMMU, so only the config
part can run here; the driver binding is covered on the demo host."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from nodeconsole.actions.plan import build_step
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.vms.libvirt_domains import DomainConfigError, LibvirtDomainConfig

libvirt = pytest.importorskip("libvirt")

pytestmark = pytest.mark.real_libvirtd

NAME = "nc-passthrough"
_INACTIVE = 2  # VIR_DOMAIN_XML_INACTIVE


def _host_pci_address() -> str:
    """A PCI function that exists on this machine (libvirt may look it up when parsing a hostdev)."""
    devs = sorted(p.name for p in Path("/sys/bus/pci/devices").iterdir())
    if not devs:
        pytest.skip("this machine has no PCI devices to name in a hostdev")
    return devs[-1]


@pytest.fixture
def guest(real_libvirtd):
    conn = libvirt.open(real_libvirtd.uri)
    xml = (f"<domain type='qemu'><name>{NAME}</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>"
           "<os><type arch='x86_64' machine='pc'>hvm</type></os>"
           "<devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>")
    dom = conn.defineXML(xml)
    try:
        yield real_libvirtd.uri, dom
    finally:
        dom.undefine()
        conn.close()


def _hostdevs(dom) -> list:
    return [h for h in parse_domain(dom.XMLDesc(_INACTIVE)).hostdevs if h.type == "pci"]


def test_hostdev_config_attach_and_detach_on_a_shut_off_guest(guest):
    uri, dom = guest
    address = _host_pci_address()
    assert dom.info()[0] == libvirt.VIR_DOMAIN_SHUTOFF
    cfg = LibvirtDomainConfig(uri)

    def no_define(vm, xml):  # the real daemon must take the device call, not the defineXML fallback
        raise AssertionError("defineXML fallback used against a real libvirtd")

    cfg.define = no_define
    try:
        cfg.add_hostdev(NAME, address)
        got = _hostdevs(dom)
        assert [(h.address, h.managed) for h in got] == [(address, True)]
        assert cfg.hostdev_place(NAME, address) == (0, True)
        cfg.add_hostdev(NAME, address)  # idempotent: already there, no second call
        assert len(_hostdevs(dom)) == 1
        cfg.remove_hostdev(NAME, address)
        assert _hostdevs(dom) == []
        with pytest.raises(DomainConfigError, match="no VM named"):
            cfg.xml("nc-no-such-guest")
    finally:
        cfg.close()


def test_vm_hostdev_step_round_trip(guest):
    uri, dom = guest
    address = _host_pci_address()
    cfg = LibvirtDomainConfig(uri)
    try:
        host = SimpleNamespace(domains=cfg)
        step = build_step(host, {"kind": "vm_hostdev", "vm": NAME, "address": address, "present": True})
        step.apply()
        assert step.verify() is None and [h.address for h in _hostdevs(dom)] == [address]
        assert build_step(host, step.op) is None  # nothing left to do
        assert step.undo() is None and _hostdevs(dom) == []
    finally:
        cfg.close()
