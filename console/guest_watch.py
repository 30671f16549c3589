"""GPU events from the guests' kernel logs: the Xids a guest's driver logs for a GPU passed through to it.

Which VMs are asked: the running ones holding a whole GPU (a PCI hostdev on the GPU's card, not an
SR-IOV VF, whose guest driver logs the vGPU's own events). Each is asked through the guest-agent seam
(`Seams.guest_agent`: console/sources/guest_agent.py over libvirt, the demo's simulated agent) at most
once every EVERY_S seconds, each read on a thread of its own: the collector's poll never waits for an
agent (unless told to, for a one-shot command, and then at most `wait_s`). The answer is parsed by the
kernel-log parser (console/sources/kernel_log.py) and each event's guest PCI address is mapped to the
host GPU through the hostdevs' guest `<address>` (the functions of one card, the Xid lines' missing
function included); an event on a guest device that is not a passed-through GPU (an emulated one, a
NIC) is dropped. The events become the host GPU's, with `source` "guest" and the VM in `vms`.

A VM whose log cannot be read keeps the events of its last good read (a guest hung by the very Xid
it logged does not answer) and gets a note: "guest log unavailable: reason". A VM no longer asked (shut
down, GPU given back) keeps its events and loses its note.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from nodeconsole.console.event_time import on_wall_clock
from nodeconsole.console.gpu_events import GUEST_LOG, KernelEvent
from nodeconsole.console.model import HostSnapshot, PciDevice
from nodeconsole.console.sources.guest_agent import TIMEOUT_S, GuestAgent, GuestLogUnavailable
from nodeconsole.console.sources.kernel_log import KernelLog

EVERY_S = 60.0  # a VM's guest log is read at most this often
WAIT_S = TIMEOUT_S + 1.0  # how long a one-shot command waits for the guests (they are asked at once)
KEEP = 200  # the newest events kept per VM
ANY = "*"  # a VM holding one GPU without guest addresses: its guest's GPU events are that GPU's


def _slot(address: str) -> str:
    return address.rsplit(".", 1)[0]


def vf_addresses(snap: HostSnapshot) -> frozenset[str]:
    return frozenset(d.address for d in snap.pci_devices if d.physfn)


def guest_targets(snap: HostSnapshot, vfs: frozenset[str] | None = None) -> dict[str, dict[str, str]]:
    """The running VMs holding a whole GPU: VM → {guest PCI address (and its slot) → host GPU}. `vfs`:
    the snapshot's SR-IOV VFs (vf_addresses), when known."""
    out: dict[str, dict[str, str]] = {}
    for v in snap.vms:
        if v.state != "running" or not v.hostdevs:
            continue
        held: dict[str, str] = {}
        gpus = set()
        for h in v.hostdevs:
            if h.type != "pci" or not h.gpu or not h.address or _slot(h.address) != _slot(h.gpu):
                continue
            if vfs is None:
                vfs = vf_addresses(snap)
            if h.address in vfs:
                continue
            gpus.add(h.gpu)
            if h.guest_address:
                held[h.guest_address] = h.gpu
                held.setdefault(_slot(h.guest_address), h.gpu)
        if gpus and not held and len(gpus) == 1:
            held[ANY] = gpus.pop()
        if held:
            out[v.name] = held
    return out


def map_events(events: list[KernelEvent], gpu_of: Mapping[str, str], vm: str) -> list[KernelEvent]:
    """The guest's events on passed-through GPUs, as events of the host GPUs (see the module doc)."""
    out = []
    for ev in events:
        host = gpu_of.get(ev.gpu) or gpu_of.get(_slot(ev.gpu)) or gpu_of.get(ANY)
        if host is not None:
            out.append(replace(ev, gpu=host, port=None, vms=(vm,), source=GUEST_LOG))
    return out


def parse_guest_log(data: bytes, gpu_of: Mapping[str, str], vm: str, now: float) -> list[KernelEvent]:
    """A guest's log text → its GPU events on the host GPUs, on the wall clock where the log dates them
    (journalctl -o short-iso, dmesg --time-format iso); seconds since the guest's boot stay uptimes."""
    events = KernelLog().text(data)
    return map_events(on_wall_clock(events, None, now), gpu_of, vm)


