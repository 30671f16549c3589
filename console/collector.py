"""Assemble one frozen HostSnapshot from the sources.

Each source is read inside its own guard: an exception becomes `sources.<name> = "unavailable: reason"`
and the rest of the snapshot is still built. Slow, static facts (the sysfs tree) are cached for a few
seconds, and never across a reboot (the cache is keyed by the host's boot id); fast facts (NVML metrics,
VM CPU time, per-CPU load) are read on every call. One Collector is
used by one poller at a time (the app never starts a poll while one runs).
"""
from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from nodeconsole.console.assembly import Marks, assemble, with_fields
from nodeconsole.console.audit_log import host_audit
from nodeconsole.console.derived import NVIDIA, Derived, is_gpu
from nodeconsole.console.drains import DrainReader
from nodeconsole.console.health import HealthBook
from nodeconsole.console.model import SOURCE_OK, SOURCE_PENDING, HostSnapshot, Load, Sources, SourceState, Vm
from nodeconsole.console.resets import ResetReader
from nodeconsole.console.seams import Seams
from nodeconsole.console.sources.types import Hypervisor, LibvirtData, NvmlData, SourceError, SysfsData

SYSFS_FULL_S = 300.0  # the whole sysfs tree is read again at least this often
SYSFS_REFRESH_S = 30.0  # what can change in it without moving a sign (sysfs.refresh_sysfs), this often
STEAL_EVERY_S = 5.0  # how often the vCPU threads' wait time is read on a live host

if TYPE_CHECKING:  # the sources (and the kernel-log watch) are imported on first use
    from nodeconsole.console.event_watch import EventWatch
    from nodeconsole.console.events import KernelEvent
    from nodeconsole.console.guest_watch import GuestWatch
    from nodeconsole.console.sources.load import LoadReader
    from nodeconsole.console.sources.nvml import NvmlSource
    from nodeconsole.console.sources.pressure import VcpuWaitReader
    from nodeconsole.console.sources.sysfs_root import SysfsRoot
    from nodeconsole.console.vms.backend import VmReader

T = TypeVar("T")



def describe_error(exc: BaseException) -> str:
    """A one-line reason an admin can act on."""
    if isinstance(exc, PermissionError):
        return f"permission denied ({exc.filename or exc}); run as root or check access"
    if isinstance(exc, OSError) and exc.errno == errno.ENOENT:
        return f"missing {exc.filename}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, SourceError):
        return text
    return f"{type(exc).__name__}: {text}"


