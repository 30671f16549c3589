"""LibvirtSource against libvirt's in-process test driver (a node file in tmp_path, no daemon)."""
from __future__ import annotations

import time

import pytest

from nodeconsole.console.model import Hostdev, VcpuPin, Vm
from nodeconsole.console.sources import libvirt_src
from nodeconsole.console.sources.libvirt_src import LibvirtSource, cpu_percent
from nodeconsole.console.sources.types import SourceError

libvirt = pytest.importorskip("libvirt")

NODE = """<node>
  <cpu><mhz>2000</mhz><model>i686</model><nodes>1</nodes><sockets>1</sockets><cores>4</cores>
    <threads>2</threads><active>8</active></cpu>
  <memory>16777216</memory>
  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
    <name>gpu-vm</name>
    <uuid>11111111-0000-0000-0000-000000000001</uuid>
    <memory unit='GiB'>4</memory>
    <vcpu placement='static'>4</vcpu>
    <cputune>
      <vcpupin vcpu='0' cpuset='2'/>
      <vcpupin vcpu='1' cpuset='3'/>
      <vcpupin vcpu='2' cpuset='4-5'/>
      <vcpupin vcpu='3' cpuset='4-7,^5'/>
      <emulatorpin cpuset='0-1'/>
    </cputune>
    <numatune><memory mode='strict' nodeset='0'/></numatune>
    <cpu><topology sockets='1' dies='1' cores='2' threads='2'/></cpu>
    <os><type>hvm</type></os>
    <devices>
      <hostdev mode='subsystem' type='pci' managed='yes'>
        <source><address domain='0x0000' bus='0x17' slot='0x00' function='0x0'/></source>
      </hostdev>
      <hostdev mode='subsystem' type='pci' managed='no'>
        <source><address domain='0x0001' bus='0xb3' slot='0x1f' function='0x7'/></source>
      </hostdev>
      <interface type='hostdev' managed='yes'>
        <source><address type='pci' domain='0x0000' bus='0x65' slot='0x01' function='0x2'/></source>
      </interface>
    </devices>
  </domain>
  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
    <name>vgpu-vm</name>
    <uuid>11111111-0000-0000-0000-000000000002</uuid>
    <memory unit='MiB'>2048</memory>
    <vcpu current='2'>8</vcpu>
    <numatune><memory mode='interleave' nodeset='0-1'/></numatune>
    <cpu><topology sockets='1' dies='1' cores='4' threads='2'/></cpu>
    <os><type>hvm</type></os>
    <devices>
      <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
        <source><address uuid='ABCDEF01-2345-6789-ABCD-EF0123456789'/></source>
      </hostdev>
    </devices>
    <test:runstate>3</test:runstate>
  </domain>
  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
    <name>off-vm</name>
    <uuid>11111111-0000-0000-0000-000000000003</uuid>
    <memory unit='MiB'>512</memory>
    <vcpu>1</vcpu>
    <os><type>hvm</type></os>
    <test:runstate>5</test:runstate>
  </domain>
  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
    <name>crashed-vm</name>
    <uuid>11111111-0000-0000-0000-000000000004</uuid>
    <memory unit='MiB'>256</memory>
    <vcpu>2</vcpu>
    <numatune><memory nodeset='1'/></numatune>
    <os><type>hvm</type></os>
    <test:runstate>6</test:runstate>
  </domain>
</node>
"""

