"""A VM's shape against a real libvirtd with a real QEMU guest: a small guest without host devices is
given, through the runner, 2 MiB hugepages and a strict memory policy on node 0 (`vm_shape`) and vCPU and
emulator pins (`vm_pins`, its config) -- then STARTED: `virsh define` alone accepts nodes and pages that
do not exist, a start proves them. QEMU's memory then comes out of node 0's 2 MiB pool (the kernel's
free count drops by the guest's memory), and each vCPU thread runs where it was pinned. The undo gives
the definition back byte for byte as libvirt held it."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Plan, build_step
from nodeconsole.actions.progress import DONE
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.libvirt_xml import parse_domain, parse_libvirt_set
from nodeconsole.console.seams import real_host
from nodeconsole.console.vms.backend import VmShape
from tests.e2e.conftest import HUGEPAGES_2M
from tests.e2e.test_real_libvirtd import _allowed, _vcpu_thread

libvirt = pytest.importorskip("libvirt")

pytestmark = pytest.mark.real_libvirtd

_INACTIVE = 2  # VIR_DOMAIN_XML_INACTIVE


@pytest.fixture
def host(real_libvirtd, tmp_path) -> ActionHost:
    seams = real_host("/", real_libvirtd.uri)
    seams.state_dir = tmp_path  # audit log and lock of this test, not /var/log/nodeconsole
    h = ActionHost.from_seams(seams)
    yield h
    h.domains.close()


def _free_pages() -> int:
    return int((HUGEPAGES_2M / "free_hugepages").read_text())


def _started(conn, name: str, rv) -> tuple[object, int]:
    dom = conn.lookupByName(name)
    dom.create()
    pidfile = rv / "ns" / "state" / "run.up" / "libvirt" / "qemu" / f"{name}.pid"
    for _ in range(100):
        if dom.isActive() and pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.05)
    return dom, int(pidfile.read_text().strip())


def test_a_shaped_and_pinned_guest_starts_on_node_0s_hugepages_and_undo_restores_its_bytes(
        hugepages_2m, shut_off_guest, host, real_libvirtd):
    name, last = shut_off_guest.name, (os.cpu_count() or 1) - 1
    conn = libvirt.open(real_libvirtd.uri)
    try:
        before = conn.lookupByName(name).XMLDesc(_INACTIVE)
        shape = VmShape(vcpus=shut_off_guest.vcpus, memory_kib=shut_off_guest.memory_kib, hugepage_kib=2048,
                        numa=("strict", "0"))
        pins = {"kind": "vm_pins", "vm": name, "scope": "config", "vcpus": [[0, "0"], [1, str(last)]], "emulator": "0"}
        steps = [build_step(host, {"kind": "vm_shape", "vm": name, "shape": shape.to_dict()}), build_step(host, pins)]
        res = Runner(host).run(Plan(action="shape", title=f"shape {name}", request={}, steps=steps))
        assert res.status == DONE, res.message
        config = conn.lookupByName(name).XMLDesc(_INACTIVE)
        parsed = parse_domain(config)
        assert (parsed.hugepages_kib, parsed.numa_mode, parsed.numa_nodeset) == (2048, "strict", (0,))
        assert [(p.vcpu, p.cpus) for p in parsed.pins] == [(0, (0,)), (1, (last,))] and parsed.emulator_pins == (0,)

        free = _free_pages()
        dom, pid = _started(conn, name, real_libvirtd.rv)
        assert dom.isActive()
        # QEMU's memory is node 0's 2 MiB pages (preallocated by libvirt for a hugepage-backed guest)
        assert free - _free_pages() >= shape.memory_kib // 2048, (free, _free_pages())
        live = parse_domain(dom.XMLDesc(0))
        assert (live.hugepages_kib, live.numa_mode, live.numa_nodeset) == (2048, "strict", (0,))
        assert [_allowed(pid, _vcpu_thread(dom, pid, v)) for v in range(2)] == ["0", str(last)]
        dom.destroy()
        assert _free_pages() == free  # the pages went back with the guest

        undo = Runner(host).run(plan_undo(host))
        assert undo.status == DONE, undo.message
        assert conn.lookupByName(name).XMLDesc(_INACTIVE) == before
    finally:
        conn.close()


def test_a_definition_naming_a_node_the_host_lacks_is_defined_but_does_not_start(
        hugepages_2m, shut_off_guest, host, real_libvirtd):
    """Why the test above starts the guest: libvirt defines a policy on a node that does not exist."""
    online = Path("/sys/devices/system/node/online").read_text().strip()
    absent = max(parse_libvirt_set(online)) + 1
    name = shut_off_guest.name
    shape = VmShape(vcpus=shut_off_guest.vcpus, memory_kib=shut_off_guest.memory_kib, hugepage_kib=2048,
                    numa=("strict", str(absent)))
    step = build_step(host, {"kind": "vm_shape", "vm": name, "shape": shape.to_dict()})
    res = Runner(host).run(Plan(action="shape", title=f"shape {name}", request={}, steps=[step]))
    assert res.status == DONE, res.message  # defined
    conn = libvirt.open(real_libvirtd.uri)
    try:
        with pytest.raises(libvirt.libvirtError) as refused:
            conn.lookupByName(name).create()
        assert f"NUMA node {absent} is unavailable" in refused.value.get_error_message()
        assert not conn.lookupByName(name).isActive()
    finally:
        conn.close()
    assert Runner(host).run(plan_undo(host)).status == DONE
