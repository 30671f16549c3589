"""The size of a training VM on its GPUs' NUMA node(s), for actions/placement.py: vCPUs and the host CPUs
they go to (actions/pin_planner.py's topology, host reserve, other VMs' pins and core assignment),
emulator CPUs, memory in whole pages and the hugepages that needs on each node against what is free.
Pure: the snapshot, and reads through the root seam (kept CPUs, sysfs hugepage counts)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from nodeconsole.actions.pin_planner import (
    Busy,
    PinRequest,
    Topology,
    _assign,
    _split,
    busy_of,
    default_reserve,
    topology_of,
    vram_of,
)
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.doctor.checks_memory import kept_host_cpus
from nodeconsole.console.model import Gpu, HostSnapshot
from nodeconsole.console.root import Root
from nodeconsole.console.vm_sizing import INACTIVE, KEEP_FREE_KIB, memory_nodes
from nodeconsole.console.vm_sizing import page_size as vm_page_size

VCPU_SHARE_TENTHS = 7  # vCPUs: 70 % of the nodes' online CPUs the host does not keep
GIB = 1048576
HUGEPAGES = "sys/kernel/mm/hugepages/hugepages-{}kB"
NODE_HUGEPAGES = "sys/devices/system/node/node{}/hugepages/hugepages-{}kB/{}"


@dataclass(frozen=True)
class Sizing:
    """What the caller asked for: None where the placement decides."""
    vm: str | None
    factor: float
    memory_kib: int | None
    vcpus: int | None
    hugepage_kib: int | None


@dataclass(frozen=True)
class CpuSize:
    nodes: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    threads: int = 1
    emulator: tuple[int, ...] = ()
    refusal: str = ""


@dataclass(frozen=True)
class HugepageNeed:
    size_kib: int  # 0: not backed by hugepages
    per_node: dict[int, int]  # node → pages the VM needs there
    free: dict[int, int]  # node → free pages of that size now
    reserved: dict[int, int]  # node → pages reserved now (nr_hugepages)


EMPTY_PAGES = HugepageNeed(0, {}, {}, {})


@dataclass(frozen=True)
class MemSize:
    memory_kib: int = 0
    pages: HugepageNeed = EMPTY_PAGES
    refusal: str = ""


@dataclass
class _Cpus:
    topo: Topology
    reserve: set[int]
    how: str
    busy: Busy
    free: dict[int, list[int]] = field(default_factory=dict)

    def pinned(self, nodes: tuple[int, ...]) -> str:
        """'pinned to VMs a (running, CPU 4-5) and b (shut off, CPU 6)' for the CPUs of `nodes`, or ''."""
        held = self.busy.of(c for n in nodes for c in self.topo.node_cpus(n) if c in self.busy.cpus)
        return f"the others are pinned to {self.busy.who(held, held)}" if held else ""

    def whole_cores(self, nodes: tuple[int, ...]) -> int:
        free = {c for n in nodes for c in self.free[n]}
        return sum(1 for n in nodes for core in self.topo.cores(n) if len(core) > 1 and set(core) <= free)


def _cpu_facts(snap: HostSnapshot, root: Root, vm: str | None) -> _Cpus:
    topo = topology_of(snap)
    kept, how = kept_host_cpus(snap, root)
    reserve = set(default_reserve(topo, kept))
    busy = busy_of(snap, topo, vm or "")
    free = {n: [c for c in topo.node_cpus(n) if c not in reserve and c not in busy.cpus] for n in topo.nodes}
    return _Cpus(topo, reserve, how or "the first core of each node", busy, free)


def size_cpus(snap: HostSnapshot, root: Root, gpus: Sequence[Gpu], sizing: Sizing, why: list[str]) -> CpuSize:
    """The VM's vCPUs on the GPUs' node(s) (for no GPU, the node with the most free CPUs)."""
    facts = _cpu_facts(snap, root, sizing.vm)
    topo = facts.topo
    single = topo.nodes[0] if len(topo.nodes) == 1 else None
    per_node = Counter(g.numa_node if g.numa_node is not None else single for g in gpus)
    if None in per_node:
        return CpuSize(refusal="the NUMA node of " + ", ".join(g.address for g in gpus if g.numa_node is None) +
                       " is unknown (numa_node -1): its vCPUs cannot be placed beside it")
    if not gpus:
        if not topo.nodes:
            return CpuSize(refusal="no online CPU is known on this host")
        node = min(topo.nodes, key=lambda n: (-len(facts.free[n]), n))
        per_node = Counter({node: 1})
        why.append(f"no GPU: node {node}, the node with the most free CPUs")
    nodes = tuple(sorted(n for n in per_node if n is not None))
    want, auto = _vcpu_count(snap, facts, nodes, sizing, bool(gpus), why)
    free = sum(len(facts.free[n]) for n in nodes)
    pinned = facts.pinned(nodes)
    if want > free and not auto:
        return CpuSize(nodes, refusal=f"{want} vCPUs asked for; {_nodes(nodes)} has {free} CPU(s) "
                                      "outside the host's kept CPUs that no other VM is pinned to"
                                      + (f" ({pinned})" if pinned else ""))
    smt = any(len(topo.siblings[c]) > 1 for n in nodes for c in facts.free[n])
    cap = 2 * facts.whole_cores(nodes) if auto and smt and facts.whole_cores(nodes) else free
    if want > cap:
        why.append(f"capped at {cap} vCPUs: the free " + ("whole cores (sibling pairs) " if cap < free else "CPUs ") +
                   f"of {_nodes(nodes)}, outside the host's kept CPUs" + (f"; {pinned}" if pinned else ""))
        want = cap
    if auto and smt and want % 2 and want > 1:
        want -= 1
        why.append(f"{want} vCPUs: an even count, so each guest core gets two sibling threads")
    if want < 1:
        return CpuSize(nodes, refusal=f"no CPU of {_nodes(nodes)} is free: every one is kept for the "
                                      f"host or pinned to another VM ({pinned or 'none pinned'})")
    return _assigned(facts, nodes, per_node, want, smt, sizing, why)


def _vcpu_count(snap: HostSnapshot, facts: _Cpus, nodes: tuple[int, ...], sizing: Sizing, has_gpus: bool,
                why: list[str]) -> tuple[int, bool]:
    """(vCPUs wanted, whether the placement chose the count)."""
    if sizing.vcpus is not None:
        why.append(f"{sizing.vcpus} vCPUs, as asked")
        return sizing.vcpus, False
    own = snap.vm(sizing.vm) if sizing.vm is not None else None
    if not has_gpus and own is not None:
        why.append(f"{own.vcpus} vCPUs: VM {own.name}'s count now")
        return own.vcpus, True
    online = [c for n in nodes for c in facts.topo.node_cpus(n)]
    kept = [c for c in online if c in facts.reserve]
    want = VCPU_SHARE_TENTHS * (len(online) - len(kept)) // 10
    why.append(f"{want} vCPUs: 70% of {_nodes(nodes)}'s {len(online)} online CPUs less the "
               f"{len(kept)} the host keeps ({facts.how})")
    return want, True


def _assigned(facts: _Cpus, nodes: tuple[int, ...], per_node: Counter[int | None], want: int, smt: bool,
              sizing: Sizing, why: list[str]) -> CpuSize:
    """The host CPU of each vCPU: shared out over the nodes by GPU count, whole sibling cores first."""
    topo = facts.topo
    threads = 2 if smt and want % 2 == 0 else 1
    if len(nodes) == 1:
        targets = [(nodes[0], want)]
    else:
        targets = _split(PinRequest(vm=sizing.vm or "", vcpus=want, threads_per_core=threads,
                                    gpu_nodes=tuple(sorted((n, k) for n, k in per_node.items() if n is not None))))
    cpus: list[int] = []
    short = 0
    for node, k in targets:
        got = _assign(k, threads, topo.cores(node), set(facts.free[node]))
        if len(got) < k and sizing.vcpus is not None:
            return CpuSize(nodes, refusal=f"node {node} has {len(facts.free[node])} free CPU(s) for the {k} "
                                          "vCPUs it would get")
        if len(got) < k:
            why.append(f"node {node} takes {len(got)} vCPUs, not {k}: it has no more free CPUs")
        short += k - len(got)
        cpus += got
    for node in nodes:  # what a full node could not take goes to the others
        if short:
            more = _assign(short, threads, topo.cores(node), set(facts.free[node]) - set(cpus))
            if more:
                why.append(f"node {node} takes {len(more)} more")
            short -= len(more)
            cpus += more
    if not cpus:
        return CpuSize(nodes, refusal=f"no CPU of {_nodes(nodes)} is free for the vCPUs")
    pairs = threads == 2 and len(cpus) % 2 == 0 and all(
        cpus[i + 1] in topo.siblings[cpus[i]] for i in range(0, len(cpus), 2))
    emulator = tuple(sorted(c for c in facts.reserve if c in topo.online and topo.node_of.get(c) in nodes))
    why.append(f"CPUs {format_cpulist(cpus)}" + (" (sibling threads paired)" if pairs else "") +
               (f"; emulator threads on the host's kept CPUs {format_cpulist(emulator)}" if emulator else ""))
    return CpuSize(nodes, tuple(cpus), 2 if pairs else 1, emulator)


# -- memory and hugepages -----------------------------------------------------------------------------

def _nodes(nodes: tuple[int, ...]) -> str:
    return f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {format_cpulist(nodes)}"


def page_size(root: Root, asked: int | None) -> int:
    """The hugepage size in KiB: `asked`, else 1 GiB where the host offers it, else 2 MiB (0: none)."""
    if asked is not None:
        return asked
    return GIB if root.exists(HUGEPAGES.format(GIB)) else 2048


def size_text(kib: int) -> str:
    return f"{kib // GIB} GiB" if kib >= GIB and kib % GIB == 0 else f"{kib / 1024:g} MiB"


def memory_need(snap: HostSnapshot, gpus: Sequence[Gpu], sizing: Sizing, unit: int,
                why: list[str]) -> tuple[int, str]:
    """(KiB in whole `unit`s, refusal)."""
    if sizing.memory_kib is not None:
        need, what = sizing.memory_kib, "as asked"
    elif gpus:
        vram = [vram_of(snap, g.address) for g in gpus]
        unknown = [g.address for g, v in zip(gpus, vram) if v is None]
        if unknown:
            return 0, f"the VRAM of {', '.join(unknown)} is unknown: give the memory size"
        total = sum(v for v in vram if v is not None) * 1024
        need, what = int(-(-sizing.factor * total // 1)), f"{sizing.factor:g}× the {total / GIB:.1f} GiB VRAM"
    elif sizing.vm is not None and (own := snap.vm(sizing.vm)) is not None and own.memory_kib:
        need, what = own.memory_kib, f"VM {own.name}'s memory now"
    else:
        return 0, "no GPU to size the memory by: give the memory size"
    rounded = -(-need // unit) * unit
    why.append(f"memory {rounded / GIB:.1f} GiB: {what}" +
               (f", rounded up to whole {size_text(unit)} pages" if rounded != need else ""))
    return rounded, ""


def node_pages(snap: HostSnapshot, root: Root, node: int, size: int) -> tuple[int, int]:
    """(free pages, reserved pages) of `node` for pages of `size` KiB: the snapshot's, else sysfs'."""
    use = next((u for u in snap.load.nodes if u.node == node), None)
    page = next((h for h in use.hugepages if h.size_kib == size), None) if use is not None else None
    if page is not None:
        free, total = page.free, page.total
    else:
        free, total = (_count(root, NODE_HUGEPAGES.format(node, size, f)) for f in ("free_hugepages", "nr_hugepages"))
    return free, total


def _count(root: Root, path: str) -> int:
    value = root.read_int(path)
    return value if value is not None and value >= 0 else 0


def size_memory(snap: HostSnapshot, root: Root, gpus: Sequence[Gpu], nodes: tuple[int, ...], sizing: Sizing,
                why: list[str]) -> MemSize:
    """The VM's memory and the hugepages it needs on each node (split evenly), refused when a node cannot
    hold its share: its free pages, the VM's own while it runs, and what its free memory can still become
    (less what a node keeps free: console/vm_sizing.py, as the doctor's memory fix counts it)."""
    size = page_size(root, sizing.hugepage_kib)
    if size and not root.exists(HUGEPAGES.format(size)):
        return MemSize(refusal=f"this host offers no {size_text(size)} hugepages (no /{HUGEPAGES.format(size)})")
    unit = size or 1024
    need, refusal = memory_need(snap, gpus, sizing, unit, why)
    if refusal:
        return MemSize(refusal=refusal)
    if not nodes:
        return MemSize(need)
    shares = [need // unit // len(nodes) + (1 if i < need // unit % len(nodes) else 0) for i in range(len(nodes))]
    per_node, free, reserved, short = {}, {}, {}, []
    for node, pages in zip(nodes, shares):
        f, total, spare, own = _room(snap, root, node, size, sizing.vm)
        per_node[node], free[node], reserved[node] = pages, f, total
        if spare is not None and pages > f + own + spare:
            short.append(f"node {node} needs {size_text(pages * unit)}" +
                         (f" ({pages} pages of {size_text(size)}) and has {f} free pages" if size else "") +
                         (f", {own} of the VM's own" if own else "") +
                         f"{' plus' if size else ' and has'} {size_text(spare * unit)} of free memory "
                         f"(less {KEEP_FREE_KIB // GIB} GiB it keeps)")
        elif size:
            why.append(f"hugepages of {size_text(size)} on node {node}: {pages} needed, {f} free of {total} reserved" +
                       (f", {own} the VM's own" if own else "") +
                       (f"; {pages - f - own} more to reserve from its free memory" if pages > f + own else ""))
    pages_need = HugepageNeed(size, per_node, free, reserved) if size else EMPTY_PAGES
    return MemSize(need, pages_need, ("memory does not fit: " + "; ".join(short)) if short else "")


def _room(snap: HostSnapshot, root: Root, node: int, size: int, vm: str | None) -> tuple[int, int, int | None, int]:
    """(free pages, reserved pages, pages free memory can still become (None: unknown), the pages the
    running VM `vm` holds there itself) of `node`, in pages of `size` KiB (0: plain memory in KiB)."""
    unit = size or 1024
    free, total = node_pages(snap, root, node, size) if size else (0, 0)
    use = next((u for u in snap.load.nodes if u.node == node), None)
    spare = max(0, use.memory_free_kib - KEEP_FREE_KIB) // unit if use is not None and use.memory_total_kib else None
    own_vm = snap.vm(vm) if vm is not None else None
    own = 0
    if size and own_vm is not None and own_vm.state not in INACTIVE and vm_page_size(snap, own_vm) == size:
        held = memory_nodes(snap, own_vm)
        own = own_vm.memory_kib // len(held) // size if node in held else 0
    return free, total, spare, own
