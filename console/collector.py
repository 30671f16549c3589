"""Assemble one frozen HostSnapshot from the sources.

Each source is read inside its own guard: an exception becomes `sources.<name> = "unavailable: reason"`
and the rest of the snapshot is still built. Slow, static facts (the sysfs tree) are cached for a few
seconds; fast facts (NVML metrics, VM CPU time, per-CPU load) are read on every call. One Collector is
used by one poller at a time (the app never starts a poll while one runs).
"""
from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from nodeconsole.console.drains import DrainReader
from nodeconsole.console.health import HealthBook
from nodeconsole.console.model import (
    SCHEMA,
    Gpu,
    GpuOwner,
    Hostdev,
    HostInfo,
    HostSnapshot,
    Iommu,
    Load,
    Mig,
    MigInstance,
    PciDevice,
    PciLink,
    Sources,
    Vgpu,
    VgpuInstance,
    VgpuType,
    Vm,
    metric_names,
)
from nodeconsole.console.seams import Seams
from nodeconsole.console.sources.types import LibvirtData, NvmlData, NvmlGpu, SourceError, SysfsData

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

NVIDIA = 0x10DE
PENDING = "pending"  # a source not read yet (only in the console's very first, sysfs-only frame)
VFIO_DRIVERS = ("vfio-pci", "pci-stub")
HOST_GPU_DRIVERS = ("nvidia", "nouveau")


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


def is_gpu(dev: PciDevice) -> bool:
    """NVIDIA display/3D controllers (not their audio functions, not NVSwitches)."""
    return dev.vendor_id == NVIDIA and dev.base_class == 0x03 and dev.physfn is None


def slot_of(address: str) -> str:
    """`dddd:bb:dd.f` → `dddd:bb:dd` (all functions of one card)."""
    return address.rsplit(".", 1)[0]


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
        # tied to the VMs of the latest snapshot; replaced whole, so the UI thread may read them
        # (made at the first full poll: the first, sysfs-only look at the host does not need it)
        self._watch: EventWatch | None = None
        self._watch_lock = threading.Lock()
        self.gpu_events: tuple[KernelEvent, ...] = ()
        self._health = HealthBook()
        self.guests: GuestWatch | None = None  # the guests' GPU events (console/guest_watch.py)
        self.guest_wait_s = 0.0  # how long a poll waits for the guests' answers (a one-shot command's)
        self.read_guests = seams.guest_agent is not None
        self._drains = DrainReader()  # the admin's drain marks (console/drains.py), on every snapshot

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

    def _read_libvirt(self) -> LibvirtData:
        if self.seams.libvirt_uri is None:
            raise SourceError("no libvirt URI for a captured tree (use --libvirt URI)")
        if self._libvirt is None:
            backend = self.seams.open_vm_backend()
            if backend is None:
                raise SourceError("no libvirt URI for a captured tree (use --libvirt URI)")
            self._libvirt = backend.reader()  # the VM backend's reader, kept: it caches between polls
        data = self._libvirt.poll()
        model = self.seams.vm_load
        if model is not None:
            now = time.time()
            data = LibvirtData(tuple(_with(v, cpu_percent=model(v.name, v.state, v.vcpus, now)) for v in data.vms))
        return LibvirtData(self._steal(data.vms))

    def _steal(self, vms: tuple[Vm, ...]) -> tuple[Vm, ...]:
        """Each running VM's vCPU steal: the demo's model, else its vCPU threads' schedstat."""
        if self.seams.vm_steal is not None:
            now = time.time()
            model = self.seams.vm_steal
            return tuple(_with(v, steal_percent=model(v, now)) for v in vms)
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
            with_steal = hit[2] if hit is not None and hit[0] is v and hit[1] is s else _with(v, steal_percent=s)
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

    def _guard(self, name: str, fn: Callable[[], T]) -> tuple[T | None, str]:
        if name in self.disabled:
            return None, f"unavailable: {self.disabled[name]}"
        try:
            return fn(), "ok"
        except Exception as exc:
            return None, f"unavailable: {describe_error(exc)}"

    # -- assembly ---------------------------------------------------------------------------------
    def collect(self, partial: bool = False) -> HostSnapshot:
        """One snapshot. `partial` reads sysfs alone (GPUs, topology, IOMMU) and marks the other
        sources PENDING: the console shows that first, while NVML and libvirt open."""
        with self._lock, self.seams.root.one_pass():
            sysfs, s_sysfs = self._guard("sysfs", self._read_sysfs)
            if partial:
                nvml = virt = load = None
                s_nvml = s_virt = s_load = PENDING
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
        snap = assemble(sysfs, nvml, virt, load, sources, known_names=self._names, derived=self._derived)
        snap = self._drains.mark(self.seams.root, snap)
        return snap if partial else self._with_events(snap)

    @property
    def watch(self) -> EventWatch:
        with self._watch_lock:
            if self._watch is None:
                from nodeconsole.console.event_watch import EventWatch

                self._watch = EventWatch()
            return self._watch

    def _with_events(self, snap: HostSnapshot) -> HostSnapshot:
        """The kernel log's new events read (cheap: from where the last poll stopped), tied to this
        snapshot's VMs and put on their GPUs, with each GPU's health verdict (console/health.py); an
        unhealthy GPU adds a problem."""
        from nodeconsole.console.event_watch import event_problems, events_by_gpu

        self.watch.note_sources(dict(vars(snap.sources)))  # its four fields (asdict copies deeply)
        now = self.seams.clock()
        self.watch.poll(self.seams.root, self.seams.live_kernel_log, now)
        self.gpu_events = self._guest_events(snap, self.watch.tied(snap))
        gpus = self._health.judge_all(snap.gpus, events_by_gpu(self.gpu_events, snap), self.watch.btime, now)
        extra = event_problems(gpus, snap)
        if gpus == snap.gpus and all(a is b for a, b in zip(gpus, snap.gpus)) and not extra:
            return snap
        return replace(snap, gpus=gpus, problems=(*extra, *snap.problems))

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