EXPECTED = {
    "gpu-vm": Vm(name="gpu-vm", state="running", vcpus=4, memory_kib=4 * 1024 * 1024,
                 uuid="11111111-0000-0000-0000-000000000001",
                 pins=(VcpuPin(0, (2,)), VcpuPin(1, (3,)), VcpuPin(2, (4, 5)), VcpuPin(3, (4, 6, 7))),
                 emulator_pins=(0, 1), numa_mode="strict", numa_nodeset=(0,), threads_per_core=2,
                 # in the order of libvirt's XML, which writes <interface> before <hostdev>
                 hostdevs=(Hostdev(type="pci", address="0000:65:01.2", managed=True),
                           Hostdev(type="pci", address="0000:17:00.0", managed=True),
                           Hostdev(type="pci", address="0001:b3:1f.7", managed=False))),
    "vgpu-vm": Vm(name="vgpu-vm", state="paused", vcpus=2, memory_kib=2048 * 1024,
                  uuid="11111111-0000-0000-0000-000000000002", numa_mode="interleave", numa_nodeset=(0, 1),
                  threads_per_core=2,
                  hostdevs=(Hostdev(type="mdev", uuid="abcdef01-2345-6789-abcd-ef0123456789",
                                    managed=False),)),
    "off-vm": Vm(name="off-vm", state="shut off", vcpus=1, memory_kib=512 * 1024,
                 uuid="11111111-0000-0000-0000-000000000003"),
    "crashed-vm": Vm(name="crashed-vm", state="crashed", vcpus=2, memory_kib=256 * 1024,
                     uuid="11111111-0000-0000-0000-000000000004", numa_mode="strict", numa_nodeset=(1,)),
}


@pytest.fixture
def uri(tmp_path):
    path = tmp_path / "node.xml"
    path.write_text(NODE)
    return f"test://{path}"


def _error(code: int, message: str) -> libvirt.libvirtError:
    """A libvirtError as libvirt raises it (get_error_code etc. read `err`)."""
    e = libvirt.libvirtError(message)
    e.err = (code, 0, message, 2, message, None, None, -1, -1)
    return e


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_first_poll_reads_every_field(uri):
    data = LibvirtSource(uri).poll()
    assert [vm.name for vm in data.vms] == sorted(EXPECTED)  # sorted by name
    for vm in data.vms:
        assert vm == EXPECTED[vm.name]  # cpu_percent None: no earlier sample


def test_cpu_percent_on_second_poll(uri):
    src = LibvirtSource(uri)
    src.poll()
    time.sleep(0.3)
    vms = {vm.name: vm for vm in src.poll().vms}
    # the test driver's "CPU time" is the wall clock, so an active domain reads ~100 % of one CPU
    for name in ("gpu-vm", "vgpu-vm", "crashed-vm"):
        assert vms[name].cpu_percent == pytest.approx(100.0, abs=25.0), name
    assert vms["off-vm"].cpu_percent is None


def test_cpu_percent_arithmetic():
    assert cpu_percent(None, (5, 1.0)) is None
    assert cpu_percent((0, 10.0), (500_000_000, 11.0)) == pytest.approx(50.0)
    assert cpu_percent((0, 10.0), (8_000_000_000, 12.0)) == pytest.approx(400.0)  # 4 busy vCPUs
    assert cpu_percent((9_000, 10.0), (1_000, 11.0)) is None  # restarted: CPU time went back
    assert cpu_percent((0, 10.0), (1_000, 10.0)) is None  # no time passed


def test_vanished_domain_is_skipped(uri, monkeypatch):
    src = LibvirtSource(uri)
    conn = libvirt.openReadOnly(uri)
    try:
        conn.lookupByName("no-such-domain")
    except libvirt.libvirtError as e:
        gone = e  # a genuine VIR_ERR_NO_DOMAIN
    conn.close()
    assert gone.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN
    real_xml, real_info = libvirt.virDomain.XMLDesc, libvirt.virDomain.info

    def xml(self, flags=0):
        if self.name() == "vgpu-vm":
            raise gone
        return real_xml(self, flags)

    def info(self):
        if self.name() == "crashed-vm":
            raise gone
        return real_info(self)

    monkeypatch.setattr(libvirt.virDomain, "XMLDesc", xml)
    monkeypatch.setattr(libvirt.virDomain, "info", info)
    assert [vm.name for vm in src.poll().vms] == ["gpu-vm", "off-vm"]


