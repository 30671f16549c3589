"""CPUs, NUMA nodes and procfs of a synthetic host, laid out as Linux writes them."""
from __future__ import annotations

from dataclasses import dataclass

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.spec import HostSpec

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"
HUGE_SIZES_KIB = (2048, 1048576)


def format_cpumask(cpus, nbits: int) -> str:
    """Linux's bitmap print: hex, one digit per 4 of `nbits` CPUs, comma every 32 bits
    (112 possible CPUs → "0000,00000000,00000000,00ff00ff")."""
    value = 0
    for c in cpus:
        value |= 1 << c
    digits = max(1, (nbits + 3) // 4)
    text = f"{value:0{digits}x}"
    head = len(text) % 8 or 8
    parts = [text[:head]] + [text[i:i + 8] for i in range(head, len(text), 8)]
    return ",".join(parts)


@dataclass(frozen=True)
class CpuLayout:
    """Where every CPU sits: computed once, shared by the PCI and libvirt writers."""
    cpus: tuple[tuple[int, int, int, int, int], ...]  # (id, socket, core, thread, node)
    online: tuple[int, ...]
    nr_possible: int
    node_cpus: dict[int, tuple[int, ...]]  # node → every CPU of the node (online or not)

    def node_online(self, node: int) -> tuple[int, ...]:
        on = set(self.online)
        return tuple(c for c in self.node_cpus.get(node, ()) if c in on)


def cpu_layout(spec: HostSpec) -> CpuLayout:
    c = spec.cpu
    if c.cores_per_socket % c.nodes_per_socket:
        raise ValueError("cores_per_socket must divide evenly between the nodes of a socket")
    per_node = c.cores_per_socket // c.nodes_per_socket
    cpus = []
    for t in range(c.threads_per_core):
        for s in range(c.sockets):
            for core in range(c.cores_per_socket):
                cid = t * c.sockets * c.cores_per_socket + s * c.cores_per_socket + core
                cpus.append((cid, s, core, t, s * c.nodes_per_socket + core // per_node))
    cpus.sort()
    bad = [x for x in c.offline if not 0 <= x < len(cpus)]
    if bad:
        raise ValueError(f"offline CPUs {bad} do not exist")
    node_cpus: dict[int, list[int]] = {n: [] for n in range(c.nodes)}
    for cid, _s, _core, _t, node in cpus:
        node_cpus[node].append(cid)
    online = tuple(x[0] for x in cpus if x[0] not in set(c.offline))
    return CpuLayout(tuple(cpus), online, len(cpus) + c.extra_possible,
                     {n: tuple(v) for n, v in node_cpus.items()})


def write_cpus(w: TreeWriter, spec: HostSpec, lay: CpuLayout) -> None:
    n = lay.nr_possible
    online = set(lay.online)
    w.attr(f"{CPU}/possible", format_cpulist(range(n)))
    w.attr(f"{CPU}/present", format_cpulist(x[0] for x in lay.cpus))
    w.attr(f"{CPU}/online", format_cpulist(lay.online))
    w.attr(f"{CPU}/offline", format_cpulist(set(range(n)) - online))
    w.attr(f"{CPU}/kernel_max", 8191)
    w.attr(f"{CPU}/isolated", "")
    w.attr(f"{CPU}/smt/active", 1 if spec.cpu.threads_per_core > 1 else 0)
    threads: dict[tuple[int, int], list[int]] = {}
    package: dict[int, list[int]] = {}
    for cid, s, core, _t, _node in lay.cpus:
        if cid in online:
            threads.setdefault((s, core), []).append(cid)
            package.setdefault(s, []).append(cid)
    for cid, s, core, _t, node in lay.cpus:
        d = f"{CPU}/cpu{cid}"
        w.attr(f"{d}/online", 1 if cid in online else 0)
        w.link(f"{d}/node{node}", f"{NODE}/node{node}")
        if cid not in online:
            continue  # Linux removes the topology directory of an offline CPU
        t = f"{d}/topology"
        sib, pkg = threads[(s, core)], package[s]
        for name, value in (("physical_package_id", s), ("die_id", 0), ("core_id", core),
                            ("thread_siblings_list", format_cpulist(sib)),
                            ("thread_siblings", format_cpumask(sib, n)),
                            ("core_cpus_list", format_cpulist(sib)), ("core_cpus", format_cpumask(sib, n)),
                            ("core_siblings_list", format_cpulist(pkg)),
                            ("core_siblings", format_cpumask(pkg, n)),
                            ("package_cpus_list", format_cpulist(pkg)),
                            ("package_cpus", format_cpumask(pkg, n)),
                            ("die_cpus_list", format_cpulist(pkg)), ("die_cpus", format_cpumask(pkg, n))):
            w.attr(f"{t}/{name}", value)


def node_distance(spec: HostSpec, a: int, b: int) -> int:
    if a == b:
        return 10
    nps = spec.cpu.nodes_per_socket
    return 12 if a // nps == b // nps else 21


def hugepages(spec: HostSpec, node: int) -> dict[int, int]:
    """Pages reserved on `node` by page size (KiB)."""
    out = {2048: spec.hugepages_2m_per_node, 1048576: spec.hugepages_1g_per_node}
    for n, size, nr in spec.hugepages_node_pages:
        if n == node and size in out:
            out[size] = nr
    return out


LIVE_VM = ("running", "paused")  # a VM holds its hugepages while its QEMU process exists


def hugepages_in_use(spec: HostSpec, nodes: list[int]) -> dict[tuple[int, int], int]:
    """(node, page size KiB) → pages held by the live VMs backed by hugepages: a VM's pages come from
    its numatune nodeset (split evenly), else from every node; never more than the node has."""
    used: dict[tuple[int, int], int] = {}
    for vm in spec.vms:
        size = vm.hugepages_kib
        if vm.state not in LIVE_VM or size not in (2048, 1048576):
            continue
        where = [n for n in (vm.numatune[1] if vm.numatune else nodes) if n in nodes] or nodes
        pages = -(-vm.memory_mib * 1024 // size)
        for i, node in enumerate(where):
            share = pages // len(where) + (1 if i < pages % len(where) else 0)
            key = (node, size)
            used[key] = min(hugepages(spec, node)[size], used.get(key, 0) + share)
    return used


def write_nodes(w: TreeWriter, spec: HostSpec, lay: CpuLayout) -> None:
    nodes = sorted(lay.node_cpus)
    all_nodes = format_cpulist(nodes)
    for name in ("online", "possible", "has_memory", "has_normal_memory"):
        w.attr(f"{NODE}/{name}", all_nodes)
    w.attr(f"{NODE}/has_cpu", format_cpulist(n for n in nodes if lay.node_online(n)))
    in_use = hugepages_in_use(spec, nodes)
    for node in nodes:
        huge = hugepages(spec, node)
        d = f"{NODE}/node{node}"
        cpus = lay.node_online(node)
        w.attr(f"{d}/cpulist", format_cpulist(cpus))
        w.attr(f"{d}/cpumap", format_cpumask(cpus, lay.nr_possible))
        w.attr(f"{d}/distance", " ".join(str(node_distance(spec, node, o)) for o in nodes))
        for cid in lay.node_cpus[node]:
            w.link(f"{d}/cpu{cid}", f"{CPU}/cpu{cid}")
        for size, nr in huge.items():
            h = f"{d}/hugepages/hugepages-{size}kB"
            w.attr(f"{h}/nr_hugepages", nr)
            w.attr(f"{h}/free_hugepages", nr - in_use.get((node, size), 0))
            w.attr(f"{h}/surplus_hugepages", 0)
        total = spec.memory_per_node_mib * 1024
        huge_kib = sum(size * nr for size, nr in huge.items())
        used = total // 25 + huge_kib  # a lightly loaded host: 4 % plus the reserved hugepages
        default = default_hugepage_kib(spec)
        lines = [("MemTotal", total), ("MemFree", total - used), ("MemUsed", used),
                 ("FilePages", total // 50), ("AnonPages", total // 100), ("HugePages_Total", huge[default]),
                 ("HugePages_Free", huge[default] - in_use.get((node, default), 0)), ("HugePages_Surp", 0)]
        w.raw(f"{d}/meminfo", "".join(
            f"Node {node} {k + ':':<15} {v:>8}" + ("\n" if k.startswith("HugePages_") else " kB\n")
            for k, v in lines))
    for size in HUGE_SIZES_KIB:
        nr = sum(hugepages(spec, n)[size] for n in nodes)
        free = nr - sum(in_use.get((n, size), 0) for n in nodes)
        w.attr(f"sys/kernel/mm/hugepages/hugepages-{size}kB/nr_hugepages", nr)
        w.attr(f"sys/kernel/mm/hugepages/hugepages-{size}kB/free_hugepages", free)


def default_hugepage_kib(spec: HostSpec) -> int:
    return 1048576 if "default_hugepagesz=1G" in spec.cmdline.split() else 2048


def write_proc(w: TreeWriter, spec: HostSpec, lay: CpuLayout) -> None:
    c = spec.cpu
    w.attr("proc/cmdline", spec.cmdline)
    w.attr("proc/sys/kernel/hostname", spec.hostname)
    w.attr("proc/sys/kernel/osrelease", spec.kernel_release)
    w.attr("proc/version", f"Linux version {spec.kernel_release} (build@{spec.hostname}) "
                           f"(gcc (GCC) 13.2.0) #1 SMP PREEMPT_DYNAMIC")
    online = set(lay.online)
    per_pkg = {s: sum(1 for x in lay.cpus if x[1] == s and x[0] in online) for s in range(c.sockets)}
    virt = ("vmx " if c.vendor_id == "GenuineIntel" else "svm ") if c.virtualization else ""
    flags = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
             f"sse sse2 {'ht ' if c.threads_per_core > 1 else ''}syscall nx pdpe1gb rdtscp lm "
             f"constant_tsc nopl xtopology pni pclmulqdq {virt}ssse3 fma cx16 pcid sse4_1 sse4_2 "
             "x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm abm avx2 bmi1 bmi2 avx512f")
    blocks = []
    shift = max(1, (c.threads_per_core - 1).bit_length())
    for cid, s, core, t, _node in lay.cpus:
        if cid not in online:
            continue
        apic = (s << 8) | (core << shift) | t
        blocks.append(
            f"processor\t: {cid}\nvendor_id\t: {c.vendor_id}\ncpu family\t: {c.family}\n"
            f"model\t\t: {c.model}\nmodel name\t: {c.model_name}\nstepping\t: {c.stepping}\n"
            f"cpu MHz\t\t: {c.mhz:.3f}\ncache size\t: 107520 KB\nphysical id\t: {s}\n"
            f"siblings\t: {per_pkg[s]}\ncore id\t\t: {core}\ncpu cores\t: {c.cores_per_socket}\n"
            f"apicid\t\t: {apic}\ninitial apicid\t: {apic}\nfpu\t\t: yes\nflags\t\t: {flags}\n"
            f"bogomips\t: {c.mhz * 2:.2f}\nclflush size\t: 64\ncache_alignment\t: 64\n"
            f"address sizes\t: 46 bits physical, 57 bits virtual\npower management:\n\n")
    w.raw("proc/cpuinfo", "".join(blocks))
    # per-CPU time (jiffies) and load average of the online CPUs: a generated host's load is read from
    # its own tree, never from the machine running the console
    w.raw("proc/stat", "".join(f"cpu{cid} 0 0 0 0 0 0 0 0 0 0\n" for cid, *_ in lay.cpus if cid in online)
          + f"btime {spec.boot_time}\n")
    w.raw("proc/loadavg", "0.00 0.00 0.00 1/1 1\n")
    nodes = sorted(lay.node_cpus)
    total = spec.memory_per_node_mib * 1024 * len(nodes)
    huge = {size: sum(hugepages(spec, n)[size] for n in nodes) for size in HUGE_SIZES_KIB}
    huge_kib = sum(size * nr for size, nr in huge.items())
    free = total - total // 25 - huge_kib
    default = default_hugepage_kib(spec)
    in_use = sum(v for (_n, size), v in hugepages_in_use(spec, nodes).items() if size == default)
    rows = [("MemTotal", total), ("MemFree", free), ("MemAvailable", free + total // 50),
            ("Buffers", total // 400), ("Cached", total // 50), ("SwapCached", 0),
            ("SwapTotal", 0), ("SwapFree", 0), ("AnonPages", total // 100),
            ("HugePages_Total", huge[default]), ("HugePages_Free", huge[default] - in_use),
            ("HugePages_Rsvd", 0), ("HugePages_Surp", 0), ("Hugepagesize", default), ("Hugetlb", huge_kib)]
    w.raw("proc/meminfo", "".join(
        f"{k + ':':<16}{v:>8}\n" if k.startswith("HugePages_") else f"{k + ':':<16}{v:>8} kB\n"
        for k, v in rows))
