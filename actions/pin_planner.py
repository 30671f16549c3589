"""NUMA-aware vCPU placement: which host CPU each vCPU of a VM should run on. Pure: no I/O.

The planner works on a `Topology` (online CPUs by NUMA node, hyperthread sibling groups) and a
`PinRequest` (the VM's size, guest threads and the NUMA nodes of its GPUs and NICs), both read from a
HostSnapshot. Rules (REFERENCE.md §8):
- vCPUs go to the NUMA node of the VM's GPUs (NICs when it has no GPU); GPUs on several nodes get a
  split, vCPUs shared out by GPU count, and a warning;
- a host reserve never gets a vCPU; emulator threads go there, on the VM's node. By default it is the
  CPUs the host keeps for itself (isolcpus=/nohz_full=/systemd CPUAffinity=, as the doctor's host-cores
  check reads them) plus, on a node where the host keeps none, that node's first core with its
  hyperthread siblings;
- guest thread pairs land on host sibling pairs; a guest without threads gets one physical core per
  vCPU first;
- CPUs that any other defined VM is pinned to (running, paused or shut off: a stopped VM gets its CPUs
  back when it starts) are never proposed; when the node has too few free CPUs the proposal is refused
  naming those VMs, unless the admin allows the overlap (`allow_overlap`): then the least crowded of
  their CPUs are shared and the proposal says which VMs' CPUs it shares;
- two vCPUs of the VM never share a host CPU unless the admin asked for it (a `--cpus` list shorter
  than the vCPU count); a node without room refuses instead;
- same input, same proposal: every choice is made in CPU id order.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nodeconsole.console.cpulist import format_cpulist, parse_cpulist
from nodeconsole.console.model import HostSnapshot, Vm

INACTIVE = ("shut off", "crashed")  # VMs without running threads (their pins still hold CPUs for their next start)
CORE_SHARE_WARN = 0.70  # more than this share of a node's physical cores for one VM: warn
MEMORY_PER_VRAM = 2  # VM memory below this many times its GPUs' VRAM starves data loading
H100_VRAM_MIB = 80 * 1024  # when NVML cannot see the GPU (vfio-pci)
NIC_CLASS = 0x02


@dataclass(frozen=True)
class Topology:
    """What the planner needs of a host's CPUs."""
    node_of: dict[int, int]  # every existing CPU → NUMA node (0 when the host has no NUMA info)
    online: frozenset[int]
    siblings: dict[int, tuple[int, ...]]  # online CPU → its online hyperthread siblings (with itself)
    node_memory_kib: dict[int, int] = field(default_factory=dict)

    @property
    def existing(self) -> frozenset[int]:
        return frozenset(self.node_of)

    def node_cpus(self, node: int) -> tuple[int, ...]:
        """Online CPUs of a node."""
        return tuple(sorted(c for c in self.online if self.node_of.get(c) == node))

    def cores(self, node: int) -> list[tuple[int, ...]]:
        """The node's physical cores (sibling groups of online CPUs), in CPU id order."""
        return sorted({self.siblings[c] for c in self.node_cpus(node)})

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({self.node_of[c] for c in self.online}))


def topology_of(snap: HostSnapshot) -> Topology:
    single = len(snap.numa_nodes) <= 1
    only = snap.numa_nodes[0].id if snap.numa_nodes else 0
    node_of: dict[int, int] = {}
    for c in snap.cpus:
        node = c.numa_node if c.numa_node is not None else (only if single else -1)
        node_of[c.id] = node
    online = frozenset(c.id for c in snap.cpus if c.online)
    siblings = {}
    for c in snap.cpus:
        if c.online:
            group = tuple(sorted(s for s in (c.siblings or (c.id,)) if s in online
                                 and node_of.get(s) == node_of[c.id]))
            siblings[c.id] = group or (c.id,)
    return Topology(node_of=node_of, online=online, siblings=siblings,
                    node_memory_kib={n.id: n.memory_kib for n in snap.numa_nodes})


