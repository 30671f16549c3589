"""`prepare` against a real libvirtd with a real QEMU guest: a small guest without host devices prepared
with `--gpus 0 --hugepages 2M` (2 MiB pages reserved on node 0 for the test) gets the `<cputune>`,
`<numatune>` and `<memoryBacking>` prepare plans, and then STARTS with them -- `virsh define` alone
accepts nodes and pages that do not exist. Its vCPU runs where it was pinned, QEMU's memory comes from node
0's 2 MiB pool, and `undo` gives back the definition byte for byte."""
from __future__ import annotations

import pytest

from nodeconsole.actions.progress import DONE
from nodeconsole.actions.session import ActionSession, Prepare, Undo
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.seams import real_host
from tests.e2e.test_real_libvirtd import _allowed, _vcpu_thread
from tests.e2e.test_shape_libvirtd import _free_pages, _started

libvirt = pytest.importorskip("libvirt")

pytestmark = pytest.mark.real_libvirtd

_INACTIVE = 2  # VIR_DOMAIN_XML_INACTIVE


@pytest.fixture
def session(real_libvirtd, tmp_path) -> ActionSession:
    seams = real_host("/", real_libvirtd.uri)
    seams.state_dir = tmp_path  # audit log and lock of this test, not /var/log/nodeconsole
    s = ActionSession.from_seams(seams)
    yield s
    s.host.domains.close()


def test_a_prepared_guest_starts_with_its_pins_numatune_and_hugepages(hugepages_2m, shut_off_guest, session,
                                                                     real_libvirtd):
    name = shut_off_guest.name
    conn = libvirt.open(real_libvirtd.uri)
    try:
        before = conn.lookupByName(name).XMLDesc(_INACTIVE)
        plan = session.plan(Prepare(name, "0", vcpus=1, memory_kib=shut_off_guest.memory_kib, hugepages="2M"))
        assert plan.ok, "\n".join(plan.lines())
        kinds = [s.op["kind"] for s in plan.steps]
        assert kinds == ["vm_shape", "vm_pins"], kinds  # no GPU, and node 0's free pages suffice: no reservation
        (cpu,) = [int(c) for _, c in plan.steps[1].op["vcpus"]]
        result = session.apply(plan)
        assert result.status == DONE, result.message
        config = parse_domain(conn.lookupByName(name).XMLDesc(_INACTIVE))
        assert (config.vcpus, config.hugepages_kib, config.numa_mode, config.numa_nodeset) == (1, 2048, "strict", (0,))
        assert [(p.vcpu, p.cpus) for p in config.pins] == [(0, (cpu,))] and config.emulator_pins

        free = _free_pages()
        dom, pid = _started(conn, name, real_libvirtd.rv)
        assert dom.isActive()
        assert free - _free_pages() >= shut_off_guest.memory_kib // 2048  # QEMU's memory: node 0's 2 MiB pages
        live = parse_domain(dom.XMLDesc(0))
        assert (live.hugepages_kib, live.numa_mode, live.numa_nodeset) == (2048, "strict", (0,))
        assert _allowed(pid, _vcpu_thread(dom, pid, 0)) == str(cpu)
        dom.destroy()

        undo = session.apply(session.plan(Undo(result.record_id)))
        assert undo.status == DONE, undo.message
        assert conn.lookupByName(name).XMLDesc(_INACTIVE) == before
    finally:
        conn.close()
