"""The sysfs/procfs source: host identity, CPUs, NUMA nodes, PCI functions, IOMMU groups and vGPU.

Everything is read below a `Root`. Captured trees hold dangling relative symlinks and loops, so links
are only ever read (readlink) and resolved textually; no directory is walked recursively. Malformed
values become None (or the entry is skipped); a permission error fails the whole source with a clear
message, because a partial view of the host would mislead.
"""
from __future__ import annotations

import re
from dataclasses import replace

from nodeconsole.console.iommu import read_iommu
from nodeconsole.console.model import Cpu, HostInfo, NumaNode
from nodeconsole.console.pciids import PciIds, default_ids
from nodeconsole.console.root import Root
from nodeconsole.console.sources.sysfs_nic import read_net_functions
from nodeconsole.console.sources.sysfs_pci import read_pci, read_vgpu, refresh_pci
from nodeconsole.console.sources.sysfs_root import SysfsRoot, to_cpulist, to_cpumask, to_int
from nodeconsole.console.sources.types import SourceError, SysfsData

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"

_CPU_NAME = re.compile(r"^cpu(\d+)$")
_NODE_NAME = re.compile(r"^node(\d+)$")
_MEMTOTAL = re.compile(r"MemTotal:\s*(\d+)\s*kB")


def read_sysfs(root: Root, ids: PciIds | None = None) -> SysfsData:
    """Read the host below `root`. `ids` names PCI IDs (default: the console machine's pci.ids)."""
    fs = SysfsRoot(root)
    try:
        host = read_host(fs)
        cpus = read_cpus(fs)
        nodes, node_of = read_numa_nodes(fs, {c.id for c in cpus if c.online})
        cpus = _with_numa(cpus, node_of)
        pci, nvidia_dirs, odd_dirs = read_pci(fs, nodes, ids or default_ids())
        iommu = read_iommu(fs, host.cmdline, host.cpu_vendor, {d.address: d for d in pci})
        types, instances = read_vgpu(fs, nvidia_dirs)
        net = read_net_functions(fs, pci)
    except PermissionError as e:
        raise SourceError(f"permission denied reading {e.filename or root.path}") from e
    return SysfsData(host=host, cpus=cpus, numa_nodes=nodes, pci_devices=pci, iommu=iommu,
                     vgpu_types=types, vgpu_instances=instances, net_functions=net,
                     nvidia_dirs=tuple(nvidia_dirs.items()), odd_dirs=tuple(odd_dirs.items()))


def refresh_sysfs(root: Root, ids: PciIds | None, last: SysfsData) -> SysfsData:
    """`last` (a whole read of the same host) brought up to date in all that can change while the
    collector's signs of a change stay still (the functions present and their drivers, the online and
    present CPUs, the mdev devices, the GPUs' links and driver_override, the VFs' vGPU types): the host
    name, the NUMA nodes (memory, huge pages), each function's current link, driver_override and VF
    count, the vGPU types and instances, the network side of NICs. The rest cannot move without a sign
    moving — the boot's kernel and command line, the CPUs' topology, each function's identity, place,
    IOMMU group and limits — and is taken from `last` (the IOMMU verdicts are worked out again when a
    function changed). Functions that did not change are `last`'s very objects."""
    fs = SysfsRoot(root)
    try:
        hostname = _hostname(fs)
        host = last.host if hostname == last.host.hostname else replace(last.host, hostname=hostname)
        nodes, node_of = read_numa_nodes(fs, {c.id for c in last.cpus if c.online})
        cpus = last.cpus
        if any(node_of.get(c.id) != c.numa_node for c in cpus):
            cpus = _with_numa(cpus, node_of)
        pci = refresh_pci(fs, last.pci_devices, ids or default_ids(), dict(last.odd_dirs))
        iommu = last.iommu if pci == last.pci_devices else read_iommu(
            fs, host.cmdline, host.cpu_vendor, {d.address: d for d in pci})
        dirs = dict(last.nvidia_dirs)
        types, instances = read_vgpu(fs, dirs)
        net = read_net_functions(fs, pci)
    except PermissionError as e:
        raise SourceError(f"permission denied reading {e.filename or root.path}") from e
    return SysfsData(host=host, cpus=cpus, numa_nodes=nodes, pci_devices=pci, iommu=iommu,
                     vgpu_types=_same(types, last.vgpu_types), vgpu_instances=_same(instances, last.vgpu_instances),
                     net_functions=_same(net, last.net_functions), nvidia_dirs=last.nvidia_dirs,
                     odd_dirs=last.odd_dirs)


