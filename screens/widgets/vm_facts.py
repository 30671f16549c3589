"""What a VM's row shows that moves only with the VM's definition or the host's layout (its NUMA
alignment, the GPUs it holds, the CPUs it is pinned to), worked out again only when those change.

A VM table is synced every poll, and the collector hands each VM's record on with only its CPU figures
new: on a host of hundreds of VMs, working these out for every VM every second was most of a sync."""
from __future__ import annotations

from dataclasses import dataclass

from nodeconsole.console.checks import vm_alignment
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.model import HostSnapshot, Vm


@dataclass(frozen=True)
class Facts:
    alignment: str  # vm_alignment(): "aligned", "cross-numa", "unpinned" or ""
    gpus: str  # "GPU0,GPU3": the GPUs its host devices are, by index
    pins: str  # its vCPUs' CPUs as a CPU list, "" when unpinned


def facts_of(snap: HostSnapshot, vm: Vm) -> Facts:
    gpus = sorted({f"GPU{g.index}" for h in vm.hostdevs if h.gpu and (g := snap.gpu(h.gpu)) is not None})
    return Facts(vm_alignment(snap, vm), ",".join(gpus), format_cpulist(c for p in vm.pins for c in p.cpus))


class VmFacts:
    """facts_of() by VM name, kept while the VM's pins and host devices and the host's CPUs and GPUs
    (index, NUMA node) are equal to what they were made from."""

    def __init__(self) -> None:
        self._facts: dict[str, tuple[tuple, Facts]] = {}
        self._snap: HostSnapshot | None = None
        self._host: tuple = ()

    def host(self, snap: HostSnapshot) -> tuple:
        """The host's layout the facts of `snap`'s VMs are made for: the very same tuple while the
        layout is unchanged (a VM record that is itself unchanged then has unchanged facts)."""
        if snap is not self._snap:
            self._snap = snap
            host = (snap.cpus, tuple((g.address, g.index, g.numa_node) for g in snap.gpus))
            if host != self._host:
                self._host = host  # else the old tuple stays: the keys below then compare at once
            if len(self._facts) > 2 * len(snap.vms) + 64:  # VMs gone
                self._facts.clear()
        return self._host

    def __call__(self, snap: HostSnapshot, vm: Vm) -> Facts:
        key = (vm.pins, vm.hostdevs, self.host(snap))
        hit = self._facts.get(vm.name)
        if hit is not None and hit[0] == key:
            return hit[1]
        facts = facts_of(snap, vm)
        self._facts[vm.name] = (key, facts)
        return facts