def test_xml_is_cached_and_reread_on_ttl_state_change_or_invalidate(uri, monkeypatch):
    calls: list[str] = []
    real_xml, real_info = libvirt.virDomain.XMLDesc, libvirt.virDomain.info
    paused: set[str] = set()

    def xml(self, flags=0):
        calls.append(self.name())
        return real_xml(self, flags)

    def info(self):
        got = real_info(self)
        return [libvirt.VIR_DOMAIN_PAUSED, *got[1:]] if self.name() in paused else got

    monkeypatch.setattr(libvirt.virDomain, "XMLDesc", xml)
    monkeypatch.setattr(libvirt.virDomain, "info", info)
    clock = Clock()
    src = LibvirtSource(uri, xml_ttl=30.0, clock=clock)
    src.poll()
    assert sorted(calls) == sorted(EXPECTED)
    calls.clear()
    clock.now += 1
    src.poll()
    assert calls == []  # nothing changed: the parsed XML is reused
    paused.add("gpu-vm")
    clock.now += 1
    assert next(vm for vm in src.poll().vms if vm.name == "gpu-vm").state == "paused"
    assert calls == ["gpu-vm"]  # its state changed
    calls.clear()
    src.invalidate("11111111-0000-0000-0000-000000000003")
    src.poll()
    assert calls == ["off-vm"]
    calls.clear()
    clock.now += 30.0  # past every domain's TTL (expiry is spread over its last quarter)
    src.poll()
    assert sorted(calls) == sorted(EXPECTED)


def test_a_domain_record_is_kept_while_nothing_but_its_cpu_moves(uri, monkeypatch):
    """The next poll copies a domain's record with its new CPU % while its XML, name, state, vCPUs and
    memory are the same; any of them moving gives the new values."""
    from dataclasses import replace

    clock = Clock()
    src = LibvirtSource(uri, clock=clock)
    first = {vm.name: vm for vm in src.poll().vms}
    clock.now += 1
    second = {vm.name: vm for vm in src.poll().vms}
    assert {n: replace(vm, cpu_percent=None) for n, vm in second.items()} == EXPECTED
    assert second["off-vm"] is first["off-vm"]  # not running: nothing moved at all
    assert second["gpu-vm"].cpu_percent is not None and first["gpu-vm"].cpu_percent is None
    real_info = libvirt.virDomain.info

    def info(self):
        got = real_info(self)
        return [got[0], got[1], 2 * got[2], got[3] - 1, *got[4:]] if self.name() == "gpu-vm" else got

    monkeypatch.setattr(libvirt.virDomain, "info", info)
    clock.now += 1
    third = {vm.name: vm for vm in src.poll().vms}
    want = EXPECTED["gpu-vm"]
    assert replace(third["gpu-vm"], cpu_percent=None) == replace(want, memory_kib=2 * want.memory_kib,
                                                                   vcpus=want.vcpus - 1)
    assert {n: replace(vm, cpu_percent=None) for n, vm in third.items() if n != "gpu-vm"} == {
        n: vm for n, vm in EXPECTED.items() if n != "gpu-vm"}


def test_closed_connection_raises_then_recovers(uri):
    src = LibvirtSource(uri)
    assert src.version == ""
    src.poll()
    known = src.version
    assert known.count(".") == 2 and known[0].isdigit()  # libvirt's version, read with the connection
    src._conn.close()  # the connection dies between polls
    with pytest.raises(SourceError, match=r"libvirt connection to test://.* lost"):
        src.poll()
    assert src.version == ""  # unknown while no connection is open
    vms = src.poll().vms  # re-opened
    assert src.version == known
    assert {vm.name for vm in vms} == set(EXPECTED)
    assert all(vm.cpu_percent is None for vm in vms)  # no CPU-time delta across the outage


