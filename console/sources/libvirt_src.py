"""VMs from libvirt: state, size, CPU use, pins, NUMA policy and host devices of every domain.

One read-only connection is opened on the first poll and kept; when it drops, that poll raises
`SourceError` and the next poll opens a new one.

Cost per poll (a host may run hundreds of VMs): the fast facts (state, vCPU count, memory, CPU time)
come from one `getAllDomainStats` call where the driver gives them there (qemu: one call for all), else
one `info()` per domain (the test driver's bulk stats give only the state; an old libvirt has none); the
listing of the domains is then kept while the lists of running IDs and defined names stay the same. The
domain XML (pins, numatune, hostdevs, topology) changes rarely, so it is parsed once and re-read only
when the domain's state changed, after `xml_ttl` seconds (spread per domain so a big host does not
re-read every XML in the same tick), or after `invalidate()` — actions that change a domain call it.

CPU % is the domain's CPU-time delta over the wall-clock delta between two polls, relative to ONE host
CPU: a 4-vCPU VM keeping all its vCPUs busy shows ~400 %. It is None on the first poll of a domain,
after a restart (CPU time went backwards) and for domains that are not running. It is rounded to a
tenth of a percent: the times a poll stamps are off the moments libvirt read the counters by a few
milliseconds, so finer digits are noise — and a VM whose load holds (idle, or pegged) is then the very
same record poll after poll, which everything downstream recognises at once.
"""
from __future__ import annotations

import operator
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree

from nodeconsole.console.libvirt_xml import DomainXml, parse_domain
from nodeconsole.console.model import Vm
from nodeconsole.console.sources.types import Hypervisor, LibvirtData, SourceError

try:
    import libvirt
except ImportError:  # the console still runs without VMs
    libvirt = None
else:
    # libvirt-python prints every error to stderr unless a handler is set; we report errors ourselves
    libvirt.registerErrorHandler(lambda *_args: None, None)

DEFAULT_URI = "qemu:///system"

STATES = {0: "no state", 1: "running", 2: "blocked", 3: "paused", 4: "shutdown", 5: "shut off",
          6: "crashed", 7: "pmsuspended"}
_SHUTOFF = 5

# libvirt error codes (numbers are stable ABI; named here so the module imports without libvirt)
_ERR_INTERNAL, _ERR_NO_SUPPORT, _ERR_NO_CONNECT, _ERR_INVALID_CONN = 1, 3, 5, 6
_ERR_SYSTEM, _ERR_RPC, _ERR_NO_DOMAIN, _ERR_AUTH_FAILED, _ERR_AUTH_UNAVAILABLE = 38, 39, 42, 45, 94
_CONNECTION_ERRORS = {_ERR_INTERNAL, _ERR_NO_CONNECT, _ERR_INVALID_CONN, _ERR_SYSTEM, _ERR_RPC}

# STATE | CPU_TOTAL | BALLOON | VCPU (libvirt.VIR_DOMAIN_STATS_*)
_STATS = 1 | 2 | 4 | 8


def format_version(n: int) -> str:
    """libvirt's version number (major * 1,000,000 + minor * 1,000 + release) as `major.minor.release`."""
    return f"{n // 1000000}.{n // 1000 % 1000}.{n % 1000}"


def cpu_percent(prev: tuple[int, float] | None, cur: tuple[int, float]) -> float | None:
    """Percent of one host CPU between two (cpu_time_ns, monotonic_seconds) samples; None when there is
    no usable earlier sample (first poll, or the CPU time went backwards because the VM restarted)."""
    if prev is None:
        return None
    d_cpu, d_wall = cur[0] - prev[0], cur[1] - prev[1]
    if d_cpu < 0 or d_wall <= 0:
        return None
    return round(d_cpu / (d_wall * 1e9) * 100.0, 1)


class _Domain:
    """What the polls so far know of one domain: its parsed XML and when to re-read it, its last CPU-time
    sample, and its last reading. One record a domain, so reading one costs at most one lookup."""

    __slots__ = ("xml", "xml_state", "expires", "cpu_ns", "cpu_at", "vm")

    def __init__(self) -> None:
        self.xml: DomainXml | None = None
        self.xml_state = ""  # the state the XML was read in: a state change re-reads it
        self.expires = _NEVER_READ  # re-read from then on (the TTL, or at once after invalidate())
        self.cpu_ns: int | None = None  # last CPU-time sample (None: none usable) and when it was taken
        self.cpu_at = 0.0
        self.vm: Vm | None = None  # the last reading, made with `xml`