def _same(new: tuple, old: tuple) -> tuple:
    """`old` when equal to `new`: what the snapshot derives from it is then kept by identity."""
    return old if new == old else new


# -- helpers --------------------------------------------------------------------------------------

def _fs(root: Root) -> SysfsRoot:
    return root if isinstance(root, SysfsRoot) else SysfsRoot(root)


def _numbered(names: list[str], pattern: re.Pattern[str]) -> list[int]:
    return sorted(int(m.group(1)) for m in map(pattern.match, names) if m)


# -- host -----------------------------------------------------------------------------------------

def _hostname(root: Root) -> str:
    hostname = root.read("proc/sys/kernel/hostname") or root.read("etc/hostname") or ""
    return hostname.splitlines()[0].strip() if hostname else ""


def read_host(root: Root) -> HostInfo:
    root = _fs(root)
    kernel = root.read("proc/sys/kernel/osrelease") or ""
    if not kernel:
        words = (root.read("proc/version") or "").split()
        kernel = words[2] if len(words) > 2 and words[0] == "Linux" else ""
    return HostInfo(hostname=_hostname(root), kernel=kernel,
                    cmdline=root.read("proc/cmdline") or "", cpu_vendor=cpu_vendor(root.read("proc/cpuinfo")))


def cpu_vendor(cpuinfo: str | None) -> str:
    """"intel", "amd", "arm" or "" from /proc/cpuinfo."""
    if not cpuinfo:
        return ""
    m = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.M)
    if m:
        return {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "amd"}.get(m.group(1), "")
    if re.search(r"^CPU implementer\s*:", cpuinfo, re.M) or "aarch64" in cpuinfo.lower():
        return "arm"
    return ""


# -- CPUs -----------------------------------------------------------------------------------------

def _cpu_ids(root: Root) -> list[int]:
    """CPUs that exist: cpuN directories and the `present` list. `possible` only as a last resort: it
    counts hotplug slots that never get a CPU (0-191 on a 24-CPU machine)."""
    ids = set(_numbered(root.listdir(CPU_DIR), _CPU_NAME))
    ids.update(to_cpulist(root.read(f"{CPU_DIR}/present")) or ())
    if not ids:
        ids.update(to_cpulist(root.read(f"{CPU_DIR}/possible")) or ())
    return sorted(ids)


def _online_set(root: Root, ids: list[int]) -> set[int]:
    online = to_cpulist(root.read(f"{CPU_DIR}/online"))
    if online is not None:
        return set(online)
    offline = set(to_cpulist(root.read(f"{CPU_DIR}/offline")) or ())
    result = set()
    for cpu in ids:
        flag = root.read(f"{CPU_DIR}/cpu{cpu}/online")
        # cpu0 often has no online file (it cannot be unplugged): online unless listed offline
        if (flag != "0" if flag is not None else cpu not in offline):
            result.add(cpu)
    return result


def read_cpus(root: Root) -> tuple[Cpu, ...]:
    """Every CPU, online or not, with its package and a core number unique within the package.
    NUMA nodes are filled in by read_sysfs (see _with_numa)."""
    root = _fs(root)
    ids = _cpu_ids(root)
    online = _online_set(root, ids)
    raw: dict[int, tuple[int, int, int, tuple[int, ...]]] = {}
    for cpu in ids:
        if cpu not in online or cpu in raw:  # in raw: a thread of a core read before
            continue
        topo = f"{CPU_DIR}/cpu{cpu}/topology"
        package = to_int(root.read(f"{topo}/physical_package_id"))
        if package is None:  # no topology files: an online CPU the kernel tells nothing about
            continue
        die = to_int(root.read(f"{topo}/die_id")) or 0
        core_id = to_int(root.read(f"{topo}/core_id"))
        siblings = (to_cpulist(root.read(f"{topo}/thread_siblings_list"))
                    or to_cpulist(root.read(f"{topo}/core_cpus_list")) or (cpu,))
        if cpu not in siblings:
            siblings = tuple(sorted({*siblings, cpu}))
        raw[cpu] = (package, die, -1 if core_id is None else core_id, siblings)
        for sibling in siblings:  # threads of one core share package, die and core_id: read once
            if sibling in online and sibling not in raw:
                raw[sibling] = raw[cpu]
    cores = _core_numbers(raw, online)
    out = []
    for cpu in ids:
        if cpu in raw:
            package, die, core_id, siblings = raw[cpu]
            sib = tuple(c for c in siblings if c in online)
            out.append(Cpu(id=cpu, package=package, core=cores[cpu], numa_node=None, online=True, die=die,
                           core_id=core_id, siblings=sib))
        else:
            out.append(Cpu(id=cpu, package=-1, core=-1, numa_node=None, online=cpu in online))
    return tuple(out)


