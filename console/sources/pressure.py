"""Host pressure read through the root seam: memory and huge pages per NUMA node (sysfs node meminfo and
hugepages), CPU use per node from the per-CPU load, and each running VM's vCPU steal from the schedstat
of its vCPU threads.

vCPU steal on the host side: /proc/PID/task/TID/schedstat holds three numbers, time on a CPU, time
runnable but waiting for one (ns) and timeslices. The waiting time of a VM's vCPU threads (QEMU names
them `CPU N/KVM`) between two reads, over the time between them, is the steal its guest sees. libvirt
keeps the QEMU process id in run/libvirt/qemu/NAME.pid.
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence

from nodeconsole.console.model import Cpu, HugepageUse, NodeUse, Vm
from nodeconsole.console.root import Root

_NODE = re.compile(r"node([0-9]+)")
_HUGE = re.compile(r"hugepages-([0-9]+)kB")
_VCPU = re.compile(r"CPU [0-9]+/KVM")
MAX_NODES = 1024
MAX_TASKS = 4096  # threads of one QEMU process looked at
PID_DIR = "run/libvirt/qemu"  # libvirt's NAME.pid of each running QEMU domain


def read_node_memory(root: Root) -> tuple[NodeUse, ...]:
    """Memory and huge pages of every NUMA node (cpu_percent left None)."""
    out = []
    base = "sys/devices/system/node"
    names = sorted((int(m.group(1)), n) for n in root.listdir(base) if (m := _NODE.fullmatch(n)))
    for node, name in names[:MAX_NODES]:
        mem: dict[str, int] = {}
        for line in (root.read(f"{base}/{name}/meminfo") or "").splitlines():
            # "Node 0 MemFree:        364401132 kB"
            parts = line.split()
            if len(parts) >= 4 and parts[3].isdigit():
                mem[parts[2].rstrip(":")] = int(parts[3])
        pages = []
        for entry in sorted(root.listdir(f"{base}/{name}/hugepages")):
            m = _HUGE.fullmatch(entry)
            if m is None:
                continue
            total = root.read_int(f"{base}/{name}/hugepages/{entry}/nr_hugepages")
            free = root.read_int(f"{base}/{name}/hugepages/{entry}/free_hugepages")
            if total is not None:
                pages.append(HugepageUse(int(m.group(1)), total, free if free is not None else 0))
        out.append(NodeUse(node=node, memory_total_kib=mem.get("MemTotal", 0),
                           memory_free_kib=mem.get("MemFree", 0), hugepages=tuple(pages)))
    return tuple(out)


_layout: tuple[Sequence[Cpu], list[int], dict[int, int | None], dict[int, list[int]]] | None = None


def _kept_layout(cpus: Sequence[Cpu]) -> tuple[Sequence[Cpu], list[int], dict[int, int | None], dict[int, list[int]]]:
    global _layout
    kept = _layout
    if kept is not None and kept[0] is cpus:
        return kept
    online = sorted(c.id for c in cpus if c.online)
    node_of = {c.id: c.numa_node for c in cpus}
    at: dict[int, list[int]] = {}  # each node's online CPUs as positions in `online`
    for i, cpu in enumerate(online):
        node = node_of.get(cpu)
        if node is not None:
            at.setdefault(node, []).append(i)
    kept = _layout = (cpus, online, node_of, at)
    return kept


def cpu_layout(cpus: Sequence[Cpu]) -> tuple[list[int], dict[int, int | None]]:
    """The online CPU ids in order and each CPU's NUMA node (the last answer is kept for the same
    `cpus` object: a sysfs reading's CPUs stay the same object until sysfs is read again)."""
    kept = _kept_layout(cpus)
    return kept[1], kept[2]


def node_cpu_percent(nodes: Sequence[NodeUse], cpus: Sequence[Cpu],
                     cpu_percent: Sequence[float]) -> tuple[NodeUse, ...]:
    """`nodes` with the mean busy percent of each node's online CPUs; `cpu_percent` is per online CPU in
    CPU id order (/proc/stat's and psutil's), () before the second sample (cpu_percent stays None)."""
    _cpus, online, _node_of, at = _kept_layout(cpus)
    if len(cpu_percent) != len(online):
        return tuple(nodes)
    out = []
    for n in nodes:
        where = at.get(n.node)
        mean = round(sum([cpu_percent[i] for i in where]) / len(where), 1) if where else None
        out.append(NodeUse(n.node, mean, n.memory_total_kib, n.memory_free_kib, n.hugepages))
    return tuple(out)


class VcpuWaitReader:
    """vCPU steal of running VMs from their vCPU threads' schedstat wait time, as a delta between two
    reads: the first read of a VM answers None."""

    def __init__(self, root: Root, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.clock = clock
        self._prev: dict[str, tuple[float, int, int]] = {}  # VM → (time, PID, total wait ns)
        self._lock = threading.Lock()

    def _wait_ns(self, pid: int) -> tuple[int, int] | None:
        """(vCPU threads, their total wait ns), None when the process has none."""
        total = threads = 0
        for tid in self.root.listdir(f"proc/{pid}/task")[:MAX_TASKS]:
            if not tid.isdigit() or not _VCPU.fullmatch((self.root.read(f"proc/{pid}/task/{tid}/comm") or "").strip()):
                continue
            fields = (self.root.read(f"proc/{pid}/task/{tid}/schedstat") or "").split()
            if len(fields) >= 2 and fields[1].isdigit():
                total += int(fields[1])
                threads += 1
        return (threads, total) if threads else None

    def steal_all(self, vms: Sequence[Vm]) -> dict[str, float | None]:
        """steal() of each VM by name. libvirt's pid files are listed once: a running VM without one
        (not QEMU's, or not libvirt's) answers None without a read of its own."""
        try:
            present: set[str] | None = set(self.root.listdir(PID_DIR))
        except OSError:
            present = None  # unlistable: each VM's pid file is tried, as steal() does
        out: dict[str, float | None] = {}
        for vm in vms:
            if present is not None and vm.state == "running" and f"{vm.name}.pid" not in present:
                out[vm.name] = None
            else:
                out[vm.name] = self.steal(vm)
        return out

    def steal(self, vm: Vm) -> float | None:
        if vm.state != "running":
            with self._lock:
                self._prev.pop(vm.name, None)
            return None
        pid = self.root.read_int(f"{PID_DIR}/{vm.name}.pid") if "/" not in vm.name else None
        if pid is None:
            return None
        got = self._wait_ns(pid)
        if got is None:
            return None
        threads, wait = got
        now = self.clock()
        with self._lock:
            prev = self._prev.get(vm.name)
            self._prev[vm.name] = (now, pid, wait)
        if prev is None or prev[1] != pid or now <= prev[0] or wait < prev[2]:
            return None
        return round(100 * (wait - prev[2]) / 1e9 / (now - prev[0]) / threads, 1)