class Collector:
    """Reads the host through `seams` and returns a HostSnapshot per `collect()`."""

    def __init__(self, seams: Seams, sysfs_ttl: float = 5.0, sysfs_full: float = SYSFS_FULL_S,
                 sysfs_refresh: float = SYSFS_REFRESH_S) -> None:
        self.seams = seams
        # every `sysfs_ttl` seconds the cheap signs of a change are read (the PCI functions present, their
        # drivers, mdev devices, online and present CPUs, the GPUs' links); the whole tree is read again
        # when one moved and every `sysfs_full` seconds; every `sysfs_refresh` seconds, the signs still,
        # what can change without moving them (host name, node memory, links, NICs, vGPU)
        self.sysfs_ttl = sysfs_ttl
        self.sysfs_full = sysfs_full
        self.sysfs_refresh = sysfs_refresh
        self._sysfs: SysfsData | None = None
        self._boot_id: str | None = None  # the boot the cached sysfs facts were read in (Seams.boot_id)
        self._invalidations = 0  # invalidate() calls so far
        self._sysfs_at = 0.0
        self._refresh_at = 0.0
        self._sign_at = 0.0
        self._sign: tuple | None = None
        self._sign_root: SysfsRoot | None = None  # see _fs_root
        self._nvml: NvmlSource | None = None
        self._libvirt: VmReader | None = None  # the VM backend's reader (libvirt's LibvirtSource)
        self._load: LoadReader | None = None
        self._waits: VcpuWaitReader | None = None
        # vCPU steal reads every vCPU thread's schedstat (thousands of files on a full host): on its own
        # slower cadence, the values kept in between
        self._steal_at = float("-inf")
        self._steal_of: dict[str, float | None] = {}
        # name → (the source's record, its steal, the record with it): an unchanged VM with an unchanged
        # steal is handed on as the very same record
        self._stolen: dict[str, tuple[Vm, float | None, Vm]] = {}
        self._nvml_reinit_at = -1e9
        self._names: dict[str, str] = {}
        self._derived = Derived()  # what the last snapshot derived from parts that rarely change
        self._lock = threading.Lock()
        # Fault injection for tests and the demo ("kill the source mid-run"): name → reason; a replay
        # starts with the sources its capture could not read (Seams.unavailable)
        self.disabled: dict[str, str] = dict(seams.unavailable)
        # GPU events from the kernel log, read incrementally at each full poll (console/event_watch.py),
        # tied to the VMs and handed on in each snapshot (made at the first full poll: the first,
        # sysfs-only look at the host does not need it)
        self._watch: EventWatch | None = None
        self._watch_lock = threading.Lock()
        self._health = HealthBook()
        self.guests: GuestWatch | None = None  # the guests' GPU events (console/guest_watch.py)
        self.guest_wait_s = 0.0  # how long a poll waits for the guests' answers (a one-shot command's)
        self.read_guests = seams.guest_agent is not None
        self._drains = DrainReader()  # the admin's drain marks (console/drains.py), on every snapshot
        self._resets = ResetReader(host_audit(seams))  # recorded GPU resets start a GPU's event window

    def invalidate(self) -> None:
        """Forget cached static facts (after an action changed the host). Called from an action's
        thread: a poll reading sysfs meanwhile does not keep what it read."""
        self._invalidations += 1
        self._sysfs = None
        if self._libvirt is not None:
            # the test driver re-reads its node file only on open: reconnect for the next poll
            self._libvirt.invalidate()
            self._libvirt.close()
        if self._nvml is not None:
            self._nvml.invalidate()  # re-initialise: the set of GPUs NVML sees may have changed

    def close(self) -> None:
        """Release the sources (NVML shut down, libvirt connection closed)."""
        if self._watch is not None:
            self._watch.close()
        if self._nvml is not None:
            self._nvml.close()
        if self._libvirt is not None:
            self._libvirt.close()

    # -- sources ---------------------------------------------------------------------------------
    def _read_sysfs(self) -> SysfsData:
        now = time.monotonic()
        invalidations = self._invalidations  # an action's invalidate() during this read wins over it
        boot = self.seams.boot_id()
        if boot != self._boot_id:  # a reboot: the static facts (command line, IOMMU, modules) are new
            self._sysfs = None
            self._sign_root = None
            self._load = None  # per-CPU times start again from zero
        cached = self._sysfs
        stale = cached is None or now - self._sysfs_at > self.sysfs_full
        refresh = now - self._refresh_at > self.sysfs_refresh
        if cached is not None and not stale and (refresh or now - self._sign_at > self.sysfs_ttl):
            self._sign_at = now
            stale = self._signs(cached) != self._sign
        if stale or cached is None:
            from nodeconsole.console.sources.sysfs import read_sysfs

            data = read_sysfs(self.seams.root, self.seams.pci_ids)
            self._sysfs_at = self._sign_at = self._refresh_at = now
            self._sign = self._signs(data)
        elif refresh:  # the signs just read are still: the rest of the tree is as last read
            from nodeconsole.console.sources.sysfs import refresh_sysfs

            data = refresh_sysfs(self.seams.root, self.seams.pci_ids, cached)
            self._refresh_at = now
        else:
            data = cached
        if self._invalidations == invalidations:
            self._sysfs = data
            self._boot_id = boot
        return data

    def _signs(self, data: SysfsData | None) -> tuple:
        """What moves when the host's PCI picture changes: the functions present (hot-plug, VFs), each
        one's driver (a bind or unbind made elsewhere), the GPUs' driver_override and link width and
        speed (a link that downtrains), the vGPU type of each NVIDIA VF (SR-IOV vGPU adds no mdev), the
        mdev devices, the online and present CPUs. A few milliseconds, against ~20 ms for the whole tree of the demo
        host; the console's own changes invalidate the cache outright."""
        root = self._fs_root()
        base = "sys/bus/pci/devices"
        present = tuple(root.listdir(base))
        drivers = tuple(root.readlink(f"{base}/{a}/driver") for a in present)
        devices = data.pci_devices if data else ()
        gpus = tuple((root.read(f"{base}/{d.address}/current_link_width"),
                      root.read(f"{base}/{d.address}/current_link_speed"),
                      root.read(f"{base}/{d.address}/driver_override"))
                     for d in devices if is_gpu(d))
        vgpus = tuple(root.read(f"{base}/{d.address}/nvidia/current_vgpu_type")
                      for d in devices if d.vendor_id == NVIDIA and d.physfn)
        return (present, drivers, gpus, vgpus, tuple(root.listdir("sys/bus/mdev/devices")),
                root.read("sys/devices/system/cpu/online"), root.read("sys/devices/system/cpu/present"))

    def _fs_root(self) -> SysfsRoot:
        """The root as the sysfs source reads it (through the collection pass's resolved directories):
        for the signs, the load and the nodes' memory, read every few seconds or every poll."""
        if self._sign_root is None:
            from nodeconsole.console.sources.sysfs_root import SysfsRoot

            self._sign_root = SysfsRoot(self.seams.root)
        return self._sign_root

    def _read_nvml(self) -> NvmlData:
        if not self.seams.use_real_nvml and self.seams.nvml_lib is None:
            raise SourceError("not read for a captured tree")
        if self._nvml is None:
            from nodeconsole.console.sources.nvml import NvmlSource

            self._nvml = NvmlSource(self.seams.nvml_lib)
        return self._nvml.read()

    @property
    def libvirt_version(self) -> str:
        """libvirt's version on the source's connection ("" before the first poll reached libvirt)."""
        return self._libvirt.version if self._libvirt is not None else ""

    @property
    def hypervisor(self) -> Hypervisor | None:
        """What the VM source's connection says of itself (None before one, or for a backend that does not
        say): the doctor's libvirtd check names it."""
        return getattr(self._libvirt, "hypervisor", None) if self._libvirt is not None else None

    def _read_libvirt(self) -> LibvirtData:
        if self._libvirt is None:
            backend = self.seams.open_vm_backend()
            if backend is None:
                raise SourceError("no libvirt URI for a captured tree (use --libvirt URI)")
            self._libvirt = backend.reader()  # the VM backend's reader, kept: it caches between polls
        data = self._libvirt.poll()
        model = self.seams.vm_load
        if model is not None:
            now = time.time()
            data = LibvirtData(tuple(with_fields(v, cpu_percent=model(v.name, v.state, v.vcpus, now)) for v in data.vms))
        return LibvirtData(self._steal(data.vms))

    def _steal(self, vms: tuple[Vm, ...]) -> tuple[Vm, ...]:
        """Each running VM's vCPU steal: the demo's model, else its vCPU threads' schedstat."""
        if self.seams.vm_steal is not None:
            now = time.time()
            model = self.seams.vm_steal
            return tuple(with_fields(v, steal_percent=model(v, now)) for v in vms)
        if self.seams.replay is not None:
            return vms  # a capture has no live threads to measure
        if self._waits is None:
            from nodeconsole.console.sources.pressure import VcpuWaitReader

            self._waits = VcpuWaitReader(self.seams.root)
        now = time.monotonic()
        if now - self._steal_at >= STEAL_EVERY_S:
            try:
                self._steal_of = self._waits.steal_all(vms)
            except OSError:
                return vms
            self._steal_at = now
        steal, kept = self._steal_of, self._stolen
        out = []
        stolen: dict[str, tuple[Vm, float | None, Vm]] = {}
        for v in vms:
            s = steal.get(v.name)
            if s is v.steal_percent:
                out.append(v)
                continue
            hit = kept.get(v.name)
            with_steal = hit[2] if hit is not None and hit[0] is v and hit[1] is s else with_fields(v, steal_percent=s)
            stolen[v.name] = (v, s, with_steal)
            out.append(with_steal)
        self._stolen = stolen
        return tuple(out)

    def _read_load(self) -> Load:
        # A stateful reader: per-CPU load is a delta between this call and the previous one.
        if self._load is None:
            from nodeconsole.console.sources.load import LoadReader

            self._load = LoadReader(self._fs_root())
        load = self._load.read()
        from nodeconsole.console.sources.pressure import read_node_memory

        return replace(load, nodes=read_node_memory(self._fs_root()))

    def _guard(self, name: str, fn: Callable[[], T]) -> tuple[T | None, SourceState]:
        if name in self.disabled:
            return None, SourceState.unavailable(self.disabled[name])
        try:
            return fn(), SOURCE_OK
        except Exception as exc:
            return None, SourceState.unavailable(describe_error(exc))

    # -- assembly ---------------------------------------------------------------------------------
    def collect(self, partial: bool = False) -> HostSnapshot:
        """One snapshot. `partial` reads sysfs alone (GPUs, topology, IOMMU) and marks the other
        sources pending: the console shows that first, while NVML and libvirt open."""
        with self._lock, self.seams.root.one_pass():
            sysfs, s_sysfs = self._guard("sysfs", self._read_sysfs)
            if partial:
                nvml = virt = load = None
                s_nvml = s_virt = s_load = SOURCE_PENDING
            else:
                nvml, s_nvml = self._guard("nvml", self._read_nvml)
                virt, s_virt = self._guard("libvirt", self._read_libvirt)
                load, s_load = self._guard("psutil", self._read_load)
        if sysfs is not None and nvml is not None:
            nvml = self._reconcile(sysfs, nvml)
        if load is not None and sysfs is not None:
            load = self._node_cpu(load, sysfs, virt)
        sources = Sources(sysfs=s_sysfs, nvml=s_nvml, libvirt=s_virt, psutil=s_load)
        if nvml is not None:  # remember NVML's names: a GPU keeps its name after going to vfio-pci
            self._names.update({g.address: g.name for g in nvml.gpus if g.name})
        return assemble(sysfs, nvml, virt, load, sources, known_names=self._names, derived=self._derived,
                        marks=self._drained if partial else self._marks)

    @property
    def watch(self) -> EventWatch:
        with self._watch_lock:
            if self._watch is None:
                from nodeconsole.console.event_watch import EventWatch

                self._watch = EventWatch()
            return self._watch

    def _drained(self, facts: HostSnapshot) -> Marks:
        """Each GPU with the admin's drain mark (console/drains.py), read on every snapshot."""
        return Marks(self._drains.mark_gpus(self.seams.root, facts.gpus))

    def _marks(self, facts: HostSnapshot) -> Marks:
        """The drains, and the kernel log's new events read (cheap: from where the last poll stopped), tied
        to this snapshot's VMs and put on their GPUs, with each GPU's health verdict (console/health.py);
        an unhealthy GPU adds a problem."""
        from nodeconsole.console.event_watch import event_problems, events_by_gpu

        gpus = self._drains.mark_gpus(self.seams.root, facts.gpus)
        self.watch.note_sources(dict(facts.sources.items()))
        now = self.seams.clock()
        self.watch.poll(self.seams.root, self.seams.live_kernel_log, now)
        events = self._guest_events(facts, self.watch.tied(facts))
        self._health.note_recorded(self._resets.read())
        gpus = self._health.judge_all(gpus, events_by_gpu(events, facts), self.watch.btime, now)
        return Marks(gpus, events, tuple(self.watch.sources), self.watch.error, tuple(event_problems(gpus, facts)))

    def _guest_events(self, snap: HostSnapshot, host: tuple[KernelEvent, ...]) -> tuple[KernelEvent, ...]:
        """The host's events and the guests' (asked at most every minute per VM, on threads of their own)."""
        if not self.read_guests or self.seams.guest_agent is None:
            return host
        from nodeconsole.console.guest_watch import GuestWatch, by_time

        self.guests = self.guests or GuestWatch(self.seams.guest_agent)
        self.guests.poll(snap, self.guest_wait_s)
        return by_time(host, self.guests.events)

    def _node_cpu(self, load: Load, sysfs: SysfsData, virt: LibvirtData | None) -> Load:
        """CPU use per NUMA node (the demo's CPU load first made of its VMs' load)."""
        from nodeconsole.console.sources.pressure import node_cpu_percent

        if self.seams.cpu_load is not None and virt is not None:
            load = replace(load, cpu_percent=self.seams.cpu_load(sysfs.cpus, virt.vms))
        return replace(load, nodes=node_cpu_percent(load.nodes, sysfs.cpus, load.cpu_percent))

    def _reconcile(self, sysfs: SysfsData, nvml: NvmlData) -> NvmlData:
        """NVML keeps the GPU list of its last init: a GPU rebound since (by an action, or by hand)
        is missing from it, or answers through a stale handle as if lost. Drop what sysfs shows is
        no longer NVML's, and re-initialise NVML (at most every 5 s) so it sees the change."""
        drivers = {d.address: d.driver for d in sysfs.pci_devices if is_gpu(d)}
        stale = {g.address for g in nvml.gpus if drivers.get(g.address, "nvidia") != "nvidia"}
        seen = {g.address for g in nvml.gpus}
        missing = [a for a, drv in drivers.items() if drv == "nvidia" and a not in seen]
        if (stale or missing) and self._nvml is not None:
            now = time.monotonic()
            if now - self._nvml_reinit_at > 5.0:
                self._nvml_reinit_at = now
                self._nvml.invalidate()
        if not stale:
            return nvml
        return NvmlData(nvml.driver_version, tuple(g for g in nvml.gpus if g.address not in stale))
