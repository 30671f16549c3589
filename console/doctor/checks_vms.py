"""VMs: vm-memory (each GPU VM's memory against its GPUs' memory; host memory committed to VMs)."""
from __future__ import annotations

import re

from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, Verdict, active, gib, names
from nodeconsole.console.doctor.files import meminfo_kib
from nodeconsole.console.doctor.model import CheckResult, Evidence, Fix
from nodeconsole.console.iommu import slot_of
from nodeconsole.console.mig_profiles import table_for_pci_device_id
from nodeconsole.console.model import Gpu, Vm
from nodeconsole.console.vm_sizing import MemoryTarget, memory_target
from nodeconsole.console.vms.hints import hint_for

_GB_IN_NAME = re.compile(r"(\d+)\s*GB", re.I)
_VGPU_FB = re.compile(r"-(\d+)[A-Z]$")  # "NVIDIA H100XM-3-40C" → 40 (GB of framebuffer)
_MIG_FB = re.compile(r"\.(\d+)gb", re.I)  # "3g.40gb" → 40
MIB = 1024


def whole_gpu_mib(ctx: Context, g: Gpu) -> int | None:
    """A whole GPU's memory: NVML's total, else the model's (from its name, else the MIG table)."""
    if isinstance(g.memory_total_mib, int) and g.memory_total_mib > 0:
        return g.memory_total_mib
    m = _GB_IN_NAME.search(g.name)
    if m:
        return int(m.group(1)) * MIB
    dev = ctx.by_addr.get(g.address)
    table = table_for_pci_device_id(dev.device_id) if dev is not None else None
    if table is not None:
        m = _GB_IN_NAME.search(table.model)
        if m:
            return int(m.group(1)) * MIB
    return None


def _vgpu_mib(g: Gpu, type_name: str) -> int | None:
    for t in g.vgpu.types:
        if t.name == type_name and isinstance(t.framebuffer_mib, int) and t.framebuffer_mib > 0:
            return t.framebuffer_mib
    m = _VGPU_FB.search(type_name.strip())
    return int(m.group(1)) * MIB if m else None


def vm_gpu_mib(ctx: Context, vm: Vm) -> tuple[int, list[str], list[str]]:
    """(GPU memory the VM holds in MiB, what it holds, what could not be sized)."""
    total, held, unknown = 0, [], []
    whole: set[str] = set()
    for h in vm.hostdevs:
        g = ctx.snap.gpu(h.gpu) if h.gpu else None
        if g is None:
            continue
        key = h.uuid if h.type == "mdev" else h.address
        inst = next((i for i in g.vgpu.instances if i.uuid == key), None)
        dev = ctx.by_addr.get(h.address or "")
        if inst is not None:
            mib, what = _vgpu_mib(g, inst.type_name), f"{inst.type_name} on GPU {g.index}"
        elif h.type == "pci" and h.address and slot_of(h.address) == slot_of(g.address) and (
                dev is None or dev.physfn is None):
            if g.address in whole:
                continue  # the GPU's other functions (audio) come with it
            whole.add(g.address)
            mib, what = whole_gpu_mib(ctx, g), f"GPU {g.index}"
        else:
            mig = next((mi for mi in g.mig.instances if mi.vm == vm.name), None)
            if mig is not None and (m := _MIG_FB.search(mig.profile)):
                mib, what = int(m.group(1)) * MIB, f"MIG {mig.profile} on GPU {g.index}"
            else:
                mib, what = None, f"{key} on GPU {g.index}"
        if mib is None:
            unknown.append(what)
        else:
            total += mib
            held.append(what)
    return total, held, unknown


def small_vms(ctx: Context, factor: float) -> list[tuple[Vm, int, list[str]]]:
    """(VM, GPU memory it holds in KiB, what it holds) of each GPU VM with less than `factor` × that."""
    out = []
    for vm in ctx.gpu_vms:
        mib, held, _unknown = vm_gpu_mib(ctx, vm)
        if mib and vm.memory_kib < factor * mib * 1024:
            out.append((vm, mib * 1024, held))
    return out


