"""How LibvirtSource reads the domains: one getAllDomainStats call where the driver's bulk stats give the
fast facts, else a listing of the domains and one info() each, the listing kept while nothing was defined,
undefined, started, stopped or renamed. Against libvirt's test driver (whose bulk stats give only the
state), read-write where a test changes domains between polls."""
from __future__ import annotations

from dataclasses import replace

import pytest

from nodeconsole.console.sources.libvirt_src import LibvirtSource
from nodeconsole.console.sources.types import SourceError
from tests.console.test_libvirt import EXPECTED, NODE, Clock, StatsConnection, _error, stats_connections

libvirt = pytest.importorskip("libvirt")

OFF_UUID = "11111111-0000-0000-0000-000000000003"
NEW_XML = """<domain type='test'>
  <name>{name}</name><uuid>{uuid}</uuid>
  <memory unit='MiB'>1024</memory><vcpu>3</vcpu><os><type>hvm</type></os>
</domain>"""


@pytest.fixture
def uri(tmp_path):
    path = tmp_path / "node.xml"
    path.write_text(NODE)
    return f"test://{path}"


def counting(monkeypatch) -> list[tuple[str, str]]:
    """Counts the source's libvirt calls from now on: (method, domain name or "") in order."""
    seen: list[tuple[str, str]] = []
    for cls, method in ((libvirt.virConnect, "getAllDomainStats"), (libvirt.virConnect, "listAllDomains"),
                        (libvirt.virDomain, "info"), (libvirt.virDomain, "XMLDesc")):
        real = getattr(cls, method)

        def counted(self, *args, _real=real, _method=method):
            seen.append((_method, self.name() if isinstance(self, libvirt.virDomain) else ""))
            return _real(self, *args)

        monkeypatch.setattr(cls, method, counted)
    return seen


@pytest.fixture
def calls(monkeypatch):
    return counting(monkeypatch)


def _count(calls, method: str) -> int:
    return sum(1 for m, _ in calls if m == method)


@pytest.fixture
def writable(monkeypatch):
    """The source's own connection opened read-write, so a test can change its test-driver domains."""
    monkeypatch.setattr(libvirt, "openReadOnly", libvirt.open)


def _by_name(src: LibvirtSource) -> dict:
    return {vm.name: vm for vm in src.poll().vms}


def _three_polls(uri: str) -> tuple[LibvirtSource, list[dict]]:
    """A source on its own clock, polled three times a second apart: (the source, each poll by name)."""
    clock = Clock()
    src = LibvirtSource(uri, clock=clock)
    polls = []
    for _ in range(3):
        polls.append(_by_name(src))
        clock.now += 1
    return src, polls


def test_incomplete_bulk_stats_turn_to_listing_and_info(uri, calls):
    src, polls = _three_polls(uri)
    # the first poll found the bulk stats lacking the fast facts; not asked again on this connection
    assert _count(calls, "getAllDomainStats") == 1
    assert _count(calls, "listAllDomains") == 1  # listed on the second poll, that listing kept
    assert _count(calls, "info") == 3 * len(EXPECTED)  # every domain, every poll
    for vms in polls:
        assert {n: replace(vm, cpu_percent=None) for n, vm in vms.items()} == EXPECTED
    for vms in polls[1:]:  # running, paused and crashed domains have a CPU % from their second reading
        assert all(vms[n].cpu_percent is not None and vms[n].cpu_percent >= 0
                   for n in ("gpu-vm", "vgpu-vm", "crashed-vm"))
        assert vms["off-vm"].cpu_percent is None
    assert polls[2]["off-vm"] is polls[1]["off-vm"]  # nothing moved: the very same reading

    calls.clear()
    src.invalidate()
    assert {vm.name for vm in src.poll().vms} == set(EXPECTED)
    assert sorted(n for m, n in calls if m == "XMLDesc") == sorted(EXPECTED)  # every XML read again
    assert _count(calls, "listAllDomains") == 0

    src._conn.close()  # a new connection tries the bulk stats again, then lists again
    with pytest.raises(SourceError, match="lost"):
        src.poll()
    calls.clear()
    src.poll()
    src.poll()
    assert (_count(calls, "getAllDomainStats"), _count(calls, "listAllDomains")) == (1, 1)