def _core_numbers(raw: dict[int, tuple[int, int, int, tuple[int, ...]]], online: set[int]) -> dict[int, int]:
    """A physical core is a group of thread siblings (core_id repeats across the dies of one package).
    Keep core_id when it already names each core of its package uniquely; otherwise number the cores of
    the package 0.. in (die, core_id, first CPU) order."""
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for cpu, (package, _die, _core_id, siblings) in raw.items():
        key = tuple(c for c in siblings if c in online and c in raw) or (cpu,)
        groups.setdefault((package, key), []).append(cpu)
    by_package: dict[int, list[tuple[int, int, int, list[int]]]] = {}
    for (package, _key), members in groups.items():
        _p, die, core_id, _s = raw[min(members)]
        by_package.setdefault(package, []).append((die, core_id, min(members), members))
    result: dict[int, int] = {}
    for cores in by_package.values():
        cores.sort()
        core_ids = [c[1] for c in cores]
        keep = -1 not in core_ids and len(set(core_ids)) == len(core_ids)
        for index, (_die, core_id, _first, members) in enumerate(cores):
            for cpu in members:
                result[cpu] = core_id if keep else index
    return result


def _with_numa(cpus: tuple[Cpu, ...], node_of: dict[int, int]) -> tuple[Cpu, ...]:
    return tuple(Cpu(id=c.id, package=c.package, core=c.core, numa_node=node_of.get(c.id), online=c.online,
                     die=c.die, core_id=c.core_id, siblings=c.siblings) for c in cpus)


# -- NUMA -----------------------------------------------------------------------------------------

def read_numa_nodes(root: Root, online_cpus: set[int]) -> tuple[tuple[NumaNode, ...], dict[int, int]]:
    """NUMA nodes (ids may be sparse, nodes may be CPU-less) and the node of every CPU their cpulists
    name. A node's `cpus` are its online CPUs (what can be pinned); offline CPUs still get their node."""
    root = _fs(root)
    ids = set(_numbered(root.listdir(NODE_DIR), _NODE_NAME))
    online_nodes = to_cpulist(root.read(f"{NODE_DIR}/online"))
    ids.update(online_nodes or ())
    node_of: dict[int, int] = {}
    nodes = []
    for nid in sorted(ids):
        base = f"{NODE_DIR}/node{nid}"
        listed = to_cpulist(root.read(f"{base}/cpulist"))
        if listed is None:
            listed = to_cpumask(root.read(f"{base}/cpumap")) or ()
        for cpu in listed:
            node_of.setdefault(cpu, nid)
        meminfo = root.read(f"{base}/meminfo") or ""
        m = _MEMTOTAL.search(meminfo)
        values = [to_int(w) for w in (root.read(f"{base}/distance") or "").split()]
        distances = () if None in values else tuple(v for v in values if v is not None)
        nodes.append(NumaNode(id=nid, cpus=tuple(c for c in listed if c in online_cpus),
                              memory_kib=int(m.group(1)) if m else 0, distances=distances,
                              hugepages=_hugepages(root, f"{base}/hugepages"),
                              online=online_nodes is None or nid in online_nodes))
    # the distance file has one value per online node: keep it only when it lines up with our list
    if any(len(n.distances) != len(nodes) for n in nodes):
        nodes = [NumaNode(id=n.id, cpus=n.cpus, memory_kib=n.memory_kib,
                          distances=n.distances if len(n.distances) == len(nodes) else (),
                          hugepages=n.hugepages, online=n.online) for n in nodes]
    return tuple(nodes), node_of


def _hugepages(root: Root, path: str) -> tuple[tuple[int, int], ...]:
    out = []
    for name in root.listdir(path):
        if name.startswith("hugepages-") and name.endswith("kB"):
            size = to_int(name[len("hugepages-"):-2])
            count = to_int(root.read(f"{path}/{name}/nr_hugepages"))
            if size is not None and count is not None:
                out.append((size, count))
    return tuple(sorted(out))
