"""Proxmox VE's VMs as the VM model holds them: the read side of the second VM backend
(console/vms/backend.py), through the root seam (a live host is `/`, a captured tree any directory).

Every `/etc/pve/qemu-server/<vmid>.conf` is one VM (console/vms/proxmox_conf.py reads it): its vmid, name
(`name:`, else Proxmox's own `vm<vmid>`), vCPUs, memory, huge pages, NUMA cells, affinity, host devices
(console/vms/proxmox_mapping.py resolves addresses and mappings against sysfs), lock, template and the
changes waiting in [PENDING].

State (qemu-server's check_running): `/var/run/qemu-server/<vmid>.pid` names a process whose
`/proc/<pid>/cmdline` is a kvm/qemu-system binary with `-pidfile` that very file: "running"; anything else
is "shut off" (the model's name for Proxmox's "stopped"). A paused VM reads as running: only QMP says
paused. CPU % and resident memory of a running VM come from `/proc/<pid>/stat` (utime + stime, USER_HZ
100) and `/proc/<pid>/status` (VmRSS); CPU % is relative to one host CPU, as libvirt's, None on the first
poll of a process.

How Proxmox's settings map onto the model (what it lacks is said, not invented):
- `affinity` confines the whole QEMU process (vCPU and emulator threads alike) to its CPUs: every vCPU's
  pin is that set (`VcpuPin` is the CPUs a vCPU may run on), and so is `emulator_pins`. There is no
  per-vCPU pinning in Proxmox; the console never shows one vCPU pinned apart from another.
- NUMA: the cells' host nodes (their union) are `numa_nodeset`; the policy `bind` is the model's (libvirt's)
  "strict", `preferred` and `interleave` the same words; cells of mixed policies give the first cell's.
- `hugepages: 2|1024` are 2048 / 1048576 KiB pages; `any` (Proxmox chooses at start) is 0, the model's
  "the host's default size".
- `hostpciN` with `mdev=TYPE` on a GPU: the mdev Proxmox creates at start, UUID
  `<N as %08d>-0000-0000-0000-<vmid as %012d>`; on a VF with NVIDIA's own interface
  (`nvidia/current_vgpu_type` in sysfs) it is the VF passed through.
- A template holds no device (it never runs): its hostpci lines are not listed as host devices.
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from nodeconsole.console.model import Hostdev, VcpuPin, Vm
from nodeconsole.console.root import Root
from nodeconsole.console.sources.types import LibvirtData, SourceError
from nodeconsole.console.vms.proxmox_conf import QemuConf, VmSettings, parse_conf, settings
from nodeconsole.console.vms.proxmox_mapping import (
    PCI_CFG,
    PciMappings,
    read_mappings,
    reserved_by,
    resolve_hostpci,
)
from nodeconsole.console.vms.proxmox_mapping import node_name as read_node_name

CONF_DIR = "etc/pve/qemu-server"
RUN_DIR = "var/run/qemu-server"  # qemu-server's pid files (a link to /run on a live host)
USER_HZ = 100  # the unit of /proc/PID/stat's times on Linux
_CONF_NAME = re.compile(r"^([1-9][0-9]{2,8})\.conf$")
_QEMU = re.compile(r"(?:kvm|(?:^|/)qemu-system-[^/]+)$")
_MODE = {"bind": "strict", "preferred": "preferred", "interleave": "interleave"}
_PAGE_KIB = {"2": 2048, "1024": 1048576, "any": 0}


def has_proxmox(root: Root) -> bool:
    """The host (or tree) keeps Proxmox VE's VM configs: its VMs are read here, not through libvirt."""
    return root.isdir(CONF_DIR)


def conf_path(vmid: int) -> str:
    return f"/{CONF_DIR}/{vmid}.conf"


def vm_ids(root: Root) -> list[int]:
    """The vmids of every config file, in order."""
    return sorted(int(m.group(1)) for n in root.listdir(CONF_DIR) if (m := _CONF_NAME.match(n)))