def by_time(*groups: tuple[KernelEvent, ...]) -> tuple[KernelEvent, ...]:
    """Several event lists as one, oldest first: by wall-clock time when every event has one, else one
    list after the other (each keeps its own order)."""
    nonempty = [g for g in groups if g]
    if len(nonempty) <= 1:
        return nonempty[0] if nonempty else ()
    every = [ev for g in nonempty for ev in g]
    if all(ev.wall is not None for ev in every):
        every.sort(key=lambda ev: ev.wall or 0.0)
    return tuple(every)


class GuestWatch:
    """The guests' GPU events for one poller (the collector, a command): `poll(snap)` asks the VMs that
    are due (threads of their own), `events` and `notes` are what the answers so far say."""

    def __init__(self, agent: GuestAgent, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.agent = agent
        self.every_s = every_s
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._asked: dict[str, float] = {}  # VM → when it was last asked (clock)
        self._events: dict[str, tuple[KernelEvent, ...]] = {}
        self._reasons: dict[str, str] = {}  # VM → why its last read failed ("" after a good one)
        self._running: dict[str, threading.Thread] = {}
        self._targets: tuple[str, ...] = ()
        self._merged: tuple[KernelEvent, ...] | None = ()
        self._pci: tuple[PciDevice, ...] | None = None
        self._vfs: frozenset[str] = frozenset()

    def poll(self, snap: HostSnapshot, wait_s: float = 0.0) -> None:
        """Ask each VM due (not asked within every_s, no read of it running); with `wait_s`, wait that
        long at most for the reads running to end (a read still going then is noted as unanswered)."""
        if snap.pci_devices is not self._pci:  # the same tuple while the sysfs read is cached
            self._pci, self._vfs = snap.pci_devices, vf_addresses(snap)
        targets = guest_targets(snap, self._vfs)
        now = self.clock()
        with self._lock:
            self._targets = tuple(targets)
            for vm, gpu_of in targets.items():
                if vm in self._running or now - self._asked.get(vm, -1e18) < self.every_s:
                    continue
                self._asked[vm] = now
                t = threading.Thread(target=self._read, args=(vm, gpu_of), name=f"guest-log {vm}", daemon=True)
                self._running[vm] = t
                t.start()
            waiting = [(vm, t) for vm, t in self._running.items() if vm in targets]
        if wait_s <= 0:
            return
        deadline = self.clock() + wait_s
        for _vm, t in waiting:
            t.join(max(0.0, deadline - self.clock()))
        with self._lock:
            for vm, t in waiting:
                if t.is_alive():
                    self._reasons[vm] = f"no answer within {wait_s:g} s"

    def _read(self, vm: str, gpu_of: dict[str, str]) -> None:
        events: tuple[KernelEvent, ...] | None = None
        try:
            data = self.agent.guest_kernel_log(vm)
            events = tuple(parse_guest_log(data, gpu_of, vm, self.wall())[-KEEP:])
            reason = ""
        except GuestLogUnavailable as e:
            reason = e.reason or "no reason given"
        except Exception as e:  # a seam breaking its contract: a note on the VM, never a dead poller
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}".rstrip(": ")
        with self._lock:
            if events is not None and events != self._events.get(vm, ()):
                self._events[vm] = events
                self._merged = None
            self._reasons[vm] = reason
            self._running.pop(vm, None)

    @property
    def events(self) -> tuple[KernelEvent, ...]:
        """Every VM's guest events, oldest first (by wall-clock time where known)."""
        with self._lock:
            if self._merged is None:
                self._merged = by_time(*(self._events[vm] for vm in sorted(self._events)))
            return self._merged

    @property
    def notes(self) -> dict[str, str]:
        """VM → "guest log unavailable: reason", for the VMs asked at the last poll whose read failed."""
        with self._lock:
            return {vm: f"guest log unavailable: {self._reasons[vm]}" for vm in self._targets
                    if self._reasons.get(vm)}