def test_complete_bulk_stats_need_no_info(uri, monkeypatch):
    opened = stats_connections(monkeypatch)  # its stats read info() before the counting starts
    calls = counting(monkeypatch)
    src, polls = _three_polls(uri)
    assert [c.bulk_calls for c in opened] == [3]
    assert _count(calls, "info") == 0 and _count(calls, "listAllDomains") == 0
    for vms in polls:
        assert {n: replace(vm, cpu_percent=None) for n, vm in vms.items()} == EXPECTED
    assert all(polls[2][n].cpu_percent is not None for n in ("gpu-vm", "vgpu-vm", "crashed-vm"))
    assert polls[2]["off-vm"].cpu_percent is None


def test_a_fact_missing_later_from_complete_bulk_stats_costs_one_info(uri, monkeypatch):
    """The connection's first reading found the bulk stats complete: one record lacking the CPU time later
    (a cgroup read failing) is read with info() that poll, and the bulk stats stay in use."""
    opened = stats_connections(monkeypatch)
    real_stats = StatsConnection.getAllDomainStats
    gap = [False]

    def with_gap(self, stats=0, flags=0):
        records = real_stats(self, stats, flags)
        for dom, facts in records:
            if gap[0] and dom.name() == "gpu-vm":
                del facts["cpu.time"]
        return records

    monkeypatch.setattr(StatsConnection, "getAllDomainStats", with_gap)
    calls = counting(monkeypatch)
    clock = Clock()
    src = LibvirtSource(uri, clock=clock)
    src.poll()
    gap[0] = True
    clock.now += 1
    assert _by_name(src)["gpu-vm"].cpu_percent is not None  # from info()
    gap[0] = False
    clock.now += 1
    assert _by_name(src)["gpu-vm"].cpu_percent is not None
    assert [c.bulk_calls for c in opened] == [3]
    assert [c for c in calls if c[0] in ("info", "listAllDomains")] == [("info", "gpu-vm")]


def test_domains_defined_started_and_undefined_between_polls(uri, writable, calls):
    clock = Clock()
    src = LibvirtSource(uri, clock=clock)
    src.poll()
    src.poll()
    conn = src._conn
    conn.defineXML(NEW_XML.format(name="new-vm", uuid="11111111-0000-0000-0000-000000000005"))
    clock.now += 1
    vms = _by_name(src)
    assert vms["new-vm"] == replace(EXPECTED["off-vm"], name="new-vm", vcpus=3, memory_kib=1024 * 1024,
                                    uuid="11111111-0000-0000-0000-000000000005")
    assert len(vms) == 5

    conn.lookupByName("off-vm").create()  # started
    calls.clear()
    clock.now += 1
    started = _by_name(src)["off-vm"]
    assert started.state == "running" and started.cpu_percent is None  # its first sample
    assert ("XMLDesc", "off-vm") in calls  # its state changed: its XML read again
    clock.now += 1
    assert _by_name(src)["off-vm"].cpu_percent is not None

    conn.lookupByName("new-vm").undefine()
    clock.now += 1
    assert sorted(_by_name(src)) == sorted(EXPECTED)
    assert "11111111-0000-0000-0000-000000000005" not in src._domains  # forgotten


def test_a_domain_redefined_under_the_same_name_is_read_anew(uri, writable):
    """Undefined and defined again under its name with another UUID: the running IDs and the defined names
    are the same as before, but the kept listing's domain is gone, so the domains are listed again."""
    clock = Clock()
    src = LibvirtSource(uri, clock=clock)
    src.poll()
    src.poll()
    conn = src._conn
    names = conn.listDefinedDomains()
    conn.lookupByName("off-vm").undefine()
    conn.defineXML(NEW_XML.format(name="off-vm", uuid="11111111-0000-0000-0000-000000000009"))
    assert conn.listDefinedDomains() == names
    clock.now += 1
    vms = _by_name(src)
    assert vms["off-vm"] == replace(EXPECTED["off-vm"], vcpus=3, memory_kib=1024 * 1024,
                                    uuid="11111111-0000-0000-0000-000000000009")
    assert len(vms) == 4 and OFF_UUID not in src._domains


