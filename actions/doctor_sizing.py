"""Sizing for two doctor fixes (actions/doctor_fixes.py): how many hugepages each NUMA node needs for the
VMs that ask for them, and which CPUs to keep for the host. Pure functions of the snapshot (plus the
reserved counts read through the root)."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from nodeconsole.actions.live_steps import hugepages_path, page_text
from nodeconsole.actions.pin_planner import vram_of
from nodeconsole.actions.placement import place
from nodeconsole.actions.plan import Check, RequestError
from nodeconsole.console.checks import effective_pins
from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_memory import TRAINING_SHARE, training_pages
from nodeconsole.console.model import HostSnapshot, Vm
from nodeconsole.console.root import Root
from nodeconsole.console.vm_sizing import memory_nodes

GIB_KIB = 1048576


@dataclass
class HugepageNeeds:
    size_kib: int = GIB_KIB
    per_node: dict[int, int] = field(default_factory=dict)  # pages each node should have reserved
    current: dict[int, int] = field(default_factory=dict)  # pages each node has reserved now
    boot_total: int = 0  # hugepages=N on the command line (the kernel spreads N evenly over the nodes)
    mixed: bool = False  # VMs ask for pages of different sizes (only the largest is planned)
    advice: str = ""
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def default_page_kib(root: Root) -> int:
    """The kernel's default hugepage size (/proc/meminfo Hugepagesize), 2 MiB when unreadable."""
    for line in (root.read("proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Hugepagesize" and value.split() and value.split()[0].isdigit():
            return int(value.split()[0])
    return 2048


def _candidates(snap: HostSnapshot, default: int, out: HugepageNeeds,
                reserved: dict[tuple[int, int], int]) -> list[tuple[Vm, int]]:
    """(VM, page size) of the VMs to reserve for: those whose definition asks for hugepages; when none
    does and nothing is reserved, the pinned GPU VMs (1 GiB pages, which they use once they ask)."""
    asking = [(vm, vm.hugepages_kib or default) for vm in snap.vms if vm.hugepages_kib is not None]
    if asking:
        return asking
    pinned_gpu = [vm for vm in snap.vms if effective_pins(snap, vm) and any(h.gpu for h in vm.hostdevs)]
    if pinned_gpu and not any(reserved.values()):
        out.notes.append(f"hugepages: no VM asks for hugepages; 1 GiB pages are reserved for the pinned GPU VMs "
                         f"({', '.join(vm.name for vm in pinned_gpu)}), which use them once their definitions "
                         f"ask (<memoryBacking><hugepages/>, virsh edit VM): until then the memory stays unused")
        return [(vm, GIB_KIB) for vm in pinned_gpu]
    if not snap.vms and not any(reserved.values()) and any(not g.owner.vms for g in snap.gpus):
        return []  # a host for GPU VMs none of which is defined yet: sized by training_reserve
    out.notes.append("hugepages: no VM asks for hugepages (<memoryBacking><hugepages/> in its definition): "
                     "there is nothing to reserve")
    return []


def training_reserve(snap: HostSnapshot, root: Root, out: HugepageNeeds,
                     reserved: dict[tuple[int, int], int]) -> dict[int, int]:
    """Pages per node on a host with free GPUs, no VM and nothing reserved: 1 GiB pages for the largest
    training VM `place` would make on each node (its free GPUs there, twice their memory), at most 75 % of
    the node's memory; where `place` cannot size one, twice the free GPUs' memory
    (checks_memory.training_pages, what the doctor's check shows)."""
    if snap.vms or any(reserved.values()):
        return {}
    estimate = training_pages(snap, lambda g: vram_of(snap, g.address))  # an H100 on vfio-pci: 80 GiB
    pages, said = {}, []
    for n in snap.numa_nodes:
        if not (n.online and n.memory_kib > 0 and any(g.numa_node == n.id and not g.owner.vms for g in snap.gpus)):
            continue
        placed = _placed_pages(snap, root, n.id)
        count = min(placed, int(n.memory_kib * TRAINING_SHARE) // GIB_KIB) if placed else estimate.get(n.id, 0)
        if count > 0:
            pages[n.id] = count
            said.append(f"node {n.id}: {count} GiB" + ("" if placed else " (place cannot size one there: twice "
                                                                           "its free GPUs' memory)"))
    if pages:
        out.notes.append("hugepages: no VM is defined yet; 1 GiB pages are reserved for the largest training VM "
                         "on each node (as `nodeconsole place` sizes it on the node's free GPUs, at most 75 % of "
                         "the node's memory): " + ", ".join(said))
    return pages


def _placed_pages(snap: HostSnapshot, root: Root, node: int) -> int | None:
    """The 1 GiB pages `place` gives a training VM of every free GPU on `node` there (None: it cannot)."""
    gpus = [g.address for g in snap.gpus if g.numa_node == node and not g.owner.vms]
    try:
        p = place(snap, root, len(gpus), gpus=gpus, hugepage_kib=GIB_KIB)
    except RequestError:
        return None
    if p.hugepages.size_kib == GIB_KIB and p.hugepages.per_node:
        return sum(p.hugepages.per_node.values())
    return None


def hugepage_needs(snap: HostSnapshot, root: Root) -> HugepageNeeds:
    """Pages per node for the VMs that ask for hugepages, and the boot-time count that covers them."""
    out = HugepageNeeds()
    nodes = [n.id for n in snap.numa_nodes if n.online and n.memory_kib > 0]
    if not nodes:
        out.checks.append(Check("NUMA nodes readable", False, "no NUMA node with memory in sysfs",
                                "run on the host itself (or --demo)"))
        return out
    reserved = {(n.id, size): nr for n in snap.numa_nodes for size, nr in n.hugepages}
    asking = _candidates(snap, default_page_kib(root), out, reserved)
    users: dict[int, list[str]] = defaultdict(list)
    if asking:
        pages = _vm_pages(snap, asking, nodes, out, users)
    else:
        training = training_reserve(snap, root, out, reserved)
        if not training:
            return out
        pages = {n: training.get(n, 0) for n in nodes}
        for n in training:
            users[n].append("the largest training VM")
    for n in nodes:
        out.current[n] = root.read_int(hugepages_path(n, out.size_kib)) or 0
        out.per_node[n] = max(pages[n], out.current[n])
    out.boot_total = len(nodes) * max(out.per_node.values())
    _check_memory(snap, out)
    per = ", ".join(f"node {n} needs {pages[n]} ({', '.join(users[n]) or 'no VM'})" for n in nodes)
    out.advice = (f"{per}; at boot hugepages={out.boot_total} is spread evenly over the {len(nodes)} node(s), so "
                  f"every node gets the largest node's need")
    if len(nodes) > 1 and len(set(out.per_node.values())) > 1:
        out.advice += (f" (kernels that take the per-node form reserve exactly: hugepages="
                       f"{','.join(f'{n}:{out.per_node[n]}' for n in nodes)})")
    return out


def _vm_pages(snap: HostSnapshot, asking: list[tuple[Vm, int]], nodes: list[int], out: HugepageNeeds,
              users: dict[int, list[str]]) -> dict[int, int]:
    """Pages per node of the largest page size the VMs ask for (`out.size_kib`, `out.mixed` set)."""
    sizes = {s for _, s in asking}
    out.size_kib = max(sizes)
    out.mixed = len(sizes) > 1
    if out.mixed:
        out.notes.append(f"hugepages: some VMs ask for {page_text(min(sizes))} pages: only the "
                         f"{page_text(out.size_kib)} pages are planned; reserve the others by hand")
    need: dict[int, float] = defaultdict(float)
    for vm, size in sorted(asking, key=lambda a: a[0].name):
        if size != out.size_kib:
            continue
        where = memory_nodes(snap, vm)  # the nodes its memory comes from (console/vm_sizing.py)
        for n in where:
            need[n] += vm.memory_kib / len(where)
            users[n].append(vm.name)
    return {n: math.ceil(need[n] / out.size_kib) for n in nodes}


def _check_memory(snap: HostSnapshot, out: HugepageNeeds) -> None:
    for node in snap.numa_nodes:
        want_kib = out.boot_total // max(1, len(snap.numa_nodes)) * out.size_kib
        if node.memory_kib and want_kib > node.memory_kib - facts.HOST_MEMORY_RESERVE_KIB // len(snap.numa_nodes):
            out.checks.append(Check(
                f"node {node.id} has memory for the hugepages", False,
                f"{want_kib // GIB_KIB} GiB of {page_text(out.size_kib)} pages would leave the host less than "
                f"its reserve on a node of {node.memory_kib // GIB_KIB} GiB",
                "by hand: give the VMs less memory, or back fewer of them with hugepages"))


def host_cores(snap: HostSnapshot) -> tuple[list[int], list[Check]]:
    """CPUs to keep for the host: on every NUMA node the first core (with its hyperthread siblings) that
    no VM's vCPUs are pinned to."""
    cpus = [c for c in snap.cpus if c.online and c.numa_node is not None]
    if not cpus:
        return [], [Check("CPU topology readable", False, "no online CPU with a NUMA node in sysfs",
                          "run on the host itself (or --demo)")]
    pinned = {c for vm in snap.vms for p in effective_pins(snap, vm) for c in p.cpus}
    keep: list[int] = []
    checks = []
    for node in sorted({c.numa_node for c in cpus if c.numa_node is not None}):
        cores = sorted({tuple(sorted(c.siblings or (c.id,))) for c in cpus if c.numa_node == node})
        free = next((core for core in cores if not pinned & set(core)), None)
        if free is None:
            checks.append(Check(f"a core of node {node} is free of VMs", False,
                                f"VMs are pinned to every core of NUMA node {node}",
                                "by hand: unpin one core's CPUs (nodeconsole pin VM --reserve CPUS), then plan "
                                "again"))
            continue
        keep += list(free)
    return keep, checks