_NEVER_READ = float("-inf")


@dataclass
class _Listing:
    """A listing of the domains, taken after the IDs of the running ones and the names of the others."""
    ids: list[int]
    names: list[str]
    entries: list[tuple[Any, str, str, _Domain]]  # (virDomain, UUID, name, what is kept of it)


class LibvirtSource:
    """Reads every domain of `uri` (None → qemu:///system). `poll()` raises SourceError with the reason
    when libvirt cannot be reached."""

    def __init__(self, uri: str | None = None, xml_ttl: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.uri = uri or DEFAULT_URI
        self.xml_ttl = xml_ttl
        self._clock = clock
        self._conn: Any = None
        # None: not decided yet on this connection; True: getAllDomainStats gives the fast facts; False: it
        # is not supported or lacks them (the test driver gives only the state), so list and info()
        self._bulk_stats: bool | None = None
        self._domains: dict[str, _Domain] = {}  # by UUID; only the domains of the last poll
        self._listing: _Listing | None = None  # the list+info() reading's last listing on this connection
        self._lock = threading.Lock()  # poll() runs in a worker thread; invalidate() comes from actions
        self.version = ""  # libvirt's version on the open connection ("" before one, or unknown)
        self.hypervisor: Hypervisor | None = None  # what the open connection says of itself

    # -- public -----------------------------------------------------------------------------------

    def poll(self) -> LibvirtData:
        """One reading of all domains, sorted by name."""
        with self._lock:
            return self._poll()

    def invalidate(self, uuid: str | None = None) -> None:
        """Forget the parsed XML of one domain (or all), so the next poll re-reads it. Call after
        changing a domain (pins, numatune, hostdevs), since the XML is otherwise cached `xml_ttl` s."""
        with self._lock:
            if uuid is None:
                for domain in self._domains.values():
                    domain.expires = _NEVER_READ
            else:
                one = self._domains.get(uuid)
                if one is not None:
                    one.expires = _NEVER_READ

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _poll(self) -> LibvirtData:
        conn = self._connect()
        try:
            alive = conn.isAlive()
        except libvirt.libvirtError:
            alive = False
        if not alive:
            self._drop()
            self.version = ""  # unknown until a connection is open again (it may be another daemon)
            raise SourceError(f"libvirt connection to {self.uri} lost: the connection is closed")
        try:
            vms = self._read_all(conn)
        except libvirt.libvirtError as e:
            if self._is_connection_error(e, conn):
                self._drop()
                self.version = ""
                raise SourceError(f"libvirt connection to {self.uri} lost: {_message(e)}") from None
            raise SourceError(f"libvirt read of {self.uri} failed: {_message(e)}") from None
        vms.sort(key=_by_name)
        return LibvirtData(vms=tuple(vms))

    # -- connection -------------------------------------------------------------------------------

    def _connect(self) -> Any:
        if libvirt is None:
            raise SourceError("libvirt-python is not installed (pip install libvirt-python)")
        if self._conn is None:
            try:
                self._conn = libvirt.openReadOnly(self.uri)
            except libvirt.libvirtError as e:
                raise SourceError(f"cannot connect to {self.uri}: {_message(e)}{_hint(e)}") from None
            self._bulk_stats = None
            try:  # the library's (a remote connection: the daemon's) version, once a connection
                self.version = format_version(self._conn.getLibVersion())
            except libvirt.libvirtError:
                self.version = ""
            self.hypervisor = describe(self._conn, self.uri, self.version)
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self.hypervisor = None
        self._listing = None  # its virDomains belong to the connection
        for domain in self._domains.values():
            domain.cpu_ns = None  # CPU-time deltas across a reconnect would span the outage; start over
        if conn is not None:
            try:
                conn.close()
            except libvirt.libvirtError:
                pass  # already dead

    @staticmethod
    def _is_connection_error(err: Any, conn: Any) -> bool:
        if err.get_error_code() in _CONNECTION_ERRORS:
            return True
        try:
            return not conn.isAlive()
        except libvirt.libvirtError:
            return True

    # -- reading ----------------------------------------------------------------------------------

    def _read_all(self, conn: Any) -> list[Vm]:
        if self._bulk_stats is not False:
            try:
                records = conn.getAllDomainStats(_STATS)
            except libvirt.libvirtError as e:
                if e.get_error_code() != _ERR_NO_SUPPORT:
                    raise
                self._bulk_stats = False
            else:
                return self._read_stats(records, self._clock())
        return self._read_infos(conn)

    def _read_stats(self, records: list[tuple[Any, dict[str, Any]]], taken: float) -> list[Vm]:
        """Domains from getAllDomainStats, with info() for what a record lacks.

        The first of this connection's readings with a domain that is not shut off decides: its record
        complete, the bulk stats stay (a fact missing later, say one cgroup read failing, costs one info());
        lacking, they are not asked for again on this connection (list and info() instead)."""
        known, domains = self._domains, {}
        read, vms = self._reading, []
        complete = lacking = False
        for dom, stats in records:
            try:
                uuid = dom.UUIDString()
                domain = known.get(uuid) or _Domain()
                state_no = stats.get("state.state")
                vcpus = stats.get("vcpu.current")
                memory_kib = stats.get("balloon.current")
                cpu_ns = stats.get("cpu.time")
                at = taken
                if state_no == _SHUTOFF and (vcpus is None or memory_kib is None):
                    # A shut-off domain's vCPUs and memory change only with its definition: while its
                    # parsed XML is current (re-read every xml_ttl s, on a state change, and after our own
                    # edits), the last reading's stand.
                    last = domain.vm
                    if (last is not None and last.state == "shut off" and domain.xml_state == "shut off"
                            and taken < domain.expires):
                        vcpus, memory_kib = last.vcpus, last.memory_kib
                if (state_no is None or vcpus is None or memory_kib is None
                        or (cpu_ns is None and state_no != _SHUTOFF)):
                    lacking = lacking or state_no != _SHUTOFF
                    info = dom.info()  # [state, max memory KiB, memory KiB, vCPUs, CPU time ns]
                    at = self._clock()
                    state_no, memory_kib, vcpus, cpu_ns = info[0], info[2], info[3], info[4]
                elif state_no != _SHUTOFF:
                    complete = True
                vm = read(dom, uuid, dom.name(), domain, state_no, int(vcpus), int(memory_kib), cpu_ns, at)
            except libvirt.libvirtError as e:
                if e.get_error_code() == _ERR_NO_DOMAIN:
                    continue  # undefined between listing and reading: simply not there any more
                raise
            vms.append(vm)
            domains[uuid] = domain
        self._domains = domains  # the domains that are gone are forgotten
        if self._bulk_stats is None and (complete or lacking):
            self._bulk_stats = complete
        return vms

    def _read_infos(self, conn: Any) -> list[Vm]:
        """Domains read with one info() each (state, memory, vCPUs and CPU time in one call).

        Listing the domains makes a virDomain of each (on a big host that costs more than reading them),
        so the last listing is kept and read again while the IDs of the running domains and the names of
        the defined ones are the same (a domain defined, undefined, started, stopped or renamed changes
        them), every kept domain still answers and they are as many as those lists say."""
        ids, names = conn.listDomainsID(), conn.listDefinedDomains()
        listing = self._listing
        if (listing is not None and listing.ids == ids and listing.names == names
                and len(listing.entries) == len(ids) + len(names)):
            clock = self._clock
            try:
                infos = [(dom.info(), clock()) for dom, _uuid, _name, _domain in listing.entries]
            except libvirt.libvirtError as e:
                if e.get_error_code() != _ERR_NO_DOMAIN:
                    raise
                # one is gone (say undefined and another defined under its name): list them again
            else:
                read, vms = self._reading, []
                for (dom, uuid, name, domain), (info, at) in zip(listing.entries, infos):
                    try:
                        vms.append(read(dom, uuid, name, domain, info[0], info[3], info[2], info[4], at))
                    except libvirt.libvirtError as e:
                        if e.get_error_code() != _ERR_NO_DOMAIN:
                            raise
                        self._listing = None  # undefined since its info(): not there, nor next poll
                return vms
        self._listing = None
        known, domains = self._domains, {}
        read, clock, vms, entries = self._reading, self._clock, [], []
        for dom in conn.listAllDomains(0):
            try:
                uuid = dom.UUIDString()
                info = dom.info()  # [state, max memory KiB, memory KiB, vCPUs, CPU time ns]
                domain = known.get(uuid) or _Domain()
                name = dom.name()
                vms.append(read(dom, uuid, name, domain, info[0], info[3], info[2], info[4], clock()))
            except libvirt.libvirtError as e:
                if e.get_error_code() == _ERR_NO_DOMAIN:
                    continue  # undefined between listing and reading: simply not there any more
                raise
            domains[uuid] = domain
            entries.append((dom, uuid, name, domain))
        self._domains = domains
        # the lists taken before this listing: a change after them differs from them next poll
        self._listing = _Listing(ids, names, entries)
        return vms

    def _reading(self, dom: Any, uuid: str, name: str, domain: _Domain, state_no: int, vcpus: int, memory_kib: int,
                 cpu_ns: int | None, taken: float) -> Vm:
        """This poll's Vm of one domain from its fast facts, updating what `domain` keeps."""
        state = STATES.get(state_no) or f"unknown ({state_no})"
        if state_no == _SHUTOFF or cpu_ns is None:
            domain.cpu_ns = percent = None
        else:
            cpu_ns = int(cpu_ns)
            prev = domain.cpu_ns
            percent = None if prev is None else cpu_percent((prev, domain.cpu_at), (cpu_ns, taken))
            domain.cpu_ns, domain.cpu_at = cpu_ns, taken

        parsed = domain.xml
        if parsed is None or domain.xml_state != state or taken >= domain.expires:
            parsed = self._domain_xml(dom, uuid, domain, state)
        last = domain.vm
        if (last is not None and last.name == name and last.state == state and last.vcpus == vcpus
                and last.memory_kib == memory_kib):
            vm = domain.vm = _with_cpu(last, percent)  # kept: a CPU % that holds is then this very record
            return vm
        vm = Vm(name=name, state=state, vcpus=vcpus, pins=parsed.pins, emulator_pins=parsed.emulator_pins,
                memory_kib=memory_kib, hostdevs=parsed.hostdevs, cpu_percent=percent, uuid=uuid,
                numa_mode=parsed.numa_mode, numa_nodeset=parsed.numa_nodeset,
                threads_per_core=parsed.threads_per_core, hugepages_kib=parsed.hugepages_kib)
        domain.vm = vm
        return vm

    def _domain_xml(self, dom: Any, uuid: str, domain: _Domain, state: str) -> DomainXml:
        now = self._clock()
        try:
            parsed = parse_domain(dom.XMLDesc(0))
        except ValueError as e:
            raise SourceError(f"domain {dom.name()}: {e}") from None
        # spread expiry over the last quarter of the TTL, deterministically per domain
        spread = (zlib.crc32(uuid.encode()) % 1000) / 4000.0
        domain.xml, domain.xml_state = parsed, state
        domain.expires = now + self.xml_ttl * (1.0 - spread)
        domain.vm = None  # the last reading was made with the old XML
        return parsed


_by_name = operator.attrgetter("name")


def _with_cpu(vm: Vm, percent: float | None) -> Vm:
    """`vm` with another CPU %: dataclasses.replace without running __init__ again (a 500-VM poll makes
    one per running VM whose load moved); `vm` itself while its CPU % is the same."""
    if percent is vm.cpu_percent or percent == vm.cpu_percent:
        return vm
    new = object.__new__(Vm)
    new.__dict__.update(vm.__dict__)
    new.__dict__["cpu_percent"] = percent
    return new


def describe(conn: Any, uri: str, version: str) -> Hypervisor:
    """The connection's driver (getType), the hypervisor's version and the domain types its capabilities
    offer for the host's architecture; what a call refuses stays empty."""
    driver = driver_version = arch = ""
    types: list[str] = []
    try:
        driver = str(conn.getType())
        number = conn.getVersion()
        driver_version = format_version(number) if number else ""
    except libvirt.libvirtError:
        pass
    try:
        caps = ElementTree.fromstring(conn.getCapabilities())
        arch = caps.findtext("host/cpu/arch") or ""
        for guest in caps.findall("guest"):
            node = guest.find("arch")
            if node is None or (arch and node.get("name") != arch):
                continue
            types += [t for d in node.findall("domain") if (t := d.get("type") or "") and t not in types]
    except (libvirt.libvirtError, ElementTree.ParseError):
        pass
    return Hypervisor(uri, version, driver, driver_version, tuple(types), arch)


def _message(err: Any) -> str:
    return (err.get_error_message() or str(err)).strip()


def _hint(err: Any) -> str:
    code, msg = err.get_error_code(), _message(err).lower()
    auth = code in (_ERR_AUTH_FAILED, _ERR_AUTH_UNAVAILABLE) or "authentication" in msg
    if auth or "permission denied" in msg:
        return " (are you in the libvirt group, or root?)"
    if code in (_ERR_SYSTEM, _ERR_NO_CONNECT) or "socket" in msg:
        return " (is libvirtd running? are you in the libvirt group?)"
    return ""