@pytest.mark.parametrize("cls, method", [
    ("virConnect", "getAllDomainStats"),  # the first poll's bulk stats
    ("virConnect", "listAllDomains"),  # the next poll lists the domains (the test driver's stats lack facts)
    ("virDomain", "info"),  # asked on every poll
])
def test_rpc_failure_mid_poll_is_connection_lost(uri, monkeypatch, cls, method):
    src = LibvirtSource(uri)
    if method != "getAllDomainStats":
        src.poll()

    def reset(self, *args):
        raise _error(libvirt.VIR_ERR_SYSTEM_ERROR, "Cannot recv data: Connection reset by peer")

    monkeypatch.setattr(getattr(libvirt, cls), method, reset)
    with pytest.raises(SourceError, match="lost: Cannot recv data: Connection reset by peer"):
        src.poll()
    assert src._conn is None  # dropped
    monkeypatch.undo()
    assert len(src.poll().vms) == 4
    assert src._conn is not None


def test_other_libvirt_error_keeps_the_connection(uri, monkeypatch):
    src = LibvirtSource(uri)
    src.poll()
    conn = src._conn
    real_info = libvirt.virDomain.info

    def info(self):
        if self.name() == "crashed-vm":  # asked every poll (a shut-off one is not, see below)
            raise _error(libvirt.VIR_ERR_OPERATION_FAILED, "operation failed: just this once")
        return real_info(self)

    monkeypatch.setattr(libvirt.virDomain, "info", info)
    with pytest.raises(SourceError, match="read of test://.* failed: operation failed: just this once"):
        src.poll()
    monkeypatch.undo()
    assert len(src.poll().vms) == 4
    assert src._conn is conn


def test_driver_without_bulk_stats_falls_back_to_listing(uri, monkeypatch):
    tries = []

    def unsupported(self, *args):
        tries.append(1)
        raise _error(libvirt.VIR_ERR_NO_SUPPORT, "this function is not supported by the connection driver")

    monkeypatch.setattr(libvirt.virConnect, "getAllDomainStats", unsupported)
    src = LibvirtSource(uri)
    for _ in range(3):
        assert {vm.name: vm for vm in src.poll().vms}["gpu-vm"].pins == EXPECTED["gpu-vm"].pins
    assert len(tries) == 1  # asked once per connection, then remembered


@pytest.mark.parametrize("bad, reason", [
    ("test:///nonexistent/node.xml",
     r"cannot connect to test:///nonexistent/node.xml: .*nonexistent/node.xml"),
    ("qemu:///system?socket=/nonexistent/libvirt-sock",
     r"cannot connect to qemu:///system\?socket=/nonexistent/libvirt-sock: "
     r".*No such file.*is libvirtd running"),
])
def test_cannot_connect_says_why(bad, reason):
    src = LibvirtSource(bad)
    with pytest.raises(SourceError, match=reason):
        src.poll()
    with pytest.raises(SourceError, match=reason):  # retried on every poll, same clear reason
        src.poll()


def test_default_uri_and_missing_binding(monkeypatch):
    assert LibvirtSource().uri == "qemu:///system"
    monkeypatch.setattr(libvirt_src, "libvirt", None)
    with pytest.raises(SourceError, match="libvirt-python is not installed"):
        LibvirtSource("test:///default").poll()


class StatsConnection:
    """A test-driver connection whose getAllDomainStats gives the fast facts, as a qemu libvirtd's does
    (the test driver's give only the state). The facts come from `real_info`, so that a test counting
    virDomain.info sees only the source's own calls. `shut_off_facts` False: a shut-off domain's record
    holds only its state."""

    def __init__(self, conn, real_info, shut_off_facts: bool = True) -> None:
        self._conn, self._real_info, self._shut_off_facts = conn, real_info, shut_off_facts
        self.bulk_calls = 0

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def getAllDomainStats(self, stats=0, flags=0):
        self.bulk_calls += 1
        records = []
        for dom, got in self._conn.getAllDomainStats(stats, flags):
            state, _max_kib, memory_kib, vcpus, cpu_ns = self._real_info(dom)
            facts = {"state.state": state, "state.reason": got["state.reason"]}
            if state != libvirt.VIR_DOMAIN_SHUTOFF:
                facts.update({"cpu.time": cpu_ns, "balloon.current": memory_kib, "vcpu.current": vcpus})
            elif self._shut_off_facts:
                facts.update({"balloon.current": memory_kib, "vcpu.current": vcpus})
            records.append((dom, facts))
        return records