def test_a_listing_that_missed_a_domain_is_not_kept(uri, monkeypatch, calls):
    """A domain undefined while the listing was taken and defined again right after: the lists of IDs and
    names say four domains, the listing holds three, so the next poll lists again."""
    real_list = libvirt.virConnect.listAllDomains  # the counting one
    missing = [True]

    def listing(self, flags=0):
        doms = real_list(self, flags)
        if missing:
            missing.clear()
            return [d for d in doms if d.name() != "off-vm"]
        return doms

    clock = Clock()
    src = LibvirtSource(uri, clock=clock)
    src.poll()
    monkeypatch.setattr(libvirt.virConnect, "listAllDomains", listing)
    clock.now += 1
    assert sorted(_by_name(src)) == ["crashed-vm", "gpu-vm", "vgpu-vm"]
    clock.now += 1
    assert sorted(_by_name(src)) == sorted(EXPECTED)
    assert _count(calls, "listAllDomains") == 2


def test_a_domain_vanishing_while_a_kept_listing_is_read(uri, monkeypatch, calls):
    gone = _error(libvirt.VIR_ERR_NO_DOMAIN, "Domain not found")
    real_xml, real_info = libvirt.virDomain.XMLDesc, libvirt.virDomain.info  # the counting ones
    clock = Clock()
    src = LibvirtSource(uri, clock=clock)
    src.poll()
    src.poll()
    assert _count(calls, "listAllDomains") == 1

    def xml(self, flags=0):  # gone between its info() and its XML
        if self.name() == "vgpu-vm":
            raise gone
        return real_xml(self, flags)

    monkeypatch.setattr(libvirt.virDomain, "XMLDesc", xml)
    src.invalidate("11111111-0000-0000-0000-000000000002")
    clock.now += 1
    assert sorted(_by_name(src)) == ["crashed-vm", "gpu-vm", "off-vm"]
    assert _count(calls, "listAllDomains") == 1  # read from the kept listing
    monkeypatch.setattr(libvirt.virDomain, "XMLDesc", real_xml)
    clock.now += 1
    assert sorted(_by_name(src)) == sorted(EXPECTED)  # listed again
    assert _count(calls, "listAllDomains") == 2

    def info(self):  # gone before its info()
        if self.name() == "crashed-vm":
            raise gone
        return real_info(self)

    monkeypatch.setattr(libvirt.virDomain, "info", info)
    clock.now += 1
    vms = _by_name(src)
    assert sorted(vms) == ["gpu-vm", "off-vm", "vgpu-vm"]
    assert all(vms[n].cpu_percent is not None for n in ("gpu-vm", "vgpu-vm"))  # each sampled once a poll


def test_an_edited_definition_shows_after_invalidate(uri, monkeypatch):
    """Pins edited (name, state, vCPUs and memory the same): the cached XML stands until invalidate(), then
    the reading is made anew from the new XML."""
    real_xml = libvirt.virDomain.XMLDesc
    edited: set[str] = set()

    def xml(self, flags=0):
        text = real_xml(self, flags)
        if self.name() in edited:
            assert "<emulatorpin cpuset='0-1'/>" in text
            return text.replace("<emulatorpin cpuset='0-1'/>", "<emulatorpin cpuset='6-7'/>")
        return text

    monkeypatch.setattr(libvirt.virDomain, "XMLDesc", xml)
    clock = Clock()
    src = LibvirtSource(uri, clock=clock)
    src.poll()
    clock.now += 1
    src.poll()
    edited.add("gpu-vm")
    clock.now += 1
    assert _by_name(src)["gpu-vm"].emulator_pins == (0, 1)  # cached
    src.invalidate("11111111-0000-0000-0000-000000000001")
    clock.now += 1
    vm = _by_name(src)["gpu-vm"]
    assert vm == replace(EXPECTED["gpu-vm"], emulator_pins=(6, 7), cpu_percent=vm.cpu_percent)
