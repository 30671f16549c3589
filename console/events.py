"""GPU events from the kernel log, and the VM each one concerns.

An event is one Xid (or a "fallen off the bus" message, which counts as Xid 79), one PCIe AER error or
one host failure around passthrough (console/host_failures.py), as console/sources/kernel_log.py reads
it. `tie_to_vms` names the VM holding the event's GPU in a snapshot: the VM whose hostdevs include it
(vfio-pci, a VF), or whose MIG instance or vGPU lives on it.
On a GPU given to a VM the guest's driver logs the Xids: the host's view of that card is AER.

`--since` compares times within the log's own clock (a pasted log is judged by its newest stamp, not
by this machine's time): seconds since boot with seconds since boot, dated stamps with dated stamps.
"""
from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from nodeconsole.console.gpu_events import AER, BOOT, DATE, HOST, JSON_KEYS, SYSLOG, XID, KernelEvent
from nodeconsole.console.model import HostSnapshot

__all__ = ["AER", "BOOT", "DATE", "HOST", "JSON_KEYS", "SYSLOG", "XID", "KernelEvent", "gpu_of", "holders",
           "parse_duration", "tie_to_vms", "within"]

# A syslog stamp later than the log's newest is from the year before. Stamps without a year are counted
# in a leap year (console/sources/kernel_log.py): a whole leap year back keeps Dec 31 before Jan 1 (at
# most a day off, never after the newest).
_YEAR = 366 * 86400


# -- which VM holds a GPU --
def holders(snap: HostSnapshot) -> dict[str, set[str]]:
    """PCI address → the VMs holding it: hostdev addresses (a GPU, its functions, its VFs), and the GPU
    itself for every VM with a hostdev on it, a MIG instance or a vGPU of it."""
    held: dict[str, set[str]] = {}

    def add(address: str | None, vm: str | None) -> None:
        if address and vm:
            held.setdefault(address, set()).add(vm)

    for v in snap.vms:
        for hd in v.hostdevs:
            add(hd.gpu, v.name)
            add(hd.address, v.name)
    for g in snap.gpus:
        for name in g.owner.vms:
            add(g.address, name)
        for mi in g.mig.instances:
            add(g.address, mi.vm)
        for vi in g.vgpu.instances:
            add(g.address, vi.vm)
            if ":" in vi.parent:
                add(vi.parent, vi.vm)
    return held


def gpu_of(ev: KernelEvent, gpus: Collection[str]) -> str:
    """The address whose events `ev` counts among: its own, except a host failure on another function of
    a GPU's slot (its audio or USB function, 0000:41:00.1), which belongs to that GPU (function 0)."""
    if ev.kind != HOST or ev.gpu in gpus:
        return ev.gpu
    first = ev.gpu.rpartition(".")[0] + ".0"
    return first if first in gpus else ev.gpu


def below(snap: HostSnapshot, port: str) -> list[str]:
    """The GPUs whose upstream ports include `port`."""
    by_addr = {d.address: d for d in snap.pci_devices}
    found = []
    for g in snap.gpus:
        dev = by_addr.get(g.address)
        for _ in range(32):  # PCIe trees are a few levels deep; a loop in a damaged tree stops here
            if dev is None or dev.parent is None:
                break
            if dev.parent == port:
                found.append(g.address)
                break
            dev = by_addr.get(dev.parent)
    return found


def tie_to_vms(events: Iterable[KernelEvent], snap: HostSnapshot) -> list[KernelEvent]:
    """The events with `vms` set from the snapshot. An AER event on a port (the log did not name the
    device) goes to the VMs of the GPUs below that port; a host failure on another function of a GPU's slot
    to the VMs holding that GPU."""
    held = holders(snap)
    bridges = {d.address for d in snap.pci_devices if d.is_bridge}
    gpus = {g.address for g in snap.gpus}
    out = []
    for ev in events:
        vms = held.get(ev.gpu, set()) or held.get(gpu_of(ev, gpus), set())
        if not vms and ev.kind == AER and ev.gpu in bridges:
            vms = set().union(*(held.get(g, set()) for g in below(snap, ev.gpu)))
        out.append(replace(ev, vms=tuple(sorted(vms))) if vms else ev)
    return out


# -- --since --
_DURATION = re.compile(r"([0-9]{1,9})([smhdw])", re.ASCII)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> int:
    """`30s`, `10m`, `2h`, `1d`, `1w`, or several joined (`1h30m`) → seconds; ValueError otherwise."""
    t = text.strip()
    pos, total = 0, 0
    while pos < len(t):
        m = _DURATION.match(t, pos)
        if m is None:
            break
        total += int(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if not t or pos != len(t) or total <= 0:
        raise ValueError(f"{text!r} is not a duration (a number and a unit s, m, h, d or w: 30s, 10m, 2h, 1d)")
    return total


def within(events: Iterable[KernelEvent], seconds: float,
           newest: Mapping[str, float]) -> tuple[list[KernelEvent], int]:
    """The events at most `seconds` before the newest stamp of their clock (`newest`: clock → stamp,
    as the reader saw them: the largest for BOOT and DATE, the last for SYSLOG, whose stamps wrap at the
    year's end), and how many had no time (kept: they cannot be judged)."""
    kept, untimed = [], 0
    for ev in events:
        if ev.clock is None or ev.stamp is None:
            kept.append(ev)
            untimed += 1
            continue
        ref = newest.get(ev.clock, ev.stamp)
        stamp = ev.stamp
        if ev.clock == SYSLOG and stamp > ref:
            stamp -= _YEAR
        if ref - stamp <= seconds:
            kept.append(ev)
    return kept, untimed
