"""Undoing the removal of a <hostdev> from a VM's config puts back exactly what was there: the guest
<address>, <rom> and boot order the admin had set, at the same place; the whole definition comes back
byte for byte. A recorded element that is not the device's hostdev is refused."""
from __future__ import annotations

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.passthrough import plan_release
from nodeconsole.actions.plan import StepError, build_step
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.seams import demo_host

PLAIN = ("<address domain='0x0000' bus='0x9a' slot='0x00' function='0x0'/>\n        </source>\n"
         "        <address type='pci' domain='0x0000' bus='0x07' slot='0x00' function='0x0'/>\n      </hostdev>")
RICH = ("<address domain='0x0000' bus='0x9a' slot='0x00' function='0x0'/>\n        </source>\n"
        "        <!-- set by hand -->\n        <rom bar='off'/>\n        <boot order='2'/>\n"
        "        <address type='pci' domain='0x0000' bus='0x07' slot='0x00' function='0x0'/>\n      </hostdev>")


def _host(tmp_path) -> ActionHost:
    seams = demo_host(tmp_path / "demo")
    node = tmp_path / "demo" / "libvirt.xml"
    text = node.read_text()
    start = text.index("<name>train-c</name>")
    at = text.index(PLAIN, start)
    node.write_text(text[:at] + RICH + text[at + len(PLAIN):])  # what an admin's `virsh edit` leaves
    return ActionHost.from_seams(seams)


def test_release_then_undo_restores_the_definition_byte_for_byte(tmp_path):
    host = _host(tmp_path)
    assert host.domains is not None
    before = host.domains.xml("train-c")
    assert "<rom bar='off'/>" in before
    res = Runner(host).run(plan_release(host, host.snapshot(), "4"))
    assert res.ok, res.message
    assert "0x9a" not in host.domains.xml("train-c")
    assert Runner(host).run(plan_undo(host)).ok
    assert host.domains.xml("train-c") == before


@pytest.mark.parametrize("element", [
    "<hostdev mode='subsystem' type='pci'><source><address domain='0x0000' bus='0x3a' slot='0x00' "
    "function='0x0'/></source></hostdev>",  # another device
    "<disk type='file'/>",
    "<hostdev mode='subsystem' type='pci'><source>",  # not well-formed
    "x" * 70000,
])
def test_a_recorded_element_that_is_not_this_hostdev_is_refused(tmp_path, element):
    host = _host(tmp_path)
    assert host.domains is not None
    host.domains.remove_hostdev("train-c", "0000:9a:00.0")
    before = host.domains.xml("train-c")
    op = {"kind": "vm_hostdev", "vm": "train-c", "address": "0000:9a:00.0", "present": True,
          "managed": True, "element": element, "child": 3}
    with pytest.raises(StepError, match="malformed vm_hostdev"):
        build_step(host, op)
    assert host.domains.xml("train-c") == before
