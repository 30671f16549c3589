"""VMs from libvirt: state, size, CPU use, pins, NUMA policy and host devices of every domain.

One read-only connection is opened on the first poll and kept; when it drops, that poll raises
`SourceError` and the next poll opens a new one.

Cost per poll (a host may run hundreds of VMs): the fast facts (state, vCPU count, memory, CPU time)
come from one `getAllDomainStats` call where the driver supports it, else one `info()` per domain. The
domain XML (pins, numatune, hostdevs, topology) changes rarely, so it is parsed once and re-read only
when the domain's state changed, after `xml_ttl` seconds (spread per domain so a big host does not
re-read every XML in the same tick), or after `invalidate()` — actions that change a domain call it.

CPU % is the domain's CPU-time delta over the wall-clock delta between two polls, relative to ONE host
CPU: a 4-vCPU VM keeping all its vCPUs busy shows ~400 %. It is None on the first poll of a domain,
after a restart (CPU time went backwards) and for domains that are not running.
"""
from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodeconsole.console.libvirt_xml import DomainXml, parse_domain
from nodeconsole.console.model import Vm
from nodeconsole.console.sources.types import LibvirtData, SourceError

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


def cpu_percent(prev: tuple[int, float] | None, cur: tuple[int, float]) -> float | None:
    """Percent of one host CPU between two (cpu_time_ns, monotonic_seconds) samples; None when there is
    no usable earlier sample (first poll, or the CPU time went backwards because the VM restarted)."""
    if prev is None:
        return None
    d_cpu, d_wall = cur[0] - prev[0], cur[1] - prev[1]
    if d_cpu < 0 or d_wall <= 0:
        return None
    return d_cpu / (d_wall * 1e9) * 100.0


@dataclass
class _CachedXml:
    state: str
    expires: float
    parsed: DomainXml


