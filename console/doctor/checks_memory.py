"""Memory & CPUs: hugepages, host-cores, vcpu-commit, numa-balancing."""
from __future__ import annotations

import math
import shlex
from collections.abc import Callable

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, Verdict, active, gib, names
from nodeconsole.console.doctor.files import (
    SYSCTL_DIRS,
    SYSTEMD_CONF_DIRS,
    HostFiles,
    cpu_set,
    kernel_cpu_list,
    meminfo_kib,
    sysctl_value,
    systemd_setting,
)
from nodeconsole.console.doctor.model import CheckResult, Evidence, Fix
from nodeconsole.console.model import Gpu, HostSnapshot, Vm
from nodeconsole.console.root import Root
from nodeconsole.console.vm_sizing import memory_nodes


def _size_name(kib: int) -> str:
    return f"{kib // 1048576} GiB" if kib >= 1048576 else f"{kib // 1024} MiB" if kib >= 1024 else f"{kib} KiB"


def vm_memory_nodes(ctx: Context, vm: Vm) -> list[int]:
    """The NUMA nodes a VM's memory comes from (console/vm_sizing.py `memory_nodes`)."""
    return list(memory_nodes(ctx.snap, vm))


# -- hugepages ----------------------------------------------------------------------------------------

def check_hugepages(ctx: Context) -> CheckResult:
    v = Verdict("hugepages")
    snap = ctx.snap
    f = ctx.files
    nodes = [n for n in snap.numa_nodes if n.online and n.memory_kib > 0]
    if not nodes:
        v.missing.append(ctx.source_down("sysfs") or f.missing(facts.NODE_DIR))
        return v.result("")
    default = meminfo_kib(f.read("proc/meminfo"), "Hugepagesize") or 2048
    reserve = {(n.id, size): nr * size for n in nodes for size, nr in n.hugepages}
    for n in nodes:
        parts = []
        for size, nr in n.hugepages:
            free = f.read(f"{facts.NODE_DIR}/node{n.id}/hugepages/hugepages-{size}kB/free_hugepages")
            if nr or size == default:
                parts.append(f"{nr} x {_size_name(size)}" + (f" ({free} free)" if free is not None else ""))
        v.read(f"{facts.NODE_DIR}/node{n.id}/hugepages", ", ".join(parts) or "none")
    down = ctx.source_down("libvirt")
    if down:
        v.missing.append(down)
        return v.result("")
    need = _Needs(ctx, default)
    short: dict[tuple[int, int], int] = {}
    for key, total in sorted(need.all.items()):
        node, size = key
        have = reserve.get(key, 0)
        running = need.running.get(key, 0)
        text = (f"node {node}: {gib(running if running > have else total)} of {_size_name(size)} pages needed "
                f"({names(need.who[key], 4)}), {gib(have)} reserved")
        if running > have:
            v.fails.append(text + " — running VMs exceed the reserve")
        elif total > have:
            v.warns.append(text + " — the shut-off VMs cannot all start")
        if total > have:
            short[key] = math.ceil(total / size)
    pinned_gpu = [vm for vm in ctx.gpu_vms if ctx.pins[vm.name]]
    if not need.vms and not any(reserve.values()) and pinned_gpu:
        v.warns.append("no huge pages are reserved on a host with pinned GPU VMs "
                       f"({names([vm.name for vm in pinned_gpu], 4)})")
        for vm in pinned_gpu:  # what 1 GiB pages for them would take
            where = vm_memory_nodes(ctx, vm)
            for node in where:
                key = (node, 1048576)
                short[key] = short.get(key, 0) + math.ceil(vm.memory_kib / len(where) / 1048576)
    free_gpus = [g for g in snap.gpus if not g.owner.vms]
    if not snap.vms and free_gpus and not any(reserve.values()):
        v.warns.append(f"no huge pages are reserved on a host with {len(free_gpus)} free GPU(s) and no VM: the GPU "
                       "VMs it is meant to run need them (1 GiB pages for the largest training VM on each node)")
        for node, pages in training_pages(snap).items():
            short[(node, 1048576)] = pages
    if short:
        v.fix = _hugepages_fix(ctx, short, reserve)
    if not need.vms:
        kept = sum(reserve.values())
        return v.result("no VM asks for huge pages" + (f"; {gib(kept)} reserved for the GPU VMs to come" if kept
                                                        and not snap.vms else ""))
    return v.result("; ".join(f"node {node}: {gib(total)} of {_size_name(size)} pages needed, "
                              f"{gib(reserve.get((node, size), 0))} reserved"
                              for (node, size), total in sorted(need.all.items())))