def check_vm_memory(ctx: Context) -> CheckResult:
    v = Verdict("vm-memory")
    snap = ctx.snap
    down = ctx.source_down("libvirt")
    if down:
        v.missing.append(down)
        return v.result("")
    if not snap.vms:
        return v.result("no VMs")
    factor = facts.VM_MEMORY_MIN_FACTOR
    small, fixes = [], []
    for vm in ctx.gpu_vms:
        mib, held, unknown = vm_gpu_mib(ctx, vm)
        if unknown:
            v.missing.append(f"the memory of {names(unknown, 3)} ({vm.name}) is unknown")
        if not mib:
            continue
        ratio = vm.memory_kib / (mib * 1024)
        v.evidence.append(Evidence("libvirt", f"{vm.name}: {gib(vm.memory_kib)} for {gib(mib * 1024)} of GPU "
                                              f"memory ({', '.join(held)}): {ratio:.1f}x"))
        if ratio < factor:
            small.append(f"{vm.name} has {gib(vm.memory_kib)} for {gib(mib * 1024)} of GPU memory "
                         f"({ratio:.1f}x)")
            fixes += _resize_commands(ctx, v, vm, memory_target(snap, vm, mib * 1024, factor))
    if small:
        v.warns.append(f"below {factor:g}x their GPUs' memory: {names(small, 3)}")
        v.fix = Fix(f"give each such VM at least {factor:g}x its GPUs' memory, within what its NUMA node(s) can "
                    "hold in hugepages (2-3x recommended; takes effect at the VM's next start)", tuple(fixes),
                    False, bool(fixes))
    _host_commit(ctx, v)
    gpu_vms = len(ctx.gpu_vms)
    return v.result(f"{gpu_vms} GPU VM(s) with at least {factor:g}x their GPUs' memory; host memory not "
                    "overcommitted" if gpu_vms else "no VM holds a GPU; host memory not overcommitted")


def _resize_commands(ctx: Context, v: Verdict, vm: Vm, target: MemoryTarget) -> list[str]:
    """The commands giving `vm` its target size (and the hugepages it needs first); a note instead when its
    nodes cannot hold more than it has."""
    if target.size_kib <= vm.memory_kib:
        v.notes.append(f"{vm.name} cannot grow: {target.capped}")
        return []
    if target.capped:
        v.notes.append(f"{vm.name}: {gib(target.size_kib)} instead of {gib(target.want_kib)}: {target.capped}")
    out = []
    for node, more in sorted(target.more_pages.items()):
        page = target.page_kib or 0
        now = dict(next((n.hugepages for n in ctx.snap.numa_nodes if n.id == node), ())).get(page, 0)
        out.append(f"echo {now + more} > /{facts.NODE_DIR}/node{node}/hugepages/hugepages-{page}kB/nr_hugepages")
    return out + hint_for(vm, "setmem", size=f"{target.size_kib // 1048576}G").split("; ")


def _host_commit(ctx: Context, v: Verdict) -> None:
    snap = ctx.snap
    physical = sum(n.memory_kib for n in snap.numa_nodes) or snap.load.memory_total_kib or meminfo_kib(
        ctx.files.read("proc/meminfo"), "MemTotal")
    if not physical:
        v.missing.append("the host's memory size is unknown (no NUMA node meminfo, no /proc/meminfo)")
        return
    usable = physical - facts.HOST_MEMORY_RESERVE_KIB
    running = sum(vm.memory_kib for vm in snap.vms if active(vm))
    defined = sum(vm.memory_kib for vm in snap.vms)
    v.evidence.append(Evidence("libvirt", f"running VMs {gib(running)}, defined "
                                                                     f"{gib(defined)}, host {gib(physical)}"))
    if running > usable:
        v.warns.append(f"running VMs hold {gib(running)} of {gib(physical)} (more than the host's memory less "
                       f"{gib(facts.HOST_MEMORY_RESERVE_KIB)} kept for it)")
        v.fix = v.fix or Fix("stop or shrink VMs until they fit in the host's memory less its reserve", (),
                             False, False)
    elif defined > usable:
        v.notes.append(f"all defined VMs together would need {gib(defined)} of {gib(physical)}")
