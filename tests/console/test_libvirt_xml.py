"""Domain XML reading and the pure edit functions: each edit changes exactly its part, keeps the rest of
the document, is idempotent, and produces XML that libvirt itself accepts."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeconsole.console.domain_edits import (
    add_mdev_hostdev,
    add_pci_hostdev,
    remove_mdev_hostdev,
    remove_pci_hostdev,
    set_emulator_pins,
    set_numatune,
    set_vcpu_pins,
)
from nodeconsole.console.libvirt_xml import DomainXml, parse_domain, parse_libvirt_set
from nodeconsole.console.model import Hostdev, VcpuPin

KVM = """<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>train-01</name>
  <uuid>5a7e0f3c-7d1e-4a8e-9a53-0c1d2e3f4a5b</uuid>
  <!-- sized for one GPU -->
  <memory unit='GiB'>64</memory>
  <vcpu placement='static'>8</vcpu>
  <cputune>
    <shares>2048</shares>
    <vcpupin vcpu='0' cpuset='2'/>
    <vcpupin vcpu='1' cpuset='3'/>
    <emulatorpin cpuset='0-1'/>
  </cputune>
  <numatune>
    <memory mode='preferred' nodeset='0-3,^2'/>
    <memnode cellid='0' mode='strict' nodeset='0'/>
  </numatune>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <cpu mode='host-passthrough'><topology sockets='1' dies='1' cores='4' threads='2'/></cpu>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'><source file='/var/lib/libvirt/images/t.qcow2'/><target dev='vda'/></disk>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x17' slot='0x00' function='0x0'/></source>
      <address type='pci' domain='0x0000' bus='0x06' slot='0x00' function='0x0'/>
    </hostdev>
    <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' display='off'>
      <source><address uuid='C0FFEE00-0000-4000-8000-000000000001'/></source>
    </hostdev>
    <hostdev mode='capabilities' type='storage'><source><block>/dev/sdf1</block></source></hostdev>
  </devices>
  <qemu:commandline><qemu:arg value='-no-hpet'/></qemu:commandline>
</domain>
"""

BARE = """<domain type='test'>
  <name>bare</name>
  <memory unit='MiB'>512</memory>
  <vcpu>4</vcpu>
  <os><type>hvm</type></os>
