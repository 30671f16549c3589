"""How much memory a GPU VM should get, within what its NUMA node(s) can hold: the doctor's vm-memory check
(console/doctor/checks_vms.py) and its fix plan (actions/vm_memory_fix.py) size a VM the same way.

A VM should have `factor` × the memory of the GPUs it holds (2–3× is recommended), rounded up to whole
GiB. A VM backed by hugepages can only start when its nodes hold that many pages: the pages free now,
plus the ones it holds itself while it runs (freed when it stops, taken again when it starts), plus what
the node's free memory can still become. When that is less, the size is capped at what fits, and says
why. Pure: a snapshot in, a MemoryTarget out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from nodeconsole.console.model import HostSnapshot, Vm

GIB_KIB = 1048576
KEEP_FREE_KIB = 4 * GIB_KIB  # memory a node keeps free when we turn the rest into hugepages
RESERVING_MODES = ("strict", "restrictive", "interleave")  # numatune modes that keep memory on the nodeset
INACTIVE = ("shut off", "crashed")


@dataclass(frozen=True)
class MemoryTarget:
    """What to give a VM: `size_kib` (== `want_kib` unless `capped` says why not), its hugepage size (None:
    not backed by hugepages), the nodes its memory comes from and the pages to reserve on each beyond
    the free ones."""
    vm: str
    want_kib: int
    size_kib: int
    page_kib: int | None = None
    nodes: tuple[int, ...] = ()
    more_pages: dict[int, int] = field(default_factory=dict)
    capped: str = ""


def memory_nodes(snap: HostSnapshot, vm: Vm) -> tuple[int, ...]:
    """The NUMA nodes a VM's memory comes from: its numatune node set when the mode keeps memory there,
    else every node with memory (spread)."""
    nodes = [n.id for n in snap.numa_nodes if n.online and n.memory_kib > 0]
    if vm.numa_mode in RESERVING_MODES and vm.numa_nodeset:
        chosen = [n for n in vm.numa_nodeset if n in nodes]
        if chosen:
            return tuple(chosen)
    return tuple(nodes)


def page_size(snap: HostSnapshot, vm: Vm) -> int | None:
    """The VM's hugepage size in KiB (its definition's, else the host's default: 1 GiB where the nodes
    have 1 GiB pages reserved, else 2 MiB); None when it is not backed by hugepages."""
    if vm.hugepages_kib is None:
        return None
    if vm.hugepages_kib:
        return vm.hugepages_kib
    sizes = {size for n in snap.numa_nodes for size, nr in n.hugepages if nr}
    return GIB_KIB if GIB_KIB in sizes else 2048


def node_room(snap: HostSnapshot, node: int, page_kib: int) -> tuple[int, int] | None:
    """(free pages of `page_kib` on `node` now, pages its free memory could still become); None when the
    snapshot does not say (no node meminfo)."""
    use = next((u for u in snap.load.nodes if u.node == node), None)
    if use is None or not use.memory_total_kib:
        return None
    free = next((h.free for h in use.hugepages if h.size_kib == page_kib), 0)
    spare = max(0, use.memory_free_kib - KEEP_FREE_KIB) // page_kib
    return free, spare


def memory_target(snap: HostSnapshot, vm: Vm, gpu_kib: int, factor: float) -> MemoryTarget:
    """The size to give `vm`, which holds `gpu_kib` of GPU memory (see the module doc)."""
    want = math.ceil(factor * gpu_kib / GIB_KIB) * GIB_KIB
    page = page_size(snap, vm)
    nodes = memory_nodes(snap, vm)
    if page is None or not nodes:
        return MemoryTarget(vm.name, want, want, page, nodes)
    share = math.ceil(want / len(nodes) / page)
    own = 0 if vm.state in INACTIVE else vm.memory_kib // len(nodes) // page
    have: dict[int, int] = {}
    fits = share
    for n in nodes:
        room = node_room(snap, n, page)
        if room is None:  # unknown: not capped here
            continue
        free, spare = room
        have[n] = free + own
        fits = min(fits, have[n] + spare)
    more = {n: fits - have[n] for n in have if fits > have[n]}
    if fits >= share:
        return MemoryTarget(vm.name, want, want, page, nodes, more)
    size = fits * len(nodes) * page // GIB_KIB * GIB_KIB
    unit = f"{page // GIB_KIB} GiB" if page >= GIB_KIB else f"{page // 1024} MiB"
    why = (f"node(s) {', '.join(map(str, nodes))} can hold only {size // GIB_KIB} GiB of {unit} pages for it (the "
           f"free pages, its own, and free memory less {KEEP_FREE_KIB // GIB_KIB} GiB per node)")
    return MemoryTarget(vm.name, want, size, page, nodes, more, why)