def running_pid(root: Root, vmid: int) -> int | None:
    """The VM's QEMU process (qemu-server's check_running): the pid file's process, when its command line
    is QEMU's with `-pidfile` that file; None otherwise."""
    pidfile = f"/{RUN_DIR}/{vmid}.pid"
    text = root.read(pidfile)
    if not text or not text.isascii() or not text.isdigit():
        return None
    cmdline = root.read_bytes(f"proc/{int(text)}/cmdline")
    args = [a.decode("utf-8", "replace") for a in cmdline.split(b"\0")] if cmdline else []
    if not args or not _QEMU.search(args[0]):
        return None
    for i, arg in enumerate(args):
        if arg in ("-pidfile", "--pidfile"):
            return int(text) if i + 1 < len(args) and args[i + 1] == pidfile else None
    return None


def process_figures(root: Root, pid: int) -> tuple[int | None, int | None]:
    """(CPU time in USER_HZ ticks, resident KiB) of a process; None for what cannot be read."""
    stat = root.read(f"proc/{pid}/stat") or ""
    fields = stat.rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12]) if len(fields) > 12 and fields[11].isdigit() and fields[12].isdigit() \
        else None
    rss = None
    for line in (root.read(f"proc/{pid}/status") or "").splitlines():
        if line.startswith("VmRSS:") and len(parts := line.split()) >= 2 and parts[1].isdigit():
            rss = int(parts[1])
    return ticks, rss


@dataclass(frozen=True)
class HostView:
    """What every VM's devices are resolved against, read once a poll."""
    mappings: PciMappings
    node: str
    reserved: dict[str, int]
    present: tuple[str, ...]  # the PCI functions in sysfs
    vf_vgpu: frozenset[str]  # functions with NVIDIA's own vGPU interface (nvidia/current_vgpu_type)


def host_view(root: Root) -> HostView:
    present = tuple(root.listdir("sys/bus/pci/devices"))
    return HostView(read_mappings(root), read_node_name(root), reserved_by(root), present,
                    frozenset(a for a in present if root.exists(f"sys/bus/pci/devices/{a}/nvidia/current_vgpu_type")))


def mdev_uuid(index: int, vmid: int) -> str:
    """The mdev Proxmox creates for `hostpci<index>: …,mdev=TYPE` of VM `vmid` at its start."""
    return f"{index:08d}-0000-0000-0000-{vmid:012d}"


def hostdevs(root: Root, s: VmSettings, vmid: int, running: bool, view: HostView) -> tuple[tuple[Hostdev, ...], list[str]]:
    """The VM's host devices (see the module's doc) and what is wrong with its hostpci lines."""
    out: list[Hostdev] = []
    problems: list[str] = []
    for pci in s.hostpci:
        got = resolve_hostpci(root, pci, vmid, running, view.mappings, view.node, view.reserved)
        problems += got.problems
        if pci.mdev is not None and got.addresses and got.addresses[0] not in view.vf_vgpu:
            out.append(Hostdev("mdev", uuid=mdev_uuid(pci.index, vmid)))
        else:
            out += [Hostdev("pci", address=a) for a in got.addresses]
    if view.mappings.errors and any(p.mapping is not None for p in s.hostpci):
        problems += view.mappings.errors
    return tuple(out), problems


def _numa(s: VmSettings) -> tuple[str | None, tuple[int, ...]]:
    bound = [c for c in s.cells if c.hostnodes]
    if not bound:
        return None, ()
    return _MODE.get(bound[0].policy or "bind"), tuple(sorted({n for c in bound for n in c.hostnodes}))


def vm_record(root: Root, conf: QemuConf, pid: int | None, view: HostView) -> Vm:
    """One VM as the model holds it (without its CPU use, which takes two polls)."""
    s = settings(conf.main, conf.path)
    devs, problems = hostdevs(root, s, conf.vmid, pid is not None, view) if not s.template else ((), [])
    mode, nodeset = _numa(s)
    pending = conf.pending
    return Vm(
        name=s.name or f"vm{conf.vmid}", state="running" if pid is not None else "shut off", vcpus=s.vcpus,
        pins=tuple(VcpuPin(v, s.affinity) for v in range(s.vcpus)) if s.affinity else (),
        emulator_pins=s.affinity, memory_kib=s.memory_mib * 1024, hostdevs=devs, uuid=s.uuid, numa_mode=mode,
        numa_nodeset=nodeset, hugepages_kib=_PAGE_KIB.get(s.hugepages) if s.hugepages is not None else None,
        hypervisor="proxmox", vmid=conf.vmid, lock=s.lock, template=s.template,
        pending=pending.keys() if pending is not None else (), pending_delete=pending.delete if pending else (),
        config_problems=(*conf.errors, *s.problems, *(f"{conf.path}: {p}" for p in problems)))


