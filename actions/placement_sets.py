"""Which GPUs a training VM can get, and which sets of them are best (pure: one HostSnapshot, no I/O).

`gpu_blockers` says why a GPU is no candidate (the place/prepare rules: healthy, not drained, idle, in
no other VM's definition, nvidia / unbound / vfio-pci, MIG and vGPU off, a viable IOMMU group). The
candidate sets are made by filling the PCIe hierarchy (NUMA node → host bridge → root port → switch)
from the inside out, in every NVLink domain and over all candidates; each set is then scored exactly:
one NVLink domain first, then the worst PCIe level between two of its GPUs (PIX best), then the NUMA
nodes, then (with NICs) how many GPUs lack a free VF at PIX, then the addresses. Same input, same order.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nodeconsole.actions.targets import VFIO, group_members
from nodeconsole.console.hosttext import visible
from nodeconsole.console.iommu import blocker_reasons
from nodeconsole.console.model import Gpu, HostSnapshot, Nic, NicVf, PciDevice, nvlink_peers
from nodeconsole.console.nics import distance_rank, distance_to, vf_preference
from nodeconsole.console.nics import group_blockers as vf_group_blockers
from nodeconsole.console.topology import ancestors, relation

Configs = Mapping[str, Iterable[str]]  # VM name → the PCI addresses its (persistent) definition holds
LEVELS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
SPREAD = {"PXB": "crosses PCIe switches (PXB)", "PHB": "crosses PCIe switches through the host bridge (PHB)",
          "NODE": "spans host bridges of one NUMA node (NODE)", "SYS": "spans two NUMA nodes (SYS)"}
TOGETHER = {"X": "one GPU", "PIX": "one PCIe switch (PIX)", "PXB": "one PCIe tree below a root port (PXB)",
            "PHB": "one host bridge (PHB)", "NODE": "one NUMA node (NODE)", "SYS": "across NUMA nodes (SYS)"}


def snapshot_configs(snap: HostSnapshot) -> dict[str, set[str]]:
    """VM → the PCI functions (and the GPUs behind its slices) its definition in the snapshot holds."""
    out: dict[str, set[str]] = {}
    for v in snap.vms:
        have = out.setdefault(v.name, set())
        for h in v.hostdevs:
            have.update(a for a in ((h.address if h.type == "pci" else None), h.gpu) if a)
    return out


def holders_of(snap: HostSnapshot, addresses: Iterable[str], vm: str | None,
               configs: Configs | None = None) -> list[str]:
    """The VMs other than `vm` whose definition holds any of `addresses`, with their state."""
    wanted = set(addresses)
    table = snapshot_configs(snap) if configs is None else configs
    out = []
    for name, have in sorted(table.items()):
        if name != vm and wanted & set(have):
            v = snap.vm(name)
            out.append(f"{name} ({v.state})" if v is not None else name)
    return out


def gpu_blockers(snap: HostSnapshot, gpu: Gpu, vm: str | None, configs: Configs | None = None) -> list[str]:
    """Why `gpu` cannot go to a training VM (`vm`'s own GPUs count as free); [] when it can."""
    out = []
    if gpu.health.unhealthy:
        out.append("unhealthy: " + visible("; ".join(gpu.health.reasons) or "its health verdict"))
    if gpu.drain is not None:
        out.append(visible(gpu.drain.summary))
    if gpu.processes:
        out.append("busy: " + ", ".join(f"pid {p.pid} {visible(p.name)}" for p in gpu.processes))
    if "enabled" in (gpu.mig.mode, gpu.mig.pending_mode):
        out.append(f"MIG mode on ({len(gpu.mig.instances)} GPU instance(s))")
    if gpu.vgpu.instances:
        out.append(f"vGPU: {len(gpu.vgpu.instances)} instance(s) on it")
    dev = snap.pci(gpu.address)
    if dev is not None and dev.vfs:
        out.append(f"SR-IOV: {len(dev.vfs)} VF(s) enabled (vGPU)")
    members = group_members(snap, gpu)
    for who in holders_of(snap, [gpu.address, *members], vm, configs):
        out.append(f"in VM {visible(who)}'s definition")
    if gpu.driver not in ("nvidia", None, VFIO):
        out.append(f"on driver {visible(gpu.driver)} (nvidia, vfio-pci or none expected)")
    out += _group_blockers(snap, gpu, members)
    return out


def _group_blockers(snap: HostSnapshot, gpu: Gpu, members: list[str]) -> list[str]:
    """The IOMMU side, as passthrough's group check reads it."""
    if not snap.iommu.enabled:
        return ["no IOMMU: no device can be given to a VM"]
    if gpu.iommu_group is None:
        return ["no IOMMU group"]
    index = {d.address: d for d in snap.pci_devices}
    grp = snap.group(gpu.iommu_group)
    found = blocker_reasons(grp if grp is not None else members, index, [gpu.address])
    found += [f"{a} is the boot VGA device" for a in members if (d := index.get(a)) is not None and d.boot_vga]
    return [f"IOMMU group {gpu.iommu_group} not viable: " + "; ".join(found)] if found else []


# -- the VF beside each GPU ---------------------------------------------------------------------------

@dataclass(frozen=True)
class NicPick:
    vfs: tuple[str, ...]  # one per GPU, "" none
    levels: tuple[str, ...]  # the distance of each, "" none

    @property
    def misses(self) -> int:
        return sum(lv != "PIX" for lv in self.levels)

    @property
    def spread(self) -> int:
        return sum(distance_rank(lv) if lv else len(LEVELS) for lv in self.levels)


@dataclass
class Host:
    """What the set search reads once per placement: the candidate GPUs and the free VFs."""
    snap: HostSnapshot
    vm: str | None
    gpus: list[Gpu]
    vfs: list[tuple[Nic, NicVf]] = field(default_factory=list)
    index: dict[str, PciDevice] = field(default_factory=dict)
    own: frozenset[str] = frozenset()  # the GPUs `vm` holds already

    @classmethod
    def of(cls, snap: HostSnapshot, gpus: list[Gpu], vm: str | None, configs: Configs | None) -> Host:
        table = snapshot_configs(snap) if configs is None else configs
        taken = {a for name, have in table.items() if name != vm for a in have}
        vfs = [(n, v) for n in snap.nics for v in n.vfs
               if v.vm in (None, vm) and v.address not in taken and not vf_group_blockers(snap, v.address)]
        own = frozenset(table.get(vm, ())) & {g.address for g in gpus} if vm is not None else frozenset()
        return cls(snap, vm, gpus, vfs, {d.address: d for d in snap.pci_devices}, own)

    def nics_for(self, gpus: Iterable[Gpu]) -> NicPick:
        """The nearest free VF for each GPU in turn (never one VF twice): PIX first, then PXB, PHB, NODE, SYS."""
        used: set[str] = set()
        vfs, levels = [], []
        for g in gpus:
            best = min(((distance_rank(distance_to(n, g.address)), vf_preference(v), v.address), distance_to(n, g.address))
                       for n, v in self.vfs if v.address not in used) if len(used) < len(self.vfs) else None
            vfs.append(best[0][2] if best else "")
            levels.append(best[1] if best else "")
            if best:
                used.add(best[0][2])
        return NicPick(tuple(vfs), tuple(levels))


# -- the sets -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scored:
    gpus: tuple[Gpu, ...]
    nvlink: bool  # every pair joined by NVLink (directly or through NVSwitch)
    level: str  # the worst PCIe level between two of them
    nodes: tuple[int, ...]
    nics: NicPick | None
    own: int = 0  # how many of them the VM holds already (fewer changes)

    @property
    def key(self) -> tuple[object, ...]:
        nic = (self.nics.misses, self.nics.spread) if self.nics is not None else (0, 0)
        return (not self.nvlink, LEVELS.index(self.level), len(self.nodes), *nic, -self.own,
                tuple(g.address for g in self.gpus))


def _path(host: Host, g: Gpu) -> tuple[object, ...]:
    """(node, host bridge, root port, switch): GPUs sharing a prefix share that much of the PCIe tree."""
    chain = ancestors(host.index, g.address)
    top = chain[-1] if chain else g.address
    switch = chain[-2] if len(chain) >= 2 else top
    return (g.numa_node if g.numa_node is not None else -1, top.rsplit(":", 1)[0], top, switch)


def _fill(host: Host, gpus: list[Gpu], k: int, depth: int, paths: dict[str, tuple[object, ...]],
          nic_rank: dict[str, int]) -> list[Gpu]:
    """k of `gpus` (which share the path prefix up to `depth`), from the fullest branches first."""
    if depth >= 4:
        return sorted(gpus, key=lambda g: (nic_rank.get(g.address, 0), g.address))[:k]
    groups: dict[object, list[Gpu]] = {}
    for g in gpus:
        groups.setdefault(paths[g.address][depth], []).append(g)
    order = sorted(groups.values(), key=lambda grp: (-min(len(grp), k), sum(nic_rank.get(g.address, 0) for g in grp),
                                                    min(g.address for g in grp)))
    out: list[Gpu] = []
    for grp in order:
        if len(out) == k:
            break
        out += _fill(host, grp, min(k - len(out), len(grp)), depth + 1, paths, nic_rank)
    return out


def nvlink_domains(gpus: list[Gpu]) -> list[list[Gpu]]:
    """The GPUs joined by NVLink (through a bridge or an NVSwitch), as connected groups of two or more."""
    parent = {g.address: g.address for g in gpus}

    def root(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            if nvlink_peers(a, b):
                parent[root(a.address)] = root(b.address)
    groups: dict[str, list[Gpu]] = {}
    for g in gpus:
        groups.setdefault(root(g.address), []).append(g)
    return [grp for grp in groups.values() if len(grp) > 1]


def candidate_sets(host: Host, k: int, with_nic: bool, runners: int = 3) -> list[Scored]:
    """The sets the fill makes, scored, best first: over each NVLink domain and all candidates, one set per
    branch of the PCIe tree that holds k; then the same without each GPU of the best set in turn, and so
    on from the best set of each such pool, until `runners` runners-up are found (a bounded search)."""
    paths = {g.address: _path(host, g) for g in host.gpus}
    nic_rank = {g.address: host.nics_for([g]).spread for g in host.gpus} if with_nic else {}
    found: dict[tuple[str, ...], Scored] = {}
    queue: list[frozenset[str]] = [frozenset()]
    tried: set[frozenset[str]] = {frozenset()}
    calls = 0
    while queue and calls <= 3 * k:
        without = queue.pop(0)
        best = _generate(host, [g for g in host.gpus if g.address not in without], k, with_nic, paths, nic_rank, found)
        calls += 1
        for g in best.gpus if best is not None else ():
            if (more := without | {g.address}) not in tried:
                tried.add(more)
                queue.append(more)
        if calls > k and len(found) > runners:
            break
    return sorted(found.values(), key=lambda s: s.key)


def _generate(host: Host, gpus: list[Gpu], k: int, with_nic: bool, paths: dict[str, tuple[object, ...]],
              nic_rank: dict[str, int], found: dict[tuple[str, ...], Scored]) -> Scored | None:
    """Adds to `found` the sets the fill makes of `gpus`; the best of them (None: none holds k)."""
    made: list[Scored] = []
    for pool in [*nvlink_domains(gpus), gpus]:
        for depth in (4, 3, 2, 1, 0):
            branches: dict[tuple[object, ...], list[Gpu]] = {}
            for g in pool:
                branches.setdefault(paths[g.address][:depth], []).append(g)
            for branch in branches.values():
                if len(branch) < k:
                    continue
                chosen = tuple(sorted(_fill(host, branch, k, depth, paths, nic_rank), key=lambda g: g.address))
                addrs = tuple(g.address for g in chosen)
                if addrs not in found:
                    found[addrs] = score(host, chosen, with_nic)
                made.append(found[addrs])
    return min(made, key=lambda s: s.key) if made else None


def score(host: Host, gpus: tuple[Gpu, ...], with_nic: bool) -> Scored:
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    levels = [relation(host.snap, a.address, b.address, host.index) for a, b in pairs]
    level = max(levels, key=LEVELS.index) if levels else "X"
    nodes = tuple(sorted({g.numa_node for g in gpus if g.numa_node is not None}))
    return Scored(gpus, all(nvlink_peers(a, b) for a, b in pairs), level, nodes,
                  host.nics_for(gpus) if with_nic else None, sum(g.address in host.own for g in gpus))


def worse(best: Scored, alt: Scored) -> str:
    """What makes `alt` worse than `best`, in words."""
    out = []
    if best.nvlink and not alt.nvlink:
        out.append("not one NVLink domain")
    if LEVELS.index(alt.level) > LEVELS.index(best.level):
        out.append(SPREAD.get(alt.level, alt.level))
    if len(alt.nodes) > len(best.nodes) and alt.level != "SYS":
        out.append(f"{len(alt.nodes)} NUMA nodes")
    if alt.nics is not None and best.nics is not None:
        far = [f"{g.address} ({lv or 'none free'})" for g, lv in zip(alt.gpus, alt.nics.levels) if lv != "PIX"]
        if alt.nics.misses > best.nics.misses and far:
            out.append("no VF at PIX for " + ", ".join(far))
        elif alt.nics.spread > best.nics.spread:
            out.append("its VFs sit farther from the GPUs")
    if not out and alt.own < best.own:
        out.append("takes fewer of the GPUs the VM holds already")
    return "; ".join(out) or "as good in topology; ranked after by PCI address"
