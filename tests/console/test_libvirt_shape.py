"""libvirt's side of a VM's shape (console/vms/libvirt_shape.py): what an edit writes and keeps, on
definitions of the forms libvirt and admins write; every result is accepted by libvirt (the test
driver) and reads back through it as the shape asked for."""
from __future__ import annotations

import pytest

from nodeconsole.console.vms.backend import GuestCell, VmShape
from nodeconsole.console.vms.libvirt_shape import edit_shape, read_shape

libvirt = pytest.importorskip("libvirt")
libvirt.registerErrorHandler(lambda *_a: None, None)

BASE = """<domain type='test'>
  <name>shape-t</name>
  <uuid>5cf5a45d-d6b6-4d5d-8492-ded7991bdc47</uuid>
  <memory unit='GiB'>8</memory>
  <currentMemory unit='GiB'>4</currentMemory>
  <memoryBacking>
    <locked/>
  </memoryBacking>
  <vcpu placement='static' current='2'>8</vcpu>
  <cputune>
    <vcpupin vcpu='0' cpuset='1'/>
    <vcpupin vcpu='6' cpuset='2'/>
  </cputune>
  <os>
    <type arch='x86_64'>hvm</type>
  </os>
  <cpu mode='host-passthrough' check='none'/>
  <devices>
  </devices>
</domain>
"""
CELLS = VmShape(vcpus=4, memory_kib=4 << 20, hugepage_kib=2048, numa=("strict", "0-1"), threads_per_core=2,
                cells=(GuestCell(0, "0-1", 2 << 20, "0"), GuestCell(1, "2-3", 2 << 20, "1")))


def _through_libvirt(xml: str) -> str:
    conn = libvirt.open("test:///default")
    try:
        return conn.defineXML(xml).XMLDesc(2)
    finally:
        conn.close()


def test_reading_says_what_the_guest_gets():
    shape = read_shape(BASE)
    assert (shape.vcpus, shape.memory_kib) == (2, 4 << 20)  # <vcpu current>, <currentMemory>
    assert (shape.hugepage_kib, shape.numa, shape.cells, shape.threads_per_core) == (None, None, (), 1)


def test_an_edit_writes_the_shape_and_keeps_the_rest():
    xml = edit_shape(BASE, CELLS)
    assert read_shape(xml).key() == CELLS.key()
    assert "current=" not in xml and "<memory unit='KiB'>4194304</memory>" in xml
    assert "<locked/>" in xml and xml.index("<hugepages>") < xml.index("<locked/>")  # libvirt's order
    assert "<vcpupin vcpu='0' cpuset='1'/>" in xml and "vcpu='6'" not in xml  # vCPU 6 is gone
    assert "mode='host-passthrough' check='none'" in xml
    assert "<topology sockets='1' dies='1' cores='2' threads='2'/>" in xml
    assert edit_shape(xml, CELLS) == xml  # asked again: the same text
    assert read_shape(_through_libvirt(xml)).key() == CELLS.key()


def test_going_back_to_no_hugepages_no_policy_no_cells_removes_what_is_left_empty():
    xml = edit_shape(BASE, CELLS)
    plain = VmShape(vcpus=4, memory_kib=4 << 20, hugepage_kib=None, numa=None)
    out = edit_shape(xml, plain)
    assert read_shape(out).key() == plain.key()
    assert "<numatune" not in out and "<numa>" not in out and "<hugepages" not in out
    assert "<memoryBacking>\n    <locked/>\n  </memoryBacking>" in out  # its other child stays
    assert "mode='host-passthrough'" in out  # the guest <cpu> stays with its mode
    assert read_shape(_through_libvirt(out)).key() == plain.key()


def test_a_topology_that_no_longer_multiplies_out_is_rewritten():
    xml = BASE.replace("<cpu mode='host-passthrough' check='none'/>",
                       "<cpu mode='host-model'>\n    <topology sockets='2' dies='1' cores='4' threads='1'/>\n  </cpu>")
    same = edit_shape(xml, VmShape(vcpus=8, memory_kib=8 << 20, hugepage_kib=None, numa=None))
    assert "sockets='2' dies='1' cores='4' threads='1'" in same  # 8 vCPUs: it still fits, left alone
    six = edit_shape(xml, VmShape(vcpus=6, memory_kib=8 << 20, hugepage_kib=None, numa=None))
    assert "<topology sockets='1' dies='1' cores='6' threads='1'/>" in six
    assert read_shape(_through_libvirt(six)).vcpus == 6


def test_a_definition_without_cpu_gets_one_and_a_bad_shape_is_refused():
    xml = BASE.replace("  <cpu mode='host-passthrough' check='none'/>\n", "")
    out = edit_shape(xml, CELLS)
    assert "<cpu>\n    <topology" in out and read_shape(_through_libvirt(out)).key() == CELLS.key()
    with pytest.raises(ValueError, match="cover vCPUs 0-4 exactly"):
        edit_shape(xml, VmShape(vcpus=5, memory_kib=4 << 20, hugepage_kib=2048, numa=None, cells=CELLS.cells))