def stats_connections(monkeypatch, shut_off_facts: bool = True) -> list[StatsConnection]:
    """Make every connection the source opens a StatsConnection; returns the list of those opened."""
    opened: list[StatsConnection] = []
    real_open, real_info = libvirt.openReadOnly, libvirt.virDomain.info

    def open_read_only(uri):
        opened.append(StatsConnection(real_open(uri), real_info, shut_off_facts))
        return opened[-1]

    monkeypatch.setattr(libvirt, "openReadOnly", open_read_only)
    return opened


def test_a_shut_off_domain_is_not_asked_for_info_while_its_definition_is_current(uri, monkeypatch):
    """A driver whose bulk stats give a shut-off domain only its state: its vCPUs and memory come from the
    last reading while its parsed XML is current (they change only with its definition), and from info()
    again once the XML is re-read (its TTL, or invalidate() after an edit). The others need no info()."""
    opened = stats_connections(monkeypatch, shut_off_facts=False)
    asked: list[str] = []
    real_info = libvirt.virDomain.info
    grown: set[str] = set()

    def info(self):
        asked.append(self.name())
        got = real_info(self)
        return [got[0], got[1], got[2], got[3] + 1, *got[4:]] if self.name() in grown else got

    monkeypatch.setattr(libvirt.virDomain, "info", info)
    clock = Clock()
    src = LibvirtSource(uri, xml_ttl=30.0, clock=clock)
    first = {vm.name: vm for vm in src.poll().vms}
    assert asked == ["off-vm"] and first["off-vm"] == EXPECTED["off-vm"]
    asked.clear()
    clock.now += 1
    second = {vm.name: vm for vm in src.poll().vms}
    assert asked == []
    assert second["off-vm"] == EXPECTED["off-vm"]
    grown.add("off-vm")  # its definition edited (virsh setvcpus --config)
    src.invalidate("11111111-0000-0000-0000-000000000003")
    clock.now += 1
    assert next(vm for vm in src.poll().vms if vm.name == "off-vm").vcpus == EXPECTED["off-vm"].vcpus + 1
    assert asked == ["off-vm"]
    asked.clear()
    clock.now += 1
    src.poll()
    assert asked == []
    clock.now += 31.0  # past its XML's TTL: read again
    src.poll()
    assert asked == ["off-vm"]
    assert [c.bulk_calls for c in opened] == [5]  # the bulk stats stay in use


def test_cpu_percent_to_a_tenth_and_a_steady_domain_is_the_same_record(uri, monkeypatch):
    """CPU % is rounded to a tenth of a percent; a running domain whose load holds is handed on as the
    very same record, poll after poll, and a new figure makes a new one."""
    assert cpu_percent((0, 10.0), (333_333_333, 11.0)) == 33.3
    clock = Clock()
    cpu = {"ns": 7}  # the domain's CPU time
    real_info = libvirt.virDomain.info

    def info(self):
        got = real_info(self)
        return [*got[:4], cpu["ns"]] if self.name() == "gpu-vm" else got

    monkeypatch.setattr(libvirt.virDomain, "info", info)
    src = LibvirtSource(uri, clock=clock)
    polls = []
    for busy in (500_000_000, 500_000_000, 500_000_012, 250_000_000, 0):  # CPU ns in each clock second
        polls.append({vm.name: vm for vm in src.poll().vms}["gpu-vm"])
        clock.now += 1.0
        cpu["ns"] += busy
    polls.append({vm.name: vm for vm in src.poll().vms}["gpu-vm"])
    assert [p.cpu_percent for p in polls] == [None, 50.0, 50.0, 50.0, 25.0, 0.0]
    assert polls[3] is polls[2] is polls[1]  # 50.0000012 % is 50.0 %: the same record
    assert polls[4] is not polls[3] and polls[5] is not polls[4]
