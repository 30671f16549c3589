"""The doctor's vm-memory fix as a plan: every GPU VM with less than twice its GPUs' memory resized, each
within what its NUMA node(s) can hold in hugepages (console/vm_sizing.py, the sizing the check's
commands come from), the hugepages it needs reserved first (now and at boot). The VM's definition changes
through the `vm_shape` step (its memory only); a running VM gets the new size at its next start.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from nodeconsole.actions.boot_hugepages import hugepage_words, per_node_of
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check, Op
from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context
from nodeconsole.console.doctor.checks_vms import small_vms
from nodeconsole.console.doctor.files import HostFiles
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.vm_sizing import GIB_KIB, memory_target
from nodeconsole.console.vms.backend import VmConfigError


@dataclass
class MemoryFix:
    ops: list[Op] = field(default_factory=list)
    boot_words: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)


def vm_memory_fix(host: ActionHost, snap: HostSnapshot, have_words: list[str],
                  planned: list[str] | None = None) -> MemoryFix:
    """The operations resizing every VM the vm-memory check names (`have_words`: the boot loader's
    command line now; `planned`: words another fix of the same plan adds, whose hugepages at boot these
    keep: the boot words then replace them, reserving the larger count on each node)."""
    out = MemoryFix()
    if host.vms is None or not snap.sources.libvirt.ok:
        why = "this host has no VM backend" if host.vms is None else f"libvirt {snap.sources.libvirt}"
        out.checks.append(Check("the VMs' definitions are reachable", False, why, "start libvirtd, then plan again"))
        return out
    factor = facts.VM_MEMORY_MIN_FACTOR
    pages: dict[int, dict[int, int]] = {}  # page size → node → pages to reserve in all
    reserved = {n.id: dict(n.hugepages) for n in snap.numa_nodes}
    for vm, gpu_kib, _held in small_vms(Context(snap, HostFiles(host.root), "mixed"), factor):
        target = memory_target(snap, vm, gpu_kib, factor)
        if target.size_kib <= vm.memory_kib:
            out.notes.append(f"VM {vm.name} is left as it is: {target.capped}")
            continue
        if target.capped:
            out.notes.append(f"VM {vm.name} gets {target.size_kib // GIB_KIB} GiB, not {target.want_kib // GIB_KIB}: "
                             f"{target.capped}")
        try:
            shape = host.vms.shape(vm.name)
        except VmConfigError as e:
            out.checks.append(Check(f"VM {vm.name}'s definition readable", False, str(e), host.command_hint("show", vm.name)))
            continue
        for node, more in sorted(target.more_pages.items()):
            size = target.page_kib or 0
            by_node = pages.setdefault(size, {})
            by_node[node] = by_node.get(node, reserved.get(node, {}).get(size, 0)) + more
        op: Op = {"kind": "vm_shape", "vm": vm.name, "shape": replace(shape, memory_kib=target.size_kib).to_dict()}
        if vm.state != "shut off":
            op["next_start"] = True
            out.notes.append(f"VM {vm.name} is {vm.state}: its new size takes effect at its next start")
        out.ops.append(op)
    for size, by_node in sorted(pages.items()):
        out.ops[:0] = [{"kind": "hugepages", "node": n, "size_kib": size, "count": c, "boot": True}
                       for n, c in sorted(by_node.items())]
        nodes = [n.id for n in snap.numa_nodes if n.memory_kib]
        at_boot = {n: reserved.get(n, {}).get(size, 0) for n in nodes}
        for n, c in list(by_node.items()) + list(per_node_of(planned or [], nodes).items()):
            at_boot[n] = max(at_boot.get(n, 0), c)
        words, note = hugepage_words(have_words, size, at_boot, snap.host.kernel)
        out.boot_words += words
        if note:
            out.notes.append(note)
    return out