class LibvirtSource:
    """Reads every domain of `uri` (None → qemu:///system). `poll()` raises SourceError with the reason
    when libvirt cannot be reached."""

    def __init__(self, uri: str | None = None, xml_ttl: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.uri = uri or DEFAULT_URI
        self.xml_ttl = xml_ttl
        self._clock = clock
        self._conn: Any = None
        self._bulk_stats: bool | None = None  # None: not tried yet on this connection
        self._xml: dict[str, _CachedXml] = {}
        self._cpu: dict[str, tuple[int, float]] = {}
        # uuid → (parsed XML, (name, state, vCPUs, memory), Vm): the last poll's record of each domain, whose
        # copy with the new CPU % is this poll's while the rest is the same (cheaper than a new Vm)
        self._vms: dict[str, tuple[DomainXml, tuple[str, str, int, int], Vm]] = {}
        self._lock = threading.Lock()  # poll() runs in a worker thread; invalidate() comes from actions

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
                self._xml.clear()
            else:
                self._xml.pop(uuid, None)

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
            raise SourceError(f"libvirt connection to {self.uri} lost: the connection is closed")
        try:
            vms = self._read_all(conn)
        except libvirt.libvirtError as e:
            if self._is_connection_error(e, conn):
                self._drop()
                raise SourceError(f"libvirt connection to {self.uri} lost: {_message(e)}") from None
            raise SourceError(f"libvirt read of {self.uri} failed: {_message(e)}") from None
        return LibvirtData(vms=tuple(sorted(vms, key=lambda v: v.name)))

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
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._cpu.clear()  # CPU-time deltas across a reconnect would span the outage; start over
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

    def _records(self, conn: Any) -> tuple[list[tuple[Any, dict[str, Any]]], float]:
        """(domain, stats) for every domain and the time the stats were taken."""
        if self._bulk_stats is not False:
            try:
                records = conn.getAllDomainStats(_STATS)
                self._bulk_stats = True
                return records, self._clock()
            except libvirt.libvirtError as e:
                if e.get_error_code() != _ERR_NO_SUPPORT:
                    raise
                self._bulk_stats = False
        return [(dom, {}) for dom in conn.listAllDomains()], self._clock()

    def _read_all(self, conn: Any) -> list[Vm]:
        records, taken = self._records(conn)
        vms: list[Vm] = []
        read = self._read_domain
        for dom, stats in records:
            try:
                vms.append(read(dom, stats, taken))
            except libvirt.libvirtError as e:
                if e.get_error_code() == _ERR_NO_DOMAIN:
                    continue  # undefined between listing and reading: simply not there any more
                raise
        # forget domains that are gone, so a big churning host does not grow the caches
        seen = {vm.uuid for vm in vms}
        for cache in (self._xml, self._cpu, self._vms):
            for uuid in cache.keys() - seen:
                del cache[uuid]
        return vms

    def _read_domain(self, dom: Any, stats: dict[str, Any], taken: float) -> Vm:
        uuid = dom.UUIDString()
        state_no = stats.get("state.state")
        vcpus = stats.get("vcpu.current")
        memory_kib = stats.get("balloon.current")
        cpu_ns = stats.get("cpu.time")
        if state_no == _SHUTOFF and (vcpus is None or memory_kib is None):
            # A shut-off domain's vCPUs and memory change only with its definition: while its parsed XML
            # is current (re-read every xml_ttl s, on a state change, and after our own edits), the
            # last reading's stand (the test driver's bulk stats give only the state: one info() call a
            # domain otherwise; on a 500-VM host a fifth of them are off).
            last, cached = self._vms.get(uuid), self._xml.get(uuid)
            if (last is not None and cached is not None and last[0] is cached.parsed and last[1][1] == "shut off"
                    and cached.state == "shut off" and taken < cached.expires):
                vcpus, memory_kib = last[1][2], last[1][3]
        if state_no is None or vcpus is None or memory_kib is None or (cpu_ns is None and state_no != _SHUTOFF):
            # this driver's bulk stats lack something (the test driver only gives the state)
            info = dom.info()  # [state, max memory KiB, memory KiB, vCPUs, CPU time ns]
            taken = self._clock()
            state_no, memory_kib, vcpus, cpu_ns = info[0], info[2], info[3], info[4]
        state = STATES.get(state_no) or f"unknown ({state_no})"

        if state_no == _SHUTOFF or cpu_ns is None:
            self._cpu.pop(uuid, None)
            percent = None
        else:
            sample = (int(cpu_ns), taken)
            percent = cpu_percent(self._cpu.get(uuid), sample)
            self._cpu[uuid] = sample

        cached = self._xml.get(uuid)
        if cached is not None and cached.state == state and taken < cached.expires:
            parsed = cached.parsed
        else:
            parsed = self._domain_xml(dom, uuid, state)
        name = dom.name()
        last = self._vms.get(uuid)
        if last is not None and last[0] is parsed:
            facts = last[1]
            if facts[0] == name and facts[1] == state and facts[2] == vcpus and facts[3] == memory_kib:
                return _with_cpu(last[2], percent)
        facts = (name, state, int(vcpus), int(memory_kib))
        vm = Vm(name=name, state=state, vcpus=facts[2], pins=parsed.pins,
                emulator_pins=parsed.emulator_pins, memory_kib=facts[3], hostdevs=parsed.hostdevs,
                cpu_percent=percent, uuid=uuid, numa_mode=parsed.numa_mode,
                numa_nodeset=parsed.numa_nodeset, threads_per_core=parsed.threads_per_core,
                hugepages_kib=parsed.hugepages_kib)
        self._vms[uuid] = (parsed, facts, vm)
        return vm

    def _domain_xml(self, dom: Any, uuid: str, state: str) -> DomainXml:
        now = self._clock()
        cached = self._xml.get(uuid)
        if cached is not None and cached.state == state and now < cached.expires:
            return cached.parsed
        try:
            parsed = parse_domain(dom.XMLDesc(0))
        except ValueError as e:
            raise SourceError(f"domain {dom.name()}: {e}") from None
        # spread expiry over the last quarter of the TTL, deterministically per domain
        spread = (zlib.crc32(uuid.encode()) % 1000) / 4000.0
        self._xml[uuid] = _CachedXml(state=state, expires=now + self.xml_ttl * (1.0 - spread), parsed=parsed)
        return parsed


def _with_cpu(vm: Vm, percent: float | None) -> Vm:
    """`vm` with another CPU %: dataclasses.replace without running __init__ again (a 500-VM poll makes
    one per running VM)."""
    if percent is vm.cpu_percent:
        return vm
    new = object.__new__(Vm)
    new.__dict__.update(vm.__dict__)
    new.__dict__["cpu_percent"] = percent
    return new


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
