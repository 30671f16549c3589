"""Where a training VM should go (`nodeconsole place`, and the sizing `prepare` plans with). Pure: a
HostSnapshot and reads of sysfs counts (hugepages) and the host's kept CPUs through the root seam.

`place` picks the best set of N GPUs (actions/placement_sets.py: candidates, ranking, the VF beside each
GPU), then sizes the VM on the GPUs' NUMA node(s): vCPUs floor(0.7 × (online CPUs − the host's kept
CPUs)), never on CPUs other defined VMs are pinned to (actions/pin_planner.py assigns them, sibling
threads together), emulator threads on the host's kept cores there, memory `memory_factor` × the set's
VRAM in whole pages, and the hugepages that needs on each node against what is free. With no set, or a
size that does not fit, the Placement's `refusal` says what stands in the way.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from nodeconsole.actions.placement_sets import (
    TOGETHER,
    Configs,
    Host,
    Scored,
    candidate_sets,
    gpu_blockers,
    score,
    worse,
)
from nodeconsole.actions.placement_size import EMPTY_PAGES, HugepageNeed, Sizing, size_cpus, size_memory
from nodeconsole.actions.plan import RequestError
from nodeconsole.actions.targets import group_members, resolve_gpu, resolve_vm
from nodeconsole.console.gpu_events import DEGRADED
from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import Gpu, HostSnapshot
from nodeconsole.console.root import Root

__all__ = ["Alternative", "HugepageNeed", "Placement", "PlacementError", "gpu_blockers", "place"]
ALTERNATIVES = 3


class PlacementError(RequestError):
    """Bad input to `place`: an unknown GPU or VM, a negative count, a factor that is not positive."""


@dataclass(frozen=True)
class Alternative:
    gpus: tuple[str, ...]
    worse: str


@dataclass(frozen=True)
class Placement:
    gpus: tuple[str, ...]  # GPU PCI addresses, in the order they'll be given
    nics: tuple[str, ...]  # with_nic: one VF address per GPU, same order ("" none found)
    nodes: tuple[int, ...]
    vcpus: int
    cpus: tuple[int, ...]  # host CPU for vCPU i (sibling threads adjacent)
    threads_per_core: int  # 2 when cpus are sibling pairs, else 1
    emulator: tuple[int, ...]  # the host's kept cores on those nodes
    memory_kib: int
    hugepages: HugepageNeed
    reasons: tuple[str, ...]
    alternatives: tuple[Alternative, ...]
    refusal: str = ""  # non-empty: no placement; says what stands in the way
    nic_notes: tuple[str, ...] = ()
    group_moves: tuple[str, ...] = ()  # other functions of the GPUs' IOMMU groups (go along)
    blocked: tuple[tuple[str, tuple[str, ...]], ...] = ()  # with no set: each GPU not free → why

    @property
    def ok(self) -> bool:
        return not self.refusal

    def to_dict(self) -> dict[str, Any]:
        """The `place --json` object (with `refusal` when there is no placement)."""
        out: dict[str, Any] = {
            "gpus": list(self.gpus), "nics": list(self.nics), "nodes": list(self.nodes), "vcpus": self.vcpus,
            "cpus": list(self.cpus), "memory_kib": self.memory_kib,
            "hugepages": {"size_kib": self.hugepages.size_kib,
                          "per_node": {str(n): p for n, p in sorted(self.hugepages.per_node.items())},
                          "free": {str(n): p for n, p in sorted(self.hugepages.free.items())}},
            "reasons": list(self.reasons),
            "alternatives": [{"gpus": list(a.gpus), "worse": a.worse} for a in self.alternatives]}
        if self.refusal:
            out["refusal"] = self.refusal
        return out



def refused(why: str, gpus: Sequence[str] = (), blocked: Sequence[tuple[str, tuple[str, ...]]] = ()) -> Placement:
    return Placement(tuple(gpus), (), (), 0, (), 1, (), 0, EMPTY_PAGES, (), (), refusal=why, blocked=tuple(blocked))


def place(snap: HostSnapshot, root: Root, count: int, *, with_nic: bool = False, vm: str | None = None,
          memory_factor: float = 2.0, memory_kib: int | None = None, vcpus: int | None = None,
          hugepage_kib: int | None = None, gpus: Sequence[str] | None = None,
          configs: Configs | None = None) -> Placement:
    """The best set of `count` GPUs for a training VM (`vm`'s own GPUs count as free) and its size.
    `gpus`: an explicit list (console index, address or UUID), validated rather than searched; its length
    is the count. `hugepage_kib`: None picks 1 GiB pages where the host offers them, else 2 MiB; 0: none.
    `configs`: VM → the PCI addresses its persistent definition holds (actions/targets.vms_with), where
    that differs from the snapshot's (a running VM's live definition). PlacementError for bad input."""
    _check_input(count, memory_factor, memory_kib, vcpus, hugepage_kib)
    if vm is not None:
        try:
            resolve_vm(snap, vm)
        except RequestError as e:
            raise PlacementError(str(e)) from None
    listed = _listed(snap, gpus) if gpus is not None else None
    if listed is not None:
        count = len(listed)
    free = [g for g in snap.gpus if not gpu_blockers(snap, g, vm, configs)]
    host = Host.of(snap, free, vm, configs)
    chosen: Scored | None = None
    ranked: list[Scored] = []
    if listed is not None:
        blocked = [(g, b) for g in listed if (b := gpu_blockers(snap, g, vm, configs))]
        if blocked:
            return refused("; ".join(f"{_label(g)} {'; '.join(b)}" for g, b in blocked), [g.address for g in listed],
                           [(_label(g), tuple(b)) for g, b in blocked])
        chosen = score(host, tuple(listed), with_nic)
        reasons = [f"the GPUs named: {', '.join(_label(g) for g in listed)}"]
    elif count == 0:
        reasons = ["no GPU asked for"]
    else:
        ranked = candidate_sets(host, count, with_nic, ALTERNATIVES)
        if not ranked:
            return _none_fits(snap, count, free, vm, configs)
        chosen, reasons = ranked[0], []
    return _sized(snap, root, host, chosen, ranked[1:1 + ALTERNATIVES],
                  Sizing(vm, memory_factor, memory_kib, vcpus, hugepage_kib), reasons)


def _check_input(count: int, factor: float, memory_kib: int | None, vcpus: int | None,
                 hugepage_kib: int | None) -> None:
    if count < 0:
        raise PlacementError(f"a GPU count is 0 or more, not {count}")
    if not math.isfinite(factor) or factor <= 0:
        raise PlacementError(f"the memory factor must be a positive number, not {factor}")
    if memory_kib is not None and memory_kib <= 0:
        raise PlacementError(f"memory must be positive, not {memory_kib} KiB")
    if vcpus is not None and vcpus < 1:
        raise PlacementError(f"a VM needs at least one vCPU, not {vcpus}")
    if hugepage_kib is not None and hugepage_kib < 0:
        raise PlacementError(f"a hugepage size is 0 (none) or a size in KiB, not {hugepage_kib}")


def _listed(snap: HostSnapshot, names: Sequence[str]) -> list[Gpu]:
    out: list[Gpu] = []
    for text in names:
        try:
            g = resolve_gpu(snap, text)
        except RequestError as e:
            raise PlacementError(str(e)) from None
        if g in out:
            raise PlacementError(f"GPU {g.index} ({g.address}) is named twice")
        out.append(g)
    return out


def _label(g: Gpu) -> str:
    return f"GPU {g.index} ({g.address})"


def _none_fits(snap: HostSnapshot, count: int, free: list[Gpu], vm: str | None, configs: Configs | None) -> Placement:
    """No set of `count` GPUs: how many are free, and what holds each of the others."""
    blocked = [(_label(g), tuple(gpu_blockers(snap, g, vm, configs))) for g in snap.gpus if g not in free]
    if count > len(snap.gpus):
        return refused(f"{count} GPUs asked for; this host has {len(snap.gpus)}", blocked=blocked)
    head = (f"{count} GPUs asked for; {len(free)} free" +
            (f" ({', '.join(_label(g) for g in free)})" if free else ""))
    others = [f"{label}: {'; '.join(why)}" for label, why in blocked]
    return refused(head + (". The others: " + " | ".join(others) if others else ""), blocked=blocked)


def _why(best: Scored) -> list[str]:
    out = []
    if len(best.gpus) > 1:
        out.append("one NVLink domain (every pair joined by NVLink)" if best.nvlink else "no NVLink joins them")
        out.append(TOGETHER.get(best.level, best.level))
    out.append(f"NUMA node {', '.join(map(str, best.nodes))}" if best.nodes else "NUMA node unknown")
    if best.nics is not None:
        pix = sum(lv == "PIX" for lv in best.nics.levels)
        out.append(f"a free VF at PIX for {pix} of {len(best.gpus)} GPU(s)")
    unseen = [g.address for g in best.gpus if not g.nvlinks_read]
    if unseen and len(best.gpus) > 1:
        out.append(f"NVLink not known for {', '.join(unseen)}: NVML does not see a GPU on vfio-pci or unbound")
    out += [f"GPU {g.index} ({g.address}) is degraded: {'; '.join(g.health.reasons)}" for g in best.gpus
            if g.health.state == DEGRADED]
    return out


def _nic_notes(best: Scored) -> list[str]:
    if best.nics is None:
        return []
    out = []
    for g, vf, lv in zip(best.gpus, best.nics.vfs, best.nics.levels):
        if not vf:
            out.append(f"no free VF left for GPU {g.index} ({g.address})")
        elif lv != "PIX":
            out.append(f"VF {vf} is not at PIX for GPU {g.index} ({g.address}) (nearest: {lv})")
    return out


def _sized(snap: HostSnapshot, root: Root, host: Host, best: Scored | None, runners: list[Scored],
           sizing: Sizing, reasons: list[str]) -> Placement:
    gpus = best.gpus if best is not None else ()
    why = reasons + (_why(best) if best is not None else [])
    moves = tuple(sorted({a for g in gpus for a in group_members(snap, g) if a != g.address}))
    if moves:
        why.append("their IOMMU groups move with them: " + ", ".join(moves))
    cpus = size_cpus(snap, root, gpus, sizing, why)
    base = Placement(tuple(g.address for g in gpus), best.nics.vfs if best is not None and best.nics else (),
                     cpus.nodes, len(cpus.cpus), cpus.cpus, cpus.threads, cpus.emulator, 0, EMPTY_PAGES,
                     (), tuple(Alternative(tuple(g.address for g in s.gpus), worse(best, s))
                               for s in runners if best is not None),
                     nic_notes=tuple(_nic_notes(best)) if best is not None else (), group_moves=moves)
    if cpus.refusal:
        return replace(base, reasons=tuple(visible(r) for r in why), refusal=cpus.refusal)
    memory = size_memory(snap, root, gpus, cpus.nodes, sizing, why)
    return replace(base, memory_kib=memory.memory_kib, hugepages=memory.pages, reasons=tuple(visible(r) for r in why),
                   refusal=memory.refusal)