</domain>
"""

EDITED = ("cputune", "numatune", "devices")


def _rest(xml: str, drop: tuple[str, ...] = EDITED) -> str:
    """The document without the parts an edit may touch, canonical (attribute order, quotes, whitespace)."""
    root = ET.fromstring(xml)
    for tag in drop:
        for el in root.findall(tag):
            root.remove(el)
    return ET.canonicalize(ET.tostring(root, encoding="unicode"), strip_text=True)


def _devices_except_hostdevs(xml: str) -> str:
    devices = ET.fromstring(xml).find("devices")
    return "".join(ET.canonicalize(ET.tostring(d, encoding="unicode"), strip_text=True)
                   for d in devices if not (d.tag == "hostdev" and d.get("mode") == "subsystem"))


def test_parse_domain():
    assert parse_domain(KVM) == DomainXml(
        pins=(VcpuPin(0, (2,)), VcpuPin(1, (3,))),
        emulator_pins=(0, 1),
        numa_mode="preferred",
        numa_nodeset=(0, 1, 3),
        # the guest-side <address> of the PCI hostdev is where the guest sees it, not the host device;
        # capabilities hostdevs skipped
        hostdevs=(Hostdev(type="pci", address="0000:17:00.0", managed=True, guest_address="0000:06:00.0"),
                  Hostdev(type="mdev", uuid="c0ffee00-0000-4000-8000-000000000001", managed=False)),
        threads_per_core=2,
        vcpus=8,
    )
    assert parse_domain(BARE) == DomainXml(vcpus=4)


def test_parse_libvirt_set():
    assert parse_libvirt_set("0-7,^3,^5-6") == (0, 1, 2, 4, 7)
    assert parse_libvirt_set("") == ()
    assert parse_libvirt_set("^1") == ()
    with pytest.raises(ValueError):
        parse_libvirt_set("0-x")


def test_set_vcpu_pins_changes_only_the_pins():
    out = set_vcpu_pins(KVM, {1: [6, 7], 5: {8}, 0: []})
    got = parse_domain(out)
    assert got.pins == (VcpuPin(1, (6, 7)), VcpuPin(5, (8,)))
    assert got.emulator_pins == (0, 1) and got.numa_nodeset == (0, 1, 3)
    assert got.hostdevs == parse_domain(KVM).hostdevs
    assert _rest(out) == _rest(KVM)
    assert ET.fromstring(out).find("cputune/shares").text == "2048"
    assert "<!-- sized for one GPU -->" in out
    assert "<qemu:commandline>" in out and "ns0" not in out  # the document's own namespace prefix
    assert set_vcpu_pins(out, {1: [7, 6]}) == out  # already so: same document


def test_set_vcpu_pins_creates_and_removes_cputune():
    out = set_vcpu_pins(BARE, {3: [1], 0: [0, 2, 3]})
    assert parse_domain(out).pins == (VcpuPin(0, (0, 2, 3)), VcpuPin(3, (1,)))
    # written in vCPU order, indented and quoted like the document
    assert "\n  <cputune>\n    <vcpupin vcpu='0' cpuset='0,2-3'/>\n    <vcpupin vcpu='3'" in out
    back = set_vcpu_pins(out, {0: [], 3: []})
    assert ET.fromstring(back).find("cputune") is None
    assert back == BARE  # the splice and its inverse: the same bytes


def test_set_vcpu_pins_rejects_missing_vcpus():
    with pytest.raises(ValueError, match="vCPU 8 does not exist"):
        set_vcpu_pins(KVM, {8: [0]})
    with pytest.raises(ValueError, match="vCPU -1"):
        set_vcpu_pins(KVM, {-1: [0]})


def test_set_emulator_pins():
    out = set_emulator_pins(KVM, [4, 5, 6])
    assert parse_domain(out).emulator_pins == (4, 5, 6)
    assert parse_domain(out).pins == parse_domain(KVM).pins
    assert _rest(out) == _rest(KVM)
    gone = set_emulator_pins(out, [])
    assert parse_domain(gone).emulator_pins == () and ET.fromstring(gone).find("cputune/shares") is not None
    created = set_emulator_pins(BARE, {2})
    assert parse_domain(created).emulator_pins == (2,)
    assert ET.fromstring(set_emulator_pins(created, ())).find("cputune") is None


def test_set_numatune():
    out = set_numatune(KVM, "strict", [1])
    got = parse_domain(out)
    assert (got.numa_mode, got.numa_nodeset) == ("strict", (1,))
    assert ET.fromstring(out).find("numatune/memnode") is not None  # per-cell settings kept
    assert _rest(out) == _rest(KVM)
    cleared = set_numatune(out, None, [])
    assert parse_domain(cleared).numa_mode is None
    assert ET.fromstring(cleared).find("numatune/memnode") is not None
    fresh = set_numatune(BARE, "interleave", [0, 1])
    assert (parse_domain(fresh).numa_mode, parse_domain(fresh).numa_nodeset) == ("interleave", (0, 1))
    assert ET.fromstring(set_numatune(fresh, "strict", [])).find("numatune") is None
    auto = BARE.replace("<os>", "<numatune><memory mode='strict' placement='auto'/></numatune><os>")
    assert ET.fromstring(set_numatune(auto, "strict", [1])).find("numatune/memory").attrib == \
        {"mode": "strict", "nodeset": "1"}
    with pytest.raises(ValueError, match="unknown numatune mode 'fast'"):
        set_numatune(KVM, "fast", [0])


def test_pci_hostdev_add_and_remove():
    out = add_pci_hostdev(KVM, "b3:00.1", managed=False)
    got = parse_domain(out).hostdevs
    assert Hostdev(type="pci", address="0000:b3:00.1", managed=False) in got
    assert len(got) == 3
    assert _rest(out) == _rest(KVM) and _devices_except_hostdevs(out) == _devices_except_hostdevs(KVM)
    assert add_pci_hostdev(out, "0000:B3:00.1") == out  # already there
    removed = remove_pci_hostdev(out, "0000:17:00.0")
    assert [h.address for h in parse_domain(removed).hostdevs if h.type == "pci"] == ["0000:b3:00.1"]
    assert _devices_except_hostdevs(removed) == _devices_except_hostdevs(KVM)
    assert remove_pci_hostdev(removed, "0000:17:00.0") == removed  # nothing to remove
    assert remove_pci_hostdev(BARE, "0000:17:00.0") == BARE
    created = add_pci_hostdev(BARE, "0001:02:1f.7")
    assert parse_domain(created).hostdevs == (Hostdev(type="pci", address="0001:02:1f.7", managed=True),)
    with pytest.raises(ValueError, match="not a PCI address"):
        add_pci_hostdev(KVM, "17:00")


def test_mdev_hostdev_add_and_remove():
    uuid = "DEADBEEF-0000-4000-8000-00000000000A"
    out = add_mdev_hostdev(KVM, uuid)
    mdevs = [h for h in parse_domain(out).hostdevs if h.type == "mdev"]
    assert [h.uuid for h in mdevs] == ["c0ffee00-0000-4000-8000-000000000001", uuid.lower()]
    assert all(not h.managed for h in mdevs)
    assert add_mdev_hostdev(out, uuid.lower()) == out
    removed = remove_mdev_hostdev(out, "c0ffee00-0000-4000-8000-000000000001")
    assert [h.uuid for h in parse_domain(removed).hostdevs if h.type == "mdev"] == [uuid.lower()]
    assert _rest(removed) == _rest(KVM) and _devices_except_hostdevs(removed) == _devices_except_hostdevs(KVM)
    assert remove_mdev_hostdev(removed, "c0ffee00-0000-4000-8000-000000000001") == removed


@pytest.mark.parametrize("bad, reason", [("<domain><name>x</name>", "not well formed"),
                                         ("<node/>", "not a domain XML")])
def test_bad_documents(bad, reason):
    with pytest.raises(ValueError, match=reason):
        parse_domain(bad)
    with pytest.raises(ValueError, match=reason):
        set_emulator_pins(bad, [0])


def test_libvirt_accepts_the_edits():
    libvirt = pytest.importorskip("libvirt")
    base = BARE.replace("<vcpu>4</vcpu>", "<vcpu>4</vcpu>\n  <cpu><topology sockets='1' dies='1' cores='2' "
                        "threads='2'/></cpu>")
    xml = set_vcpu_pins(base, {0: [1], 2: [2, 3]})
    xml = set_emulator_pins(xml, [0])
    xml = set_numatune(xml, "strict", [0])
    xml = add_pci_hostdev(xml, "0000:17:00.0")
    xml = add_mdev_hostdev(xml, "c0ffee00-0000-4000-8000-000000000002")
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXML(xml)
        back = parse_domain(dom.XMLDesc(0))
    finally:
        conn.close()
    assert back == parse_domain(xml)
    assert back.pins == (VcpuPin(0, (1,)), VcpuPin(2, (2, 3))) and back.threads_per_core == 2
    assert len(back.hostdevs) == 2


pin_maps = st.dictionaries(st.integers(0, 7), st.frozensets(st.integers(0, 63), max_size=6), max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(pin_maps, min_size=1, max_size=4))
def test_successive_pin_edits_match_a_model(edits):
    xml = KVM
    model = {p.vcpu: p.cpus for p in parse_domain(KVM).pins}
    for edit in edits:
        xml = set_vcpu_pins(xml, edit)
        for vcpu, cpus in edit.items():
            if cpus:
                model[vcpu] = tuple(sorted(cpus))
            else:
                model.pop(vcpu, None)
        assert parse_domain(xml).pins == tuple(VcpuPin(v, c) for v, c in sorted(model.items()))
    assert _rest(xml) == _rest(KVM)
