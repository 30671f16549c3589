"""Domain config changes for passthrough: the demo's node-file editor and a libvirt connection (the
in-process test driver), checked by reading the result back through libvirt itself."""
from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

libvirt = pytest.importorskip("libvirt")

from nodeconsole.actions.plan import build_step  # noqa: E402
from nodeconsole.console.demo.generator import generate, small_spec  # noqa: E402
from nodeconsole.console.demo.node_domains import NodeFileDomainConfig  # noqa: E402
from nodeconsole.console.libvirt_xml import parse_domain  # noqa: E402
from nodeconsole.console.root import Root  # noqa: E402
from nodeconsole.console.seams import Seams, simulated_host  # noqa: E402
from nodeconsole.console.vms.libvirt_domains import (  # noqa: E402
    DomainConfigError,
    LibvirtDomainConfig,
    hostdev_xml,
    node_file_of,
)

libvirt.registerErrorHandler(lambda *_a: None, None)
GPU, AUDIO = "0000:18:00.0", "0000:18:00.1"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return generate(small_spec(gpus=2), tmp_path_factory.mktemp("small")).libvirt_xml


@pytest.fixture
def node(generated, tmp_path) -> Path:
    path = tmp_path / "libvirt.xml"
    shutil.copy(generated, path)
    return path


def _libvirt_hostdevs(node: Path, vm: str) -> set[str]:
    """What libvirt itself reads from the node file (a fresh open re-reads it)."""
    conn = libvirt.open(f"test://{node}")
    try:
        xml = conn.lookupByName(vm).XMLDesc(0)
    finally:
        conn.close()
    return {h.address for h in parse_domain(xml).hostdevs if h.type == "pci"}


def test_node_file_add_then_remove_is_byte_exact(node):
    original = node.read_text()
    cfg = NodeFileDomainConfig(node)
    assert cfg.names() == ["vm-gpu", "vm-idle", "vm-off"]
    assert cfg.pci_hostdevs("vm-gpu") == {"0000:19:00.0", "0000:19:00.1"}
    cfg.add_hostdev("vm-off", GPU)
    cfg.add_hostdev("vm-off", AUDIO)
    cfg.add_hostdev("vm-off", AUDIO)  # already there: no change
    assert _libvirt_hostdevs(node, "vm-off") == {GPU, AUDIO}
    assert _libvirt_hostdevs(node, "vm-gpu") == {"0000:19:00.0", "0000:19:00.1"}
    added = node.read_text()
    assert "managed='yes'" in added and added.count("<hostdev") == original.count("<hostdev") + 2
    cfg.remove_hostdev("vm-off", AUDIO)
    cfg.remove_hostdev("vm-off", GPU)
    cfg.remove_hostdev("vm-off", GPU)  # already gone: no change
    assert node.read_text() == original
    assert _libvirt_hostdevs(node, "vm-off") == set()


def test_node_file_remove_then_readd_at_its_place(node):
    original = node.read_text()
    cfg = NodeFileDomainConfig(node)
    assert cfg.hostdev_place("vm-gpu", "0000:19:00.0") == (0, True)
    cfg.remove_hostdev("vm-gpu", "0000:19:00.0")
    assert _libvirt_hostdevs(node, "vm-gpu") == {"0000:19:00.1"}
    cfg.add_hostdev("vm-gpu", "0000:19:00.0", managed=True, index=0)
    assert node.read_text() == original


def test_node_file_unknown_vm_and_external_domain_file(node, tmp_path):
    cfg = NodeFileDomainConfig(node)
    with pytest.raises(DomainConfigError, match="no VM named 'nope'"):
        cfg.xml("nope")
    # a node file may keep a domain in its own file: the edit goes there
    dom = tmp_path / "ext.xml"
    dom.write_text("<domain type='test'>\n  <name>ext</name>\n  <memory>1048576</memory>\n  <vcpu>1</vcpu>\n"
                   "  <os><type>hvm</type></os>\n  <devices>\n  </devices>\n</domain>\n")
    text = node.read_text()
    node.write_text(text.replace("</node>", "  <domain file='ext.xml'/>\n</node>"))
    cfg.add_hostdev("ext", GPU)
    assert "0x18" in dom.read_text() and "ext.xml" in node.read_text()
    assert _libvirt_hostdevs(node, "ext") == {GPU}


def test_libvirt_connection_falls_back_to_define_on_the_test_driver(node):
    original = node.read_text()
    cfg = LibvirtDomainConfig(f"test://{node}")
    try:
        assert "vm-off" in cfg.names()
        cfg.add_hostdev("vm-off", GPU)  # the test driver has no attachDeviceFlags: defineXML instead
        assert cfg.pci_hostdevs("vm-off") == {GPU}
        assert "managed='yes'" in cfg.xml("vm-off").replace('"', "'")
        cfg.remove_hostdev("vm-off", GPU)
        assert cfg.pci_hostdevs("vm-off") == set()
        with pytest.raises(DomainConfigError, match="no VM named"):
            cfg.xml("nope")
    finally:
        cfg.close()
    assert node.read_text() == original  # the connection changed only its in-memory copy


def test_hostdev_xml_and_uri_mapping(node):
    x = hostdev_xml("0000:9a:00.1")
    assert x == ("<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' "
                 "bus='0x9a' slot='0x00' function='0x1'/></source></hostdev>")
    assert node_file_of(f"test://{node}") == node
    assert node_file_of("test:///default") is None and node_file_of("qemu:///system") is None
    demo = simulated_host(root=Root(node.parent), libvirt_uri=f"test://{node}", state_dir=node.parent)
    assert isinstance(demo.open_vm_backend(), NodeFileDomainConfig)
    other = Seams(root=Root("/"), libvirt_uri=f"test://{node}")
    assert isinstance(other.open_vm_backend(), LibvirtDomainConfig)
    assert Seams(root=Root("/"), libvirt_uri=None).open_vm_backend() is None


def test_vm_hostdev_step_apply_verify_undo(node):
    cfg = NodeFileDomainConfig(node)
    original = node.read_text()
    host = SimpleNamespace(domains=cfg)
    step = build_step(host, {"kind": "vm_hostdev", "vm": "vm-off", "address": GPU, "present": True})
    assert step is not None and step.commands == (
        "virsh attach-device vm-off /dev/stdin --config <<'EOF'  # the <hostdev> below, then EOF",)
    assert step.detail == hostdev_xml(GPU)
    assert step.verify() and "still lacks" in step.verify()
    step.apply()
    assert step.verify() is None
    assert build_step(host, step.op) is None  # done: nothing left to do
    assert step.undo() is None and node.read_text() == original
    with pytest.raises(Exception, match="no VM named"):
        build_step(host, {"kind": "vm_hostdev", "vm": "ghost", "address": GPU, "present": True})
