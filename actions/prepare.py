"""`prepare VM`: one plan that sizes and wires a shut-off VM for training, from `place`'s recommendation
(actions/placement.py) or the GPUs the admin lists.

The plan, in the order it applies:
1. hugepages reserved on the GPUs' node(s), now and at boot, when the free ones are short;
2. the GPUs (with every other function of their IOMMU groups) and, with `--with-nic`, a VF beside each
   GPU, bound to vfio-pci;
3. the VM's definition: first its shape (`vm_shape`: vCPU count and guest topology, memory, hugepage
   backing, `<numatune>`, guest NUMA cells for a VM across nodes) — whose undo puts the definition's
   bytes back as they were before it, once the later steps took back their own edits — then the GPUs'
   and VFs' host devices, the far VFs it held taken out, one `<vcpupin>` per vCPU on the GPUs' node(s)
   and the `<emulatorpin>` on the host's kept cores;
4. the NCCL topology file and environment for the guest, computed from the definition once the devices
   are in (actions/nccl/guest_files.py), where `nccl topo --vm` and `nccl command --vm` say they are.

Every step undoes exactly, so `undo` gives back the definition byte for byte and the host as it was
(drivers, hugepages, the boot loader's command line, the files). Only plans: the runner applies,
verifies, audits and undoes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check, Op, Plan, RequestError
from nodeconsole.actions.prepare_ops import definition_ops, device_ops, hugepage_ops, nccl_ops, shape_of
from nodeconsole.actions.targets import resolve_vm
from nodeconsole.actions.vm_guard import vm_change_checks
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.model import HostSnapshot

if TYPE_CHECKING:
    from nodeconsole.actions.placement import Placement

ACTION = "prepare"
HUGEPAGE_SIZES = {"1G": 1048576, "2M": 2048, "none": 0}
_COUNT_RE = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class GpuChoice:
    """`--gpus N|LIST`: a count (place picks) or the GPUs named."""
    count: int
    named: tuple[str, ...] | None = None


def parse_gpus(text: str) -> GpuChoice:
    """`2` → two GPUs, place's choice; `0,1` or `0000:da:00.0,0000:db:00.0` (a comma makes a list:
    `3,` is GPU 3) → those GPUs. RequestError for an empty word or list."""
    t = (text or "").strip()
    if _COUNT_RE.match(t):
        n = int(t)
        if n > 1024:
            raise RequestError(f"--gpus {t}: more GPUs than a host has")
        return GpuChoice(n)
    names = tuple(w.strip() for w in t.split(",") if w.strip())
    if not names:
        raise RequestError(f"--gpus {text!r}: give a count (2) or GPUs (0,1 or PCI addresses)")
    if len(set(names)) != len(names):
        raise RequestError(f"--gpus {text!r}: a GPU is named twice")
    return GpuChoice(len(names), names)


def hugepage_size(text: str | None) -> int | None:
    """`1G`/`2M`/`none` → page size in KiB (0: none); None: the default (1G where the host offers it)."""
    if text is None:
        return None
    size = HUGEPAGE_SIZES.get(text.strip())
    if size is None:
        raise RequestError(f"--hugepages {text!r}: give 1G, 2M or none")
    return size


def plan_prepare(host: ActionHost, snap: HostSnapshot, vm_name: str, gpus: str, with_nic: bool = False,
                 vcpus: int | None = None, memory_kib: int | None = None, memory_factor: float | None = None,
                 hugepages: str | None = None) -> Plan:
    """The plan preparing `vm_name` (see the module doc). RequestError: unknown VM, bad GPU list or sizes."""
    from nodeconsole.actions.placement import place

    choice = parse_gpus(gpus)
    page = hugepage_size(hugepages)
    if memory_kib is not None and memory_factor is not None:
        raise RequestError("give --memory or --memory-factor, not both")
    if memory_factor is not None and not 0 < memory_factor <= 64:
        raise RequestError(f"--memory-factor {memory_factor:g}: give a factor above 0 (2 is twice the GPUs' VRAM)")
    vm = resolve_vm(snap, vm_name)
    request: dict[str, object] = {"vm": vm.name, "gpus": gpus, "with_nic": with_nic, "vcpus": vcpus,
                                  "memory_kib": memory_kib, "memory_factor": memory_factor, "hugepages": hugepages}
    plan = Plan(action=ACTION, title=f"Prepare VM {vm.name} for training", request=request,
                rebuild=lambda: plan_prepare(host, host.snapshot(), vm.name, gpus, with_nic, vcpus, memory_kib,
                                             memory_factor, hugepages))
    plan.checks += vm_change_checks(host, vm, gives_device=True)  # locked, or a template: refused
    plan.checks += _vm_checks(host, snap, vm.name, vm.state)
    if not plan.ok:
        return plan
    placed = place(snap, host.root, choice.count, with_nic=with_nic, vm=vm.name,
                   memory_factor=memory_factor if memory_factor is not None else 2.0, memory_kib=memory_kib,
                   vcpus=vcpus, hugepage_kib=page, gpus=choice.named)
    what = (f"GPUs {', '.join(choice.named)}" if choice.named else f"{choice.count} GPU(s)")
    if not placed.ok:
        memory = "memory" in placed.refusal or "hugepage" in placed.refusal
        plan.checks.append(Check(f"room for {what} on this host", False, placed.refusal,
                                 "ask for less memory (--memory SIZE or --memory-factor F), or free memory on that "
                                 "node" if memory else "see `nodeconsole place --gpus N` for what stands in the way; "
                                 "free a GPU, or ask for fewer"))
        return plan
    # the set's topology in the check; how it was sized (vCPUs, memory, pages) in the notes
    plan.checks.append(Check(f"room for {what} on this host", True, "; ".join(placed.reasons[:3]) or "yes"))
    plan.notes += [f"place: {r}" for r in placed.reasons[3:]]
    plan.title = _title(vm.name, placed)
    plan.request["placement"] = placed.to_dict()
    ops: list[Op] = []
    ops += hugepage_ops(host, snap, placed, plan)
    ops += device_ops(host, snap, placed, vm.name, plan)
    if not plan.ok:
        return plan
    shape = shape_of(snap, vm, placed, host.vms is None or host.vms.guest_threads)
    if shape.threads_per_core != placed.threads_per_core and host.vms is not None:
        plan.notes.append(f"{host.vms.label}'s VM config has sockets and cores, no threads: the guest sees "
                          f"{shape.vcpus} cores of one thread (its vCPUs still run on the host's sibling threads)")
    ops += definition_ops(host, snap, vm, placed, shape, plan)
    ops += nccl_ops(host, snap, vm.name, placed, plan)
    from nodeconsole.actions.prepare_ops import add_prepare_steps

    add_prepare_steps(host, plan, ops)
    plan.notes += list(placed.nic_notes)
    return plan


def _vm_checks(host: ActionHost, snap: HostSnapshot, name: str, state: str) -> list[Check]:
    out: list[Check] = []
    if host.vms is None or not snap.sources.libvirt.ok:
        why = "this host has no VM backend" if host.vms is None else f"libvirt {snap.sources.libvirt}"
        out.append(Check("the VMs' definitions are reachable", False, why, "start libvirtd, or pass --libvirt URI"))
        return out
    if state != "shut off":
        out.append(Check(f"VM {name} is shut off", False,
                         f"it is {state}: its vCPUs, memory and devices change only while it is off",
                         f"shut it down first ({host.command_hint('shutdown', name)}; or from the guest), then plan again"))
    else:
        out.append(Check(f"VM {name} is shut off", True, "its definition can take every change at once"))
    return out


def _title(vm: str, placed: Placement) -> str:
    gib = placed.memory_kib / 1048576
    nodes = format_cpulist(placed.nodes) or "?"
    gpus = f"{len(placed.gpus)} GPU(s)" + (f" with {sum(1 for n in placed.nics if n)} NIC VF(s)" if placed.nics else "")
    page = placed.hugepages.size_kib
    backing = "" if not page else f" on {page // 1048576} GiB pages" if page >= 1048576 else f" on {page // 1024} MiB pages"
    return (f"Prepare VM {vm} for training: {gpus}, {placed.vcpus} vCPUs pinned on NUMA node {nodes}, "
            f"{gib:.0f} GiB{backing}")