def default_reserve(topo: Topology, kept: frozenset[int] | None = None) -> tuple[int, ...]:
    """The host reserve: the CPUs the host keeps for itself (`kept`, e.g. systemd's CPUAffinity=), and
    on every NUMA node where it keeps none, that node's first core with its hyperthread siblings."""
    out: set[int] = set(kept or ())
    for node in topo.nodes:
        cpus = topo.node_cpus(node)
        if cpus and not out & set(cpus):
            out.update(topo.siblings[cpus[0]])
    return tuple(sorted(out))


def parse_cpu_choice(text: str, topo: Topology, what: str = "--cpus", online: bool = True) -> tuple[int, ...]:
    """A CPU list the admin typed: syntax, CPUs that exist (and are online, unless `online` is False: a
    reserve may name an offline CPU). ValueError says why."""
    try:
        cpus = parse_cpulist(text)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    missing = [c for c in cpus if c not in topo.node_of]
    if missing:
        have = format_cpulist(topo.existing) or "none"
        raise ValueError(f"{what}: CPU {format_cpulist(missing)} does not exist on this host (CPUs {have})")
    offline = [c for c in cpus if c not in topo.online]
    if offline and online:
        raise ValueError(f"{what}: CPU {format_cpulist(offline)} is offline")
    return cpus


@dataclass(frozen=True)
class PinRequest:
    """The VM as the planner sees it."""
    vm: str
    vcpus: int
    threads_per_core: int = 1
    memory_kib: int = 0
    gpu_nodes: tuple[tuple[int, int], ...] = ()  # (node, number of GPUs there), by node
    nic_nodes: tuple[int, ...] = ()
    vram_mib: int | None = None  # VRAM of the GPUs passed through whole; None: none or unknown
    gpus: tuple[str, ...] = ()  # labels, for messages
    cpus: tuple[int, ...] | None = None  # the admin's choice (--cpus)


@dataclass(frozen=True)
class Proposal:
    """Where the VM's threads and memory should go. `refusal` non-empty: no proposal."""
    vm: str
    vcpus: tuple[int, ...] = ()  # host CPU of vCPU i
    emulator: tuple[int, ...] = ()
    memory_nodes: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()  # where the vCPUs go
    reserve: tuple[int, ...] = ()
    overlaps: tuple[tuple[int, tuple[str, ...]], ...] = ()  # (CPU, other VMs pinned there)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    refusal: str = ""
    fix: str = ""  # with a refusal: what the admin can do

    @property
    def ok(self) -> bool:
        return not self.refusal


def vram_of(snap: HostSnapshot, address: str) -> int | None:
    """VRAM of a GPU in MiB: NVML's figure, else 80 GiB for an H100 (NVML cannot see GPUs on vfio)."""
    g = snap.gpu(address)
    if g is None:
        return None
    if isinstance(g.memory_total_mib, int) and g.memory_total_mib > 0:
        return g.memory_total_mib
    return H100_VRAM_MIB if "H100" in (g.name or "") else None