class Derived:
    """What assembling a snapshot derives from parts that rarely change, kept for the next poll and used
    again while those parts are the same: the PCI index (one sysfs read), each VM's host devices mapped
    to their GPUs (one domain definition, one sysfs read), the NICs and the problems (kept while
    `nics.nic_inputs` / `checks.problem_inputs` are equal, i.e. while only the per-poll figures
    moved). Between their reads the sources hand back the very same objects, so most of these
    comparisons are identity checks. Used by one assemble at a time (`lock`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pci: tuple[PciDevice, ...] | None = None
        self.mdevs: tuple[VgpuInstance, ...] | None = None
        self.vgpu_types: tuple[VgpuType, ...] | None = None
        self.by_addr: dict[str, PciDevice] = {}
        self.gpu_of = _GpuIndex({})
        self.gpu_addrs: set[str] = set()  # the GPUs among the PCI functions
        # sysfs vGPU types and instances by the GPU they live on (directly or through a VF), in order
        self.types_of: dict[str, tuple[VgpuType, ...]] = {}
        self.insts_of: dict[str, tuple[VgpuInstance, ...]] = {}
        # id(a VM's hostdevs) → (those hostdevs, mapped to their GPUs), for the last poll's VMs
        self.hostdevs: dict[int, tuple[tuple[Hostdev, ...], tuple[Hostdev, ...]]] = {}
        self.mapped_vms: dict[str, tuple[Vm, Vm]] = {}  # name → (the source's record, mapped), last poll's
        self._kept: dict[str, tuple[object, object]] = {}

    def index(self, pci: tuple[PciDevice, ...], mdevs: tuple[VgpuInstance, ...],
              vgpu_types: tuple[VgpuType, ...]) -> None:
        """Index the PCI functions and sysfs vGPUs (again only when sysfs was read again)."""
        if pci is self.pci and mdevs is self.mdevs and vgpu_types is self.vgpu_types:
            return
        self.pci, self.mdevs, self.vgpu_types = pci, mdevs, vgpu_types
        self.by_addr = {d.address: d for d in pci}
        self.gpu_of = gpu_of = _GpuIndex(self.by_addr)
        self.gpu_addrs = {d.address for d in pci if is_gpu(d)}
        types: dict[str | None, list[VgpuType]] = {}
        for t in vgpu_types:
            types.setdefault(gpu_of(t.parent), []).append(t)
        insts: dict[str | None, list[VgpuInstance]] = {}
        for i in mdevs:
            insts.setdefault(gpu_of(i.parent), []).append(i)
        self.types_of = {a: tuple(v) for a, v in types.items() if a is not None}
        self.insts_of = {a: tuple(v) for a, v in insts.items() if a is not None}
        self.hostdevs = {}
        self.mapped_vms = {}

    def keep(self, slot: str, key: object, make: Callable[[], T]) -> T:
        """`make()`, or what it made last time for an equal `key`."""
        kept = self._kept.get(slot)
        if kept is not None and kept[0] == key:
            return kept[1]  # type: ignore[return-value]
        value = make()
        self._kept[slot] = (key, value)
        return value


def assemble(sysfs: SysfsData | None, nvml: NvmlData | None, virt: LibvirtData | None,
             load: Load | None, sources: Sources, known_names: dict[str, str] | None = None,
             derived: Derived | None = None) -> HostSnapshot:
    """Pure merge of source data into a snapshot (tested directly). `derived`: what the previous
    snapshot derived (see Derived); without it everything is derived afresh."""
    d = derived if derived is not None else Derived()
    with d.lock:
        return _assemble(sysfs, nvml, virt, load, sources, known_names or {}, d)


def _assemble(sysfs: SysfsData | None, nvml: NvmlData | None, virt: LibvirtData | None,
              load: Load | None, sources: Sources, known_names: dict[str, str], d: Derived) -> HostSnapshot:
    pci = sysfs.pci_devices if sysfs else ()
    d.index(pci, sysfs.vgpu_instances if sysfs else (), sysfs.vgpu_types if sysfs else ())
    vms = virt.vms if virt else ()
    vms = _map_hostdevs(vms, d.gpu_of, d.mdevs or (), d.hostdevs, d.mapped_vms)
    gpus = _merge_gpus(d, nvml, vms, known_names)
    snap = HostSnapshot(
        schema=SCHEMA,
        taken_at=time.time(),
        host=sysfs.host if sysfs else HostInfo(),
        cpus=sysfs.cpus if sysfs else (),
        numa_nodes=sysfs.numa_nodes if sysfs else (),
        pci_devices=pci,
        iommu=sysfs.iommu if sysfs else Iommu(enabled=False),
        gpus=gpus,
        vms=vms,
        load=load or Load(),
        sources=sources,
        nvml_driver_version=nvml.driver_version if nvml else None,
    )
    from nodeconsole.console.checks import find_problems, problem_inputs
    from nodeconsole.console.nics import build_nics, nic_inputs

    net = sysfs.net_functions if sysfs else ()
    nics = d.keep("nics", nic_inputs(snap, net), lambda: build_nics(snap, net))
    snap = replace(snap, nics=nics)
    return replace(snap, problems=d.keep("problems", problem_inputs(snap), lambda: find_problems(snap)))


class _GpuIndex:
    """Which GPU a host PCI function belongs to: the GPU itself, a companion function on the same
    card (audio, USB-C), or an SR-IOV VF of the GPU. Built once per snapshot (lookups are O(1))."""

    def __init__(self, by_addr: dict[str, PciDevice]) -> None:
        self.by_addr = by_addr
        self.slot_gpu = {slot_of(d.address): d.address for d in by_addr.values() if is_gpu(d)}

    def __call__(self, address: str) -> str | None:
        dev = self.by_addr.get(address)
        if dev is not None and dev.physfn:
            parent = self.by_addr.get(dev.physfn)
            return dev.physfn if parent is not None and is_gpu(parent) else None
        return self.slot_gpu.get(slot_of(address))


def _map_hostdevs(vms: Iterable[Vm], gpu_of: _GpuIndex, vgpu_instances: Iterable[VgpuInstance],
                  memo: dict[int, tuple[tuple[Hostdev, ...], tuple[Hostdev, ...]]],
                  mapped_vms: dict[str, tuple[Vm, Vm]] | None = None) -> tuple[Vm, ...]:
    """Each VM's host devices with the GPU each belongs to. `memo` (made with the same `gpu_of` and
    `vgpu_instances`): the last poll's mappings by hostdevs tuple, replaced by this poll's;
    `mapped_vms`: the last poll's records by name (the source's, the mapped one), replaced by this
    poll's."""
    mdev_parent: dict[str, str] | None = None
    out = []
    seen: dict[int, tuple[tuple[Hostdev, ...], tuple[Hostdev, ...]]] = {}
    mapped_vms = {} if mapped_vms is None else mapped_vms
    now_mapped: dict[str, tuple[Vm, Vm]] = {}
    for vm in vms:
        if not vm.hostdevs:  # most VMs of a big host: nothing to map
            out.append(vm)
            continue
        hit = memo.get(id(vm.hostdevs))
        if hit is not None and hit[0] is vm.hostdevs:
            mapped = hit[1]
        else:
            if mdev_parent is None:
                mdev_parent = {v.uuid: v.parent for v in vgpu_instances}
            devs = []
            for h in vm.hostdevs:
                gpu = None
                if h.type == "pci" and h.address:
                    gpu = gpu_of(h.address)
                elif h.type == "mdev" and h.uuid and h.uuid in mdev_parent:
                    gpu = gpu_of(mdev_parent[h.uuid])
                devs.append(replace(h, gpu=gpu) if gpu != h.gpu else h)
            changed = any(a is not b for a, b in zip(devs, vm.hostdevs))
            mapped = tuple(devs) if changed else vm.hostdevs
        seen[id(vm.hostdevs)] = (vm.hostdevs, mapped)
        if mapped is vm.hostdevs:
            out.append(vm)
            continue
        last = mapped_vms.get(vm.name)
        # the same record with the same mapping: the very same mapped record as the last poll's
        vm_mapped = last[1] if last is not None and last[0] is vm and last[1].hostdevs is mapped else \
            _with(vm, hostdevs=mapped)
        now_mapped[vm.name] = (vm, vm_mapped)
        out.append(vm_mapped)
    memo.clear()
    memo.update(seen)
    mapped_vms.clear()
    mapped_vms.update(now_mapped)
    return tuple(out)


