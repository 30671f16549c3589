"""NUMA pinning against a real libvirtd with a real QEMU guest: the pin action itself (plan_pin → Runner)
pins the running guest live and in its config, and the kernel's affinity of every vCPU thread
(/proc/<qemu pid>/task/<tid>/status) shows it; undo gives the threads all CPUs back and the config its
previous (absent) pins; a connection dropped by the daemon in the middle of the apply is survived: the
completed live step is undone through a new connection.

The test runs its own guest (a copy of rv1's config), so rv1 and rv2 stay as the other e2e tests expect."""
from __future__ import annotations

import os
import re
import time

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.pinning import plan_pin
from nodeconsole.actions.progress import DONE, FAILED_RESULT
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.seams import real_host
from tests.e2e.test_real_libvirtd import _admin, _allowed, _vcpu_thread

libvirt = pytest.importorskip("libvirt")

pytestmark = pytest.mark.real_libvirtd

NAME = "nc-pin"
_INACTIVE = 2  # VIR_DOMAIN_XML_INACTIVE


@pytest.fixture
def guest(real_libvirtd):
    """A running 2-vCPU guest of our own (its domain handle, QEMU's pid), removed afterwards through a
    new connection (a test may have had the daemon drop this one)."""
    conn = libvirt.open(real_libvirtd.uri)
    xml = conn.lookupByName("rv1").XMLDesc(_INACTIVE)
    xml = re.sub(r"<uuid>[^<]*</uuid>", "", xml.replace("<name>rv1</name>", f"<name>{NAME}</name>"))
    dom = conn.defineXML(xml)
    dom.create()
    pidfile = real_libvirtd.rv / "ns" / "state" / "run.up" / "libvirt" / "qemu" / f"{NAME}.pid"
    try:
        for _ in range(100):
            if dom.isActive() and pidfile.exists() and pidfile.read_text().strip():
                break
            time.sleep(0.05)
        yield dom, real_libvirtd.qemu_pid(NAME)
    finally:
        clean = libvirt.open(real_libvirtd.uri)
        mine = clean.lookupByName(NAME)
        if mine.isActive():
            mine.destroy()
        mine.undefine()
        clean.close()
        try:
            conn.close()
        except libvirt.libvirtError:
            pass


@pytest.fixture
def host(real_libvirtd, tmp_path) -> ActionHost:
    seams = real_host("/", real_libvirtd.uri)
    seams.state_dir = tmp_path  # audit log and lock of this test, not /var/log/nodeconsole
    h = ActionHost.from_seams(seams)
    yield h
    h.domains.close()


def _threads(dom, pid: int) -> list[int]:
    return [_vcpu_thread(dom, pid, v) for v in range(2)]


def _all(n: int) -> str:
    return f"0-{n - 1}" if n > 1 else "0"


def test_live_pin_by_the_action_moves_the_vcpu_threads_and_undo_frees_them(guest, host):
    dom, pid = guest
    n = os.cpu_count() or 1
    if n < 2:
        pytest.skip("needs two host CPUs: one for the vCPUs, one for the host reserve")
    tids = _threads(dom, pid)
    assert [_allowed(pid, t) for t in tids] == [_all(n)] * 2  # a fresh guest floats on every CPU
    # two rounds in opposite directions, so a match cannot be a previous affinity by chance
    for cpu, reserve in ((n - 1, 0), (0, n - 1)):
        plan = plan_pin(host, host.snapshot(), NAME, cpus=str(cpu), reserve=str(reserve))
        assert plan.ok, plan.refusal
        assert [s.op["scope"] for s in plan.steps] == ["live", "config"]
        assert "numa" not in plan.steps[0].op  # libvirt cannot give a running VM a new policy mode
        res = Runner(host).run(plan)
        assert res.status == DONE, res.message
        assert [_allowed(pid, t) for t in tids] == [str(cpu)] * 2  # the kernel says so
        assert _allowed(pid, pid) == str(reserve)  # QEMU's main thread: the emulator pin
        vm = host.snapshot().vm(NAME)
        assert [p.cpus for p in vm.pins] == [(cpu,), (cpu,)] and vm.emulator_pins == (reserve,)
        config = parse_domain(dom.XMLDesc(_INACTIVE))
        assert [p.cpus for p in config.pins] == [(cpu,), (cpu,)]
        assert (config.numa_mode, config.numa_nodeset) == ("strict", (0,))

        undo = Runner(host).run(plan_undo(host))
        assert undo.status == DONE, undo.message
        assert [_allowed(pid, t) for t in tids] == [_all(n)] * 2
        assert _allowed(pid, pid) == _all(n)
        config = parse_domain(dom.XMLDesc(_INACTIVE))
        assert config.pins == () and config.emulator_pins == () and config.numa_mode is None


def test_connection_dropped_mid_apply_rolls_the_live_pins_back(guest, host, real_libvirtd):
    dom, pid = guest
    n = os.cpu_count() or 1
    if n < 2:
        pytest.skip("needs two host CPUs")
    tids = _threads(dom, pid)
    plan = plan_pin(host, host.snapshot(), NAME, cpus=str(n - 1), reserve="0")
    assert [s.op["scope"] for s in plan.steps] == ["live", "config"]
    seen = []

    def progress(event) -> None:
        seen.append((event.index, event.phase))
        if event.index == 2 and event.phase == "apply":
            # the live pins are in place: now the daemon drops our read-write connection
            assert [_allowed(pid, t) for t in tids] == [str(n - 1)] * 2
            _drop_our_connections(real_libvirtd)

    res = Runner(host).run(plan, progress=progress)
    assert res.status == FAILED_RESULT, res.message
    assert res.undo_failed == [] and len(res.undone) == 2, res.message
    assert (1, "undone") in seen and (2, "failed") in seen
    assert [_allowed(pid, t) for t in tids] == [_all(n)] * 2  # undone through a new connection
    assert _allowed(pid, pid) == _all(n)
    fresh = libvirt.open(real_libvirtd.uri)
    assert parse_domain(fresh.lookupByName(NAME).XMLDesc(_INACTIVE)).pins == ()
    fresh.close()
    assert host.audit.find(res.record_id).to_json()["result"] == "failed"


def _drop_our_connections(d) -> None:
    listing = _admin(d, "client-list", "libvirtd").splitlines()[2:]
    dropped = 0
    for cid in (line.split()[0] for line in listing if line.strip()):
        lines = _admin(d, "client-info", "libvirtd", cid).splitlines()
        info = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}
        if info.get("unix_process_id") == str(os.getpid()) and info.get("readonly") == "no":
            _admin(d, "client-disconnect", "libvirtd", cid)
            dropped += 1
    assert dropped, listing