def request_for(snap: HostSnapshot, vm: Vm, cpus: tuple[int, ...] | None = None) -> PinRequest:
    """The planner's view of `vm`: its GPUs' and NICs' NUMA nodes, guest threads and memory."""
    topo_nodes = {n.id for n in snap.numa_nodes}
    single = next(iter(topo_nodes)) if len(topo_nodes) == 1 else None
    gpu_count: dict[int, int] = {}
    gpus, vram, vram_known = [], 0, True
    for addr in sorted({h.gpu for h in vm.hostdevs if h.gpu}):
        g = snap.gpu(addr)
        if g is None:
            continue
        node = g.numa_node if g.numa_node is not None else single
        if node is not None:
            gpu_count[node] = gpu_count.get(node, 0) + 1
        gpus.append(f"GPU {g.index} {g.address}")
        whole = any(h.type == "pci" and h.address == addr for h in vm.hostdevs)
        if whole:  # a MIG slice or vGPU has only part of the VRAM: no rule for those
            v = vram_of(snap, addr)
            vram_known = vram_known and v is not None
            vram += v or 0
    nics = set()
    for h in vm.hostdevs:
        dev = snap.pci(h.address) if h.type == "pci" and h.address and not h.gpu else None
        if dev is not None and dev.base_class == NIC_CLASS:
            node = dev.numa_node if dev.numa_node is not None else single
            if node is not None:
                nics.add(node)
    return PinRequest(vm=vm.name, vcpus=vm.vcpus, threads_per_core=max(1, vm.threads_per_core),
                      memory_kib=vm.memory_kib, gpu_nodes=tuple(sorted(gpu_count.items())),
                      nic_nodes=tuple(sorted(nics)), vram_mib=vram if vram and vram_known else None,
                      gpus=tuple(gpus), cpus=cpus)


def busy_cpus(snap: HostSnapshot, topo: Topology, exclude: str) -> dict[int, tuple[str, ...]]:
    """CPU → the other defined VMs (running, paused or shut off) whose vCPUs or emulator threads are
    pinned there. A pin to every online CPU is no pin at all."""
    out: dict[int, set[str]] = {}
    for v in snap.vms:
        if v.name == exclude:
            continue
        for cpus in [p.cpus for p in v.pins] + [v.emulator_pins]:
            if cpus and not topo.online <= set(cpus):
                for c in cpus:
                    out.setdefault(c, set()).add(v.name)
    return {c: tuple(sorted(names)) for c, names in sorted(out.items())}


# -- placement ----------------------------------------------------------------------------------------

def _assign(k: int, threads: int, cores: list[tuple[int, ...]], pool: set[int]) -> list[int]:
    """Up to k CPUs out of `pool`, in vCPU order. Guest thread groups (`threads` > 1) go onto one host
    core each, whole free cores first; a guest without threads takes the first thread of every free
    core before any second thread. Deterministic: ties go to the lowest CPU id."""
    left = set(pool)
    out: list[int] = []
    if threads > 1:
        while len(out) < k:
            want = min(threads, k - len(out))
            fits = [c for c in cores if sum(x in left for x in c) >= want]
            if not fits:
                break
            core = min(fits, key=lambda c: (not set(c) <= left, c))
            take = [x for x in core if x in left][:want]
            out += take
            left -= set(take)
    if len(out) < k:
        whole = [c for c in cores if set(c) <= left]
        part = [c for c in cores if not set(c) <= left]
        depth = max((len(c) for c in cores), default=0)
        order = [c[i] for i in range(depth) for c in whole if i < len(c)]
        order += [x for c in part for x in c if x in left]
        out += [x for x in order if x in left][:k - len(out)]
    return out