def read_conf(root: Root, vmid: int) -> QemuConf | None:
    data = root.read_bytes(f"{CONF_DIR}/{vmid}.conf")
    return parse_conf(vmid, conf_path(vmid), data.decode("utf-8", "replace")) if data is not None else None


class ProxmoxReader:
    """Every VM of a Proxmox VE host, poll after poll (the collector's reader, console/vms/backend.py's
    VmReader). A VM's record is made again only when its config, its process or what its devices resolve
    against changed; its CPU % is the process's CPU-time delta over the wall-clock delta."""

    version = ""  # Proxmox's version is not read

    def __init__(self, root: Root, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self._clock = clock
        self._lock = threading.Lock()
        self._kept: dict[int, tuple[object, Vm]] = {}  # vmid → (what the record was made of, the record)
        self._cpu: dict[int, tuple[int, int, float]] = {}  # vmid → (pid, CPU ticks, when)

    def poll(self) -> LibvirtData:
        with self._lock:
            if not has_proxmox(self.root):
                raise SourceError(f"no /{CONF_DIR} (not a Proxmox VE host)")
            view = host_view(self.root)
            sign = (self.root.read_bytes(PCI_CFG), view.node, tuple(sorted(view.reserved.items())), view.present)
            vms = [vm for vmid in vm_ids(self.root) if (vm := self._one(vmid, view, sign)) is not None]
            self._kept = {vm.vmid: self._kept[vm.vmid] for vm in vms if vm.vmid in self._kept}
            return LibvirtData(tuple(sorted(vms, key=lambda v: (v.name, v.vmid or 0))))

    def _one(self, vmid: int, view: HostView, sign: tuple) -> Vm | None:
        data = self.root.read_bytes(f"{CONF_DIR}/{vmid}.conf")
        if data is None:
            return None
        pid = running_pid(self.root, vmid)
        made_of = (data, pid, sign)
        kept = self._kept.get(vmid)
        if kept is not None and kept[0] == made_of:
            vm = kept[1]
        else:
            conf = parse_conf(vmid, conf_path(vmid), data.decode("utf-8", "replace"))
            vm = vm_record(self.root, conf, pid, view)
            self._kept[vmid] = (made_of, vm)
        return self._figures(vm, pid) if pid is not None else vm

    def _figures(self, vm: Vm, pid: int) -> Vm:
        ticks, rss = process_figures(self.root, pid)
        now = self._clock()
        last = self._cpu.get(vm.vmid or 0)
        percent = None
        if ticks is not None:
            if last is not None and last[0] == pid and ticks >= last[1] and now > last[2]:
                percent = round((ticks - last[1]) / USER_HZ / (now - last[2]) * 100.0, 1)
            self._cpu[vm.vmid or 0] = (pid, ticks, now)
        return replace(vm, cpu_percent=percent, rss_kib=rss)

    def invalidate(self, uuid: str | None = None) -> None:
        with self._lock:
            self._kept = {} if uuid is None else {k: v for k, v in self._kept.items() if v[1].uuid != uuid}

    def close(self) -> None:
        pass


def find_vmid(root: Root, vm: str) -> int | None:
    """The vmid of the VM named `vm` (or whose vmid `vm` is)."""
    ids = vm_ids(root)
    for vmid in ids:
        conf = read_conf(root, vmid)
        if conf is not None and (settings(conf.main, conf.path).name or f"vm{vmid}") == vm:
            return vmid
    return int(vm) if vm.isascii() and vm.isdigit() and int(vm) in ids else None