TRAINING_SHARE = 0.75  # of a node's memory, at most, given to hugepages for a training VM not yet defined
TRAINING_FACTOR = 2  # a training VM gets 2x the memory of its GPUs (facts.VM_MEMORY_MIN_FACTOR)


def nvml_memory(g: Gpu) -> int | None:
    return g.memory_total_mib if isinstance(g.memory_total_mib, int) and g.memory_total_mib > 0 else None


def training_pages(snap: HostSnapshot, vram_mib: Callable[[Gpu], int | None] = nvml_memory) -> dict[int, int]:
    """1 GiB pages per NUMA node for the largest training VM each node could hold: twice the memory of
    the free GPUs (held by no VM) on it (`vram_mib`: NVML's figure, or the caller's), at most 75 % of the
    node's memory. Nodes without a free GPU of known memory get none."""
    vram: dict[int, int] = {}
    for g in snap.gpus:
        mib = vram_mib(g) if not g.owner.vms and g.numa_node is not None else None
        if mib and g.numa_node is not None:
            vram[g.numa_node] = vram.get(g.numa_node, 0) + mib
    out = {}
    for n in snap.numa_nodes:
        if n.online and n.memory_kib > 0 and vram.get(n.id):
            want = math.ceil(TRAINING_FACTOR * vram[n.id] / 1024)
            out[n.id] = min(want, int(n.memory_kib * TRAINING_SHARE) // 1048576)
    return {n: p for n, p in out.items() if p > 0}


class _Needs:
    """The huge page memory (KiB) the VMs that ask for huge pages need, per (node, page size): all of
    them (`all`), the running or paused ones (`running`), and who (`who`)."""

    def __init__(self, ctx: Context, default_kib: int) -> None:
        self.vms = [vm for vm in ctx.snap.vms if vm.hugepages_kib is not None]
        self.all: dict[tuple[int, int], float] = {}
        self.running: dict[tuple[int, int], float] = {}
        self.who: dict[tuple[int, int], list[str]] = {}
        for vm in self.vms:
            size = vm.hugepages_kib or default_kib
            where = vm_memory_nodes(ctx, vm)
            for node in where:
                key = (node, size)
                share = vm.memory_kib / len(where)
                self.all[key] = self.all.get(key, 0) + share
                self.who.setdefault(key, []).append(vm.name)
                if active(vm):
                    self.running[key] = self.running.get(key, 0) + share


def _hugepages_fix(ctx: Context, short: dict[tuple[int, int], int], reserve: dict[tuple[int, int], int]) -> Fix:
    """Reserve what each node lacks now (sysfs, per node) and at boot: the kernel spreads hugepages=N
    evenly over the nodes, so N is the largest per-node need times the number of nodes."""
    cmds = []
    for (node, size), pages in sorted(short.items()):
        cmds.append(f"echo {pages} > /{facts.NODE_DIR}/node{node}/hugepages/hugepages-{size}kB/nr_hugepages")
    nodes = [n.id for n in ctx.snap.numa_nodes if n.online and n.memory_kib > 0] or [0]
    words = []
    for size in sorted({size for _, size in short}):
        per_node = max(max(short.get((n, size), 0), reserve.get((n, size), 0) // size) for n in nodes)
        name = "1G" if size == 1048576 else "2M" if size == 2048 else f"{size}K"
        words += [f"hugepagesz={name}", f"hugepages={per_node * len(nodes)}"]
    boot = (ctx.loader.commands(words, []) if ctx.loader.known
            else (f"add {' '.join(words)} to the kernel command line",))
    return Fix("reserve huge pages on the VMs' nodes now (sysfs) and at boot (kernel command line)",
               tuple(cmds) + tuple(boot), False, True)


# -- host-cores ---------------------------------------------------------------------------------------

def host_cpus(ctx: Context, v: Verdict) -> tuple[set[int] | None, str]:
    """(CPUs kept for the host, how), None when nothing keeps any; what could not be read goes to
    `v.missing`."""
    f = ctx.files
    online = set(ctx.online)
    isolated: set[int] = set()
    how = ""
    words = ctx.cmdline
    if words is None:
        v.missing.append(f.missing(facts.CMDLINE))
    else:
        found = []
        for w in words:
            for key in ("isolcpus=", "nohz_full="):
                if w.startswith(key):
                    cpus = kernel_cpu_list(w[len(key):])
                    if cpus:
                        isolated |= set(cpus)
                        found.append(w)
        v.read(facts.CMDLINE, " ".join(found) or "no isolcpus= / nohz_full=")
        if isolated:
            how = " ".join(found)
    affinity = None
    if f.has_tree("etc"):
        files = []
        base = f.read(facts.SYSTEMD_CONF)
        if base is not None:
            files.append((facts.SYSTEMD_CONF, base))
        files += f.conf_files(SYSTEMD_CONF_DIRS)
        setting = systemd_setting(files, "Manager", "CPUAffinity")
        if setting is not None and setting[1]:
            affinity = cpu_set(setting[1])
            v.read(setting[0], f"CPUAffinity={setting[1]}")
            how = f"CPUAffinity={setting[1]} (/{setting[0]})"
        elif denied := f.denied_under(facts.SYSTEMD_CONF, *SYSTEMD_CONF_DIRS):
            v.missing.append(denied)
        else:
            v.read(facts.SYSTEMD_CONF_D, "no CPUAffinity=")
    elif not isolated:  # isolcpus=/nohz_full= already say which CPUs the host keeps
        v.missing.append(f.missing(facts.SYSTEMD_CONF) + " (systemd CPUAffinity=)")
    if affinity:
        kept = set(affinity) & online
        if isolated:
            kept -= isolated
        return kept, how
    if isolated:
        return online - isolated, how
    return None, ""


def kept_host_cpus(snap: HostSnapshot, root: Root) -> tuple[frozenset[int] | None, str]:
    """The online CPUs the host keeps for itself, as the host-cores check reads them (isolcpus= and
    nohz_full= on the running kernel's command line, systemd's CPUAffinity=), and how they are kept
    ("CPUAffinity=0-1,32-33 (/etc/systemd/system.conf.d/…)"). None when nothing keeps any, or when what
    would say so cannot be read."""
    kept, how = host_cpus(Context(snap, HostFiles(root), "mixed"), Verdict("host-cores"))
    return (frozenset(kept) if kept else None), how


def check_host_cores(ctx: Context) -> CheckResult:
    v = Verdict("host-cores")
    snap = ctx.snap
    if not ctx.online:
        v.missing.append(ctx.source_down("sysfs") or "no CPU read")
        return v.result("")
    kept, how = host_cpus(ctx, v)
    down = ctx.source_down("libvirt")
    if kept is None:
        if not v.missing:
            v.warns.append("no CPUs are kept for the host (no isolcpus=/nohz_full= on the command line, no "
                           "systemd CPUAffinity=)")
            v.fix = _cores_fix(ctx, None if down else _pinned_cpus(ctx))
        return v.result("")
    nodes = [n for n in snap.numa_nodes if n.cpus]
    bare = [n.id for n in nodes if not kept & set(n.cpus)]
    if bare:
        v.warns.append(f"no CPU is kept for the host on node(s) {', '.join(map(str, bare))}")
        v.fix = _cores_fix(ctx, None if down else _pinned_cpus(ctx), kept)
    if down:
        v.missing.append(down)
    else:
        onto = []
        for vm in snap.vms:
            hit = sorted({c for p in ctx.pins[vm.name] for c in p.cpus} & kept)
            if hit:
                onto.append((vm.name, format_cpulist(hit)))
        if onto:
            v.fails.append("VMs pinned onto the host's CPUs: " + names([f"{n} on CPU {c}" for n, c in onto], 4))
            v.fix = Fix(f"re-pin those VMs off the host's CPUs ({format_cpulist(sorted(kept))})",
                        tuple(f"nodeconsole pin {shlex.quote(n)}" for n, _ in onto[:4]), False, False)
    per_node = "; ".join(f"node {n.id}: {format_cpulist(sorted(kept & set(n.cpus))) or '-'}" for n in nodes)
    return v.result(f"kept for the host by {how}: {per_node}; no VM pinned onto them")


def _pinned_cpus(ctx: Context) -> set[int]:
    return {c for pins in ctx.pins.values() for p in pins for c in p.cpus}


def _cores_fix(ctx: Context, pinned: set[int] | None, kept: set[int] | None = None) -> Fix:
    """Keep one core (all its threads) per node that lacks one, the first core no VM is pinned to."""
    snap = ctx.snap
    chosen = set(kept or ())
    by_id = {c.id: c for c in snap.cpus}
    for n in snap.numa_nodes:
        if not n.cpus or chosen & set(n.cpus):
            continue
        for cid in n.cpus:
            cpu = by_id.get(cid)
            core = set(cpu.siblings if cpu and cpu.siblings else (cid,))
            if pinned is None or not core & pinned:
                chosen |= core & set(n.cpus)
                break
    value = ",".join(str(c) for c in sorted(chosen))
    if not value:
        return Fix("keep a core per NUMA node for the host (systemd CPUAffinity=)", (), True, False)
    return Fix(f"keep CPUs {format_cpulist(sorted(chosen))} for the host (systemd CPUAffinity=), then reboot",
               (f"printf '[Manager]\\nCPUAffinity={value}\\n' > /{facts.HOST_CORES_FILE}",), True, True)


# -- vcpu-commit --------------------------------------------------------------------------------------

def check_vcpu_commit(ctx: Context) -> CheckResult:
    v = Verdict("vcpu-commit")
    snap = ctx.snap
    threads = len(ctx.online)
    if not threads:
        v.missing.append(ctx.source_down("sysfs") or "no CPU read")
    down = ctx.source_down("libvirt")
    if down:
        v.missing.append(down)
    if v.missing:
        return v.result("")
    defined = sum(vm.vcpus for vm in snap.vms)
    running = sum(vm.vcpus for vm in snap.vms if active(vm))
    v.evidence.append(Evidence("libvirt", f"{defined} vCPUs defined, {running} running or paused, "
                                  f"{len(snap.vms)} VMs; {threads} host threads online"))
    limit = facts.VCPU_WARN_RATIO
    for count, what in ((defined, "of the defined VMs"), (running, "of the running VMs")):
        if count / threads > limit:
            v.warns.append(f"{count} vCPUs {what} on {threads} host threads = {100 * count / threads:.0f} % "
                           f"(above {100 * limit:.0f} %)")
            break
    overlaps = _pinned_overlaps(ctx)
    for vms, vcpus, cpus in overlaps:
        v.fails.append(f"pinned vCPUs of {names(vms, 4)}: {vcpus} on {len(cpus)} CPU(s) "
                       f"{format_cpulist(sorted(cpus))} = {100 * vcpus / len(cpus):.0f} %")
    if overlaps:
        v.fix = Fix("re-pin the VMs so no two running vCPUs share a CPU (nodeconsole pin VM), or stop one",
                    tuple(f"nodeconsole pin {shlex.quote(n)}" for n in overlaps[0][0][:3]), False, False)
    elif v.warns:
        v.fix = Fix(f"give VMs fewer vCPUs or move some to another host: keep them at most "
                    f"{100 * limit:.0f} % of the host's {threads} threads ({int(threads * limit)} vCPUs)",
                    (), False, False)
    return v.result(f"{defined} vCPUs defined ({100 * defined / threads:.0f} %), {running} running "
                    f"({100 * running / threads:.0f} %) on {threads} host threads")


def _pinned_overlaps(ctx: Context) -> list[tuple[list[str], int, set[int]]]:
    """Groups of running pinned vCPUs whose CPU sets overlap, where they outnumber the CPUs they share:
    (VM names, vCPUs, CPUs)."""
    parent: dict[int, int] = {}

    def find(c: int) -> int:
        while parent.setdefault(c, c) != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    pins = [(vm.name, p.cpus) for vm in ctx.snap.vms if active(vm) for p in ctx.pins[vm.name] if p.cpus]
    for _, cpus in pins:
        first = find(cpus[0])
        for c in cpus[1:]:
            parent[find(c)] = first
    groups: dict[int, tuple[list[str], list[int], set[int]]] = {}
    for name, cpus in pins:
        vms, count, cset = groups.setdefault(find(cpus[0]), ([], [0], set()))
        if name not in vms:
            vms.append(name)
        count[0] += 1
        cset.update(cpus)
    return [(vms, count[0], cset) for vms, count, cset in groups.values() if count[0] > len(cset)]


# -- numa-balancing -----------------------------------------------------------------------------------

def check_numa_balancing(ctx: Context) -> CheckResult:
    v = Verdict("numa-balancing")
    f = ctx.files
    down = ctx.source_down("libvirt")
    if down:
        v.missing.append(down)
        return v.result("")
    pinned = ctx.pinned_vms
    if not pinned:
        return v.result("no VM is pinned")
    if len([n for n in ctx.snap.numa_nodes if n.cpus]) == 1:
        return v.result("one NUMA node: nothing to balance")
    live = f.read(facts.NUMA_BALANCING)
    fix = Fix("turn automatic NUMA balancing off now and at boot (sysctl kernel.numa_balancing = 0)",
              (f"echo 0 > /{facts.NUMA_BALANCING}",
               f"printf 'kernel.numa_balancing = 0\\n' > /{facts.SYSCTL_FILE}"), False, True)
    if live is None:
        v.missing.append(f.missing(facts.NUMA_BALANCING))
        return v.result("")
    else:
        v.read(facts.NUMA_BALANCING, live)
        if live != "0":
            v.warns.append(f"numa_balancing is {live} on a host with {len(pinned)} pinned VM(s) "
                           f"({names([vm.name for vm in pinned], 3)})")
            v.fix = fix
            return v.result("")
    if not f.has_tree("etc"):
        v.missing.append(f.missing(facts.SYSCTL_D) + " (the setting at boot)")
        return v.result("")
    files = f.conf_files(SYSCTL_DIRS)
    conf = f.read("etc/sysctl.conf")
    if conf is not None:
        files.append(("etc/sysctl.conf", conf))
    boot = sysctl_value(files, "kernel.numa_balancing")
    denied = f.denied_under(*SYSCTL_DIRS, "etc/sysctl.conf")
    if (boot is None or boot[1] != "0") and denied:
        v.missing.append(denied)
        return v.result("")
    v.read(boot[0] if boot else facts.SYSCTL_D, f"kernel.numa_balancing = {boot[1]}" if boot else "not set")
    if boot is None or boot[1] != "0":
        v.warns.append("numa_balancing is 0 now but nothing sets it at boot: it is back on after a reboot")
        v.fix = fix
    return v.result(f"numa_balancing is 0 now and at boot ({len(pinned)} pinned VM(s))")