def _with(obj: T, **changes: object) -> T:
    """dataclasses.replace for the model's frozen dataclasses (no __post_init__, no slots), without
    running __init__ again: a 500-VM poll replaces a field of every VM, and replace() was a fifth of it."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


def _merge_gpus(d: Derived, nvml: NvmlData | None, vms: Sequence[Vm], known_names: dict[str, str]) -> tuple[Gpu, ...]:
    by_addr = d.by_addr
    nv = {g.address: g for g in (nvml.gpus if nvml else ())}
    addrs = sorted(d.gpu_addrs | set(nv))
    users: dict[str, list[str]] = {}
    mdev_vm: dict[str | None, str] = {}  # the VM holding each mdev, and each PCI function
    vf_vm: dict[str | None, str] = {}
    for vm in vms:
        for h in vm.hostdevs:
            if h.gpu and vm.name not in users.setdefault(h.gpu, []):
                users[h.gpu].append(vm.name)
            if h.type == "mdev":
                mdev_vm[h.uuid] = vm.name
            elif h.type == "pci":
                vf_vm[h.address] = vm.name

    by_uuid: dict[str, str] | None = None

    def vm_by_uuid() -> dict[str, str]:  # VM names by UUID, made when a MIG or NVML vGPU instance asks
        nonlocal by_uuid
        if by_uuid is None:
            by_uuid = {vm.uuid: vm.name for vm in vms if vm.uuid}
        return by_uuid

    gpus = []
    for index, addr in enumerate(addrs):
        dev = by_addr.get(addr)
        n: NvmlGpu | None = nv.get(addr)
        driver = dev.driver if dev else ("nvidia" if n else None)
        # vGPU types/instances from sysfs, attached to the GPU they live on (directly or via a VF)
        types = d.types_of.get(addr, ())
        insts = tuple(_with_vm(i, i.vm or mdev_vm.get(i.uuid) or vf_vm.get(i.uuid)) for i in d.insts_of.get(addr, ()))
        if n is not None:
            types = types or n.vgpu_types
            if not insts and n.vgpu_instances:
                names = vm_by_uuid()
                insts = tuple(_with_vm(i, names.get(i.vm or "", i.vm)) for i in n.vgpu_instances)
        mig = n.mig if n else Mig()
        if mig.instances:
            names = vm_by_uuid()
            mig = replace(mig, instances=tuple(_mig_vm(mi, names) for mi in mig.instances))
        vm_names = list(users.get(addr, []))
        for i in insts:
            if i.vm and i.vm not in vm_names:
                vm_names.append(i.vm)
        for mi in mig.instances:
            if mi.vm and mi.vm not in vm_names:
                vm_names.append(mi.vm)
        kind = _owner_kind(driver, mig, insts)
        name = ((n.name if n else "") or known_names.get(addr) or (dev.device_name if dev else "")
                or "NVIDIA GPU")
        gpu = Gpu(
            address=addr, name=name, uuid=n.uuid if n else None, driver=driver,
            numa_node=dev.numa_node if dev else None, owner=GpuOwner(kind, tuple(vm_names)),
            mig=mig, vgpu=Vgpu(types=types, instances=insts), index=index,
            nvml_index=n.nvml_index if n else None,
            iommu_group=dev.iommu_group if dev else None,
            link=dev.link if dev else PciLink(),
            processes=n.processes if n else (), nvml_error=n.error if n else "",
            **({k: getattr(n, k) for k in _NVML_METRICS} if n else {}),
        )
        gpus.append(gpu)
    return tuple(gpus)


_NVML_METRICS = metric_names()


def _with_vm(inst: VgpuInstance, vm: str | None) -> VgpuInstance:
    return inst if vm == inst.vm else _with(inst, vm=vm)


def _mig_vm(mi: MigInstance, vm_by_uuid: dict[str, str]) -> MigInstance:
    if mi.vm and mi.vm in vm_by_uuid:
        return replace(mi, vm=vm_by_uuid[mi.vm])
    return mi


def _owner_kind(driver: str | None, mig: Mig, insts: tuple[VgpuInstance, ...]) -> str:
    if driver in VFIO_DRIVERS:
        return "vfio"
    if driver is None:
        return "unbound"
    if mig.mode == "enabled":
        return "mig"
    if insts:
        return "vgpu"
    return "host"