def _split(req: PinRequest) -> list[tuple[int, int]]:
    """(node, vCPUs) for a VM whose GPUs sit on several nodes: shared by GPU count, in whole guest
    cores, every node at least one core when there are enough."""
    t = req.threads_per_core if req.vcpus % req.threads_per_core == 0 else 1
    groups = req.vcpus // t
    total = sum(n for _, n in req.gpu_nodes)
    shares = [(node, groups * n // total) for node, n in req.gpu_nodes]
    left = groups - sum(s for _, s in shares)
    shares = [(node, s + (1 if i < left else 0)) for i, (node, s) in enumerate(shares)]
    return [(node, s * t) for node, s in shares if s]


@dataclass(frozen=True)
class Busy:
    """Other VMs' pins as the planner avoids them: CPU → the VMs pinned there, and each VM's state."""
    cpus: dict[int, tuple[str, ...]]
    states: dict[str, str] = field(default_factory=dict)

    def who(self, names: Iterable[str], cpus_of: dict[str, list[int]] | None = None) -> str:
        """'VM a (running)' / 'VMs a (running, CPU 4-5) and b (shut off, CPU 6)'."""
        names = sorted(set(names))
        parts = []
        for n in names:
            extra = [self.states[n]] if self.states.get(n) else []
            if cpus_of is not None and cpus_of.get(n):
                extra.append(f"CPU {format_cpulist(cpus_of[n])}")
            parts.append(n + (f" ({', '.join(extra)})" if extra else ""))
        head = "VM " if len(parts) == 1 else "VMs "
        return head + (parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1])

    def of(self, cpus: Iterable[int]) -> dict[str, list[int]]:
        """VM → which of `cpus` it is pinned to."""
        out: dict[str, list[int]] = {}
        for c in sorted(set(cpus)):
            for n in self.cpus.get(c, ()):
                out.setdefault(n, []).append(c)
        return out


def busy_of(snap: HostSnapshot, topo: Topology, exclude: str) -> Busy:
    """`busy_cpus` with the VMs' states, for messages."""
    return Busy(busy_cpus(snap, topo, exclude), {v.name: v.state for v in snap.vms})


def propose(topo: Topology, req: PinRequest, reserve: tuple[int, ...],
            busy: dict[int, tuple[str, ...]] | Busy, allow_overlap: bool = False) -> Proposal:
    """Place `req` on `topo`, leaving `reserve` to the host and never onto `busy` CPUs (other VMs'
    pins), unless `allow_overlap`: then busy CPUs are shared when the node has too few others."""
    taken = busy if isinstance(busy, Busy) else Busy(dict(busy))
    base = Proposal(vm=req.vm, reserve=tuple(sorted(reserve)))
    if req.vcpus < 1:
        return _with(base, refusal=f"VM {req.vm} has no vCPUs", fix="give the VM vCPUs (virsh setvcpus)")
    reserved = set(reserve)
    warnings: list[str] = []
    notes: list[str] = []
    if req.cpus is not None:
        got = _place_listed(topo, req, reserve, taken, allow_overlap, base, warnings, notes)
    else:
        got = _place_by_devices(topo, req, reserved, taken, allow_overlap, base, warnings)
    if isinstance(got, Proposal):
        return got  # refused
    placed, nodes = got
    overlaps = tuple((c, taken.cpus[c]) for c in sorted(set(placed)) if c in taken.cpus)
    if overlaps:
        shared = taken.of(c for c, _ in overlaps)
        warnings.append(f"CPU {format_cpulist(c for c, _ in overlaps)} shared on purpose (overlap allowed) "
                        f"with {taken.who(shared, shared)}: the VMs compete for those CPUs whenever both run")
    emulator = tuple(c for c in sorted(reserved) if c in topo.online and topo.node_of.get(c) in nodes)
    emulator = emulator or tuple(c for c in sorted(reserved) if c in topo.online)
    if not emulator:
        notes.append("no host reserve: the emulator threads stay unpinned")
    warnings += _size_warnings(topo, req, placed, nodes)
    return Proposal(vm=req.vm, vcpus=tuple(placed), emulator=emulator, memory_nodes=nodes, nodes=nodes,
                    reserve=base.reserve, overlaps=overlaps, warnings=tuple(warnings), notes=tuple(notes))


def _place_listed(topo: Topology, req: PinRequest, reserve: tuple[int, ...], busy: Busy, allow_overlap: bool,
                  base: Proposal, warnings: list[str], notes: list[str]) -> tuple[list[int], tuple[int, ...]] | Proposal:
    """--cpus: the vCPUs on the listed CPUs (shared when the list is shorter). The CPUs and their nodes,
    or a refusal (a listed CPU in the reserve, or pinned by another VM without `allow_overlap`)."""
    assert req.cpus is not None
    reserved = set(reserve)
    chosen = sorted(set(req.cpus))
    if not chosen:
        return _with(base, refusal="--cpus names no CPU", fix="name the host CPUs, e.g. --cpus 4-7")
    inside = sorted(reserved & set(chosen))
    if inside:
        return _with(base, refusal=f"CPU {format_cpulist(inside)} is in the host reserve "
                                   f"({format_cpulist(reserve)}): the host keeps those for itself",
                     fix="choose CPUs outside the reserve, or set the reserve with --reserve LIST")
    pinned = busy.of(chosen)
    if pinned and not allow_overlap:
        cpus = sorted({c for v in pinned.values() for c in v})
        return _with(base, refusal=f"CPU {format_cpulist(cpus)} of --cpus is pinned to "
                                   f"{busy.who(pinned, pinned)}",
                     fix="choose other CPUs, or add --allow-overlap to share them on purpose")
    nodes = tuple(sorted({topo.node_of[c] for c in chosen}))
    cores = sorted({tuple(x for x in topo.siblings[c] if x in chosen) for c in chosen})
    placed = _assign(min(req.vcpus, len(chosen)), _threads(req), cores, set(chosen))
    if req.vcpus > len(chosen):  # asked for: the list is shorter than the VM
        placed = [placed[i % len(placed)] for i in range(req.vcpus)]
        notes.append(f"{req.vcpus} vCPUs share {len(chosen)} CPU(s), as --cpus asks")
    gpu_nodes = {n for n, _ in req.gpu_nodes}
    if gpu_nodes and not set(nodes) <= gpu_nodes:
        warnings.append(f"--cpus puts vCPUs on node {format_cpulist(nodes)} but the GPUs are on node "
                        f"{format_cpulist(gpu_nodes)}: GPU traffic crosses the socket link")
    return placed, nodes


def _place_by_devices(topo: Topology, req: PinRequest, reserved: set[int], busy: Busy, allow_overlap: bool,
                      base: Proposal, warnings: list[str]) -> tuple[list[int], tuple[int, ...]] | Proposal:
    """The vCPUs on the nodes of the VM's GPUs (split between them), else of its NIC. The CPUs and their
    nodes, or a refusal."""
    if req.gpu_nodes:
        targets = _split(req) if len(req.gpu_nodes) > 1 else [(req.gpu_nodes[0][0], req.vcpus)]
        if len(req.gpu_nodes) > 1:
            warnings.append(f"the GPUs of VM {req.vm} sit on nodes "
                            f"{format_cpulist(n for n, _ in req.gpu_nodes)}: its vCPUs are split "
                            "(" + ", ".join(f"{k} on node {n}" for n, k in targets) + "); traffic "
                            "between the halves crosses the socket link. Give it GPUs of one node")
    elif req.nic_nodes:
        targets = [(req.nic_nodes[0], req.vcpus)]
    else:
        return _with(base, refusal=f"VM {req.vm} has no GPU or NIC to align its vCPUs with",
                     fix=f"choose its CPUs: nodeconsole pin {req.vm} --cpus LIST")
    if -1 in {n for n, _ in targets}:
        return _with(base, refusal="the NUMA node of the VM's GPU is unknown (numa_node -1)",
                     fix=f"choose its CPUs: nodeconsole pin {req.vm} --cpus LIST")
    placed: list[int] = []
    for node, k in targets:
        got, err, crowded = _place_on_node(topo, node, k, _threads(req), reserved, busy, allow_overlap)
        if crowded:
            return _with(base, refusal=f"VM {req.vm} needs {k} CPUs on node {node}: {err}",
                         fix=f"add --allow-overlap to share CPUs with those VMs on purpose, re-pin or remove "
                             f"one of them, give VM {req.vm} fewer vCPUs, or choose its CPUs with --cpus LIST")
        if err:
            return _with(base, refusal=f"VM {req.vm} needs {k} CPUs on node {node}: {err}",
                         fix=f"give the VM fewer vCPUs, or choose its CPUs: nodeconsole pin {req.vm} "
                             "--cpus LIST (a list shorter than its vCPUs shares CPUs)")
        placed += got
    nodes = tuple(sorted({n for n, _ in targets}))
    other_nics = sorted(set(req.nic_nodes) - set(nodes))
    if other_nics:
        warnings.append(f"VM {req.vm}'s NIC sits on node {format_cpulist(other_nics)}, away from its "
                        f"vCPUs on node {format_cpulist(nodes)}: network interrupts cross the link")
    return placed, nodes


def _threads(req: PinRequest) -> int:
    # a topology libvirt would not accept (vCPUs not a multiple of threads) is treated as no threads
    return req.threads_per_core if req.vcpus % req.threads_per_core == 0 else 1


def _place_on_node(topo: Topology, node: int, k: int, threads: int, reserved: set[int], busy: Busy,
                   allow_overlap: bool) -> tuple[list[int], str, bool]:
    """k CPUs of `node`: (CPUs, why not, whether other VMs' pins are what is in the way)."""
    usable = [c for c in topo.node_cpus(node) if c not in reserved]
    if len(usable) < k:
        return [], f"node {node} has {len(usable)} online CPU(s) outside the host reserve", False
    cores = topo.cores(node)
    free = {c for c in usable if c not in busy.cpus}
    got = _assign(k, threads, cores, free)
    if len(got) < k and not allow_overlap:
        held = busy.of(c for c in usable if c in busy.cpus)
        return [], (f"node {node} has {len(free)} CPU(s) outside the host reserve that no other VM is "
                    f"pinned to; the others are pinned to {busy.who(held, held)}"), True
    if len(got) < k:  # allowed: share the least crowded of the other VMs' CPUs, the plan says so; a
        # stopped VM's CPU before a running one's (nothing competes for it until that VM starts)
        def crowd(c: int) -> tuple[int, int]:
            users = busy.cpus[c]
            return sum(busy.states.get(n) not in INACTIVE for n in users), len(users)
        shared = [c for c in usable if c in busy.cpus]
        for level in sorted({crowd(c) for c in shared}):
            tier = {c for c in shared if crowd(c) <= level} - set(got)
            got += _assign(k - len(got), threads, cores, tier)
            if len(got) == k:
                break
    return got, "", False


def _size_warnings(topo: Topology, req: PinRequest, placed: list[int], nodes: tuple[int, ...]) -> list[str]:
    out = []
    for node in nodes:
        cores = topo.cores(node)
        used = {topo.siblings[c] for c in placed if topo.node_of.get(c) == node}
        if cores and len(used) > CORE_SHARE_WARN * len(cores):
            out.append(f"VM {req.vm} takes {len(used)} of node {node}'s {len(cores)} physical cores "
                       f"(more than {CORE_SHARE_WARN:.0%}): leave the rest to the host")
    if req.vram_mib:
        want = MEMORY_PER_VRAM * req.vram_mib * 1024
        if req.memory_kib < want:
            out.append(f"VM {req.vm} has {_gib(req.memory_kib)} of memory, below {MEMORY_PER_VRAM}× the "
                       f"{_gib(req.vram_mib * 1024)} VRAM of its GPUs ({_gib(want)}): data loading may "
                       "starve the GPUs")
    node_mem = sum(topo.node_memory_kib.get(n, 0) for n in nodes)
    if node_mem and req.memory_kib > node_mem:
        out.append(f"VM {req.vm} has {_gib(req.memory_kib)} of memory but node {format_cpulist(nodes)} only "
                   f"{_gib(node_mem)}: a strict memory policy cannot hold it")
    return out


def _gib(kib: int) -> str:
    return f"{kib / 1048576:.0f} GiB"


def _with(p: Proposal, *, refusal: str, fix: str) -> Proposal:
    from dataclasses import replace

    return replace(p, refusal=refusal, fix=fix)
