"""The operations of a `prepare` plan (actions/prepare.py), part by part: hugepages, the devices to
vfio-pci, the VM's definition (shape first, then devices and pins), the guest's NCCL files."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from nodeconsole.actions.gpu_holders import STUB_DRIVERS, driver_of
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.live_steps import page_text
from nodeconsole.actions.plan import Op, Plan, Step, build_step
from nodeconsole.actions.targets import VFIO, companions, resolve_gpu
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.model import HostSnapshot, Vm
from nodeconsole.console.nics import distance_to, vm_nic_functions

if TYPE_CHECKING:
    from nodeconsole.actions.placement import Placement
    from nodeconsole.console.vms.backend import VmShape



# -- hugepages -----------------------------------------------------------------------------------------

def hugepage_ops(host: ActionHost, snap: HostSnapshot, placed: Placement, plan: Plan) -> list[Op]:
    """Reserve what the VM needs on each node beyond the free pages, now and at boot."""
    need = placed.hugepages
    if not need.size_kib:
        return []
    ops: list[Op] = []
    at_boot = {n.id: dict(n.hugepages).get(need.size_kib, 0) for n in snap.numa_nodes if n.memory_kib > 0}
    for node, pages in sorted(need.per_node.items()):
        short = pages - need.free.get(node, 0)
        if short <= 0:
            continue
        target = need.reserved.get(node, 0) + short
        at_boot[node] = target
        ops.append({"kind": "hugepages", "node": node, "size_kib": need.size_kib, "count": target, "boot": True})
    if not ops:
        plan.notes.append(f"hugepages: node(s) {format_cpulist(need.per_node)} have the "
                          f"{sum(need.per_node.values())} free {page_text(need.size_kib)} page(s) the VM needs")
        return ops
    return ops + boot_ops(host, snap, need.size_kib, at_boot, plan)


def boot_ops(host: ActionHost, snap: HostSnapshot, size_kib: int, per_node: dict[int, int], plan: Plan) -> list[Op]:
    """The boot-loader edit that keeps `per_node` pages of `size_kib` reserved after a reboot."""
    from nodeconsole.actions.boot_hugepages import hugepage_words
    from nodeconsole.actions.doctor_fixes import cmdline_ops, current_words

    words, note = hugepage_words(current_words(host, snap), size_kib, per_node, snap.host.kernel)
    if note:
        plan.notes.append(note)
    return cmdline_ops(host, snap, "hugepages", words, plan) if words else []


# -- the devices ---------------------------------------------------------------------------------------

def device_ops(host: ActionHost, snap: HostSnapshot, placed: Placement, vm: str, plan: Plan) -> list[Op]:
    """The GPUs' groups and the VFs to vfio-pci, with passthrough's checks for each GPU."""
    from nodeconsole.actions.passthrough import passthrough_checks

    ops: list[Op] = []
    for address in placed.gpus:
        gpu = resolve_gpu(snap, address)
        members = passthrough_checks(host, snap, gpu, vm, plan)
        if not plan.ok:
            return []
        to_bind = [a for a in members if driver_of(snap, a) not in STUB_DRIVERS]
        ops += [{"kind": "pci_driver", "device": a, "override": VFIO, "driver": VFIO, "group": gpu.iommu_group,
                 "vfio_node": a == to_bind[-1]} for a in to_bind]
    # the VFs in reverse order: an undo binds them back to their driver in address order, and the kernel
    # names their RDMA devices (mlx5_N, the lowest free N) in the order they probe: each gets its name back
    for address in sorted((a for a in placed.nics if a), reverse=True):
        dev = snap.pci(address)
        if dev is not None and dev.driver not in STUB_DRIVERS:
            ops.append({"kind": "pci_driver", "device": address, "override": VFIO, "driver": VFIO,
                        "group": dev.iommu_group, "vfio_node": True})
    if ops and not host.root.exists(f"sys/bus/pci/drivers/{VFIO}"):
        ops.insert(0, {"kind": "module", "name": VFIO})
    return ops


# -- the definition ------------------------------------------------------------------------------------

def shape_of(snap: HostSnapshot, vm: Vm, placed: Placement, guest_threads: bool = True) -> VmShape:
    """The VM's new size and memory layout: one node → `<numatune>` strict there; several → a guest NUMA
    cell per node (its vCPUs and an even share of the memory) bound to it. Without `guest_threads` (a
    hypervisor whose config has no threads per core) the guest's cores have one thread each."""
    from nodeconsole.console.vms.backend import GuestCell, VmShape

    page = placed.hugepages.size_kib or None
    nodes = list(placed.nodes)
    numa = ("strict", format_cpulist(nodes)) if nodes else None
    cells: tuple[GuestCell, ...] = ()
    if len(nodes) > 1:
        node_of = {c.id: c.numa_node for c in snap.cpus}
        by_node = {n: [i for i, cpu in enumerate(placed.cpus) if node_of.get(cpu) == n] for n in nodes}
        share = placed.memory_kib // len(nodes)
        cells = tuple(GuestCell(id=i, cpus=format_cpulist(by_node[n]),
                                memory_kib=share + (placed.memory_kib - share * len(nodes) if i == 0 else 0),
                                host_nodes=str(n)) for i, n in enumerate(nodes))
    return VmShape(vcpus=placed.vcpus, memory_kib=placed.memory_kib, hugepage_kib=page, numa=numa, cells=cells,
                   threads_per_core=placed.threads_per_core if guest_threads else 1)


def definition_ops(host: ActionHost, snap: HostSnapshot, vm: Vm, placed: Placement, shape: VmShape,
                   plan: Plan) -> list[Op]:
    """The shape first (its undo restores the definition as it was), then the host devices, the far VFs
    out, and the pins."""
    ops: list[Op] = [{"kind": "vm_shape", "vm": vm.name, "shape": shape.to_dict()}]
    for address in placed.gpus:
        ops += [{"kind": "vm_hostdev", "vm": vm.name, "address": a, "present": True, "managed": True}
                for a in companions(snap, resolve_gpu(snap, address))]
    ops += [{"kind": "vm_hostdev", "vm": vm.name, "address": a, "present": True, "managed": True}
            for a in placed.nics if a]
    for nic, vf in vm_nic_functions(snap, vm):
        held = vf.address if vf is not None else nic.address
        if held in placed.nics or not placed.gpus:
            continue
        if all(distance_to(nic, g) == "SYS" for g in placed.gpus):
            ops.append({"kind": "vm_hostdev", "vm": vm.name, "address": held, "present": False, "managed": True})
            plan.notes.append(f"{held} ({nic.label}) is across the sockets from every GPU the VM gets: it is "
                              "taken out of the definition (the VF stays on its driver)")
    ops.append(_pins_op(host, vm, placed, plan))
    return ops


def _pins_op(host: ActionHost, vm: Vm, placed: Placement, plan: Plan) -> Op:
    """Each vCPU on its CPU and the emulator on the kept cores; where the hypervisor pins the whole process
    (Proxmox's `affinity`), every vCPU and the emulator on the one set of the placed CPUs, said in the plan."""
    if host.vms is not None and host.vms.whole_process_pins:
        one = format_cpulist(placed.cpus)
        plan.notes.append(f"{host.vms.label} pins the whole QEMU process (affinity), not each vCPU: every vCPU and "
                          f"the emulator threads run on CPU {one}")
        return {"kind": "vm_pins", "vm": vm.name, "scope": "config",
                "vcpus": [[i, one] for i in range(len(placed.cpus))], "emulator": one}
    return {"kind": "vm_pins", "vm": vm.name, "scope": "config",
            "vcpus": [[i, str(cpu)] for i, cpu in enumerate(placed.cpus)],
            "emulator": format_cpulist(placed.emulator) or None}


# -- the guest's NCCL files ----------------------------------------------------------------------------

def nccl_ops(host: ActionHost, snap: HostSnapshot, vm: str, placed: Placement, plan: Plan) -> list[Op]:
    if not placed.gpus:
        return []
    if host.vms is not None and host.vms.hypervisor != "libvirt":
        plan.notes.append(f"the guest's NCCL files are not written on {host.vms.label} yet: its config gives the host "
                          "devices no guest PCI address until the VM starts")
        return []
    from nodeconsole.actions.nccl.guest_files import guest_files_dir

    where = guest_files_dir(vm)
    if where is None:
        return []
    from nodeconsole.actions.nccl.topo_xml import snapshot_nvlinks

    op: Op = {"kind": "nccl_guest_files", "vm": vm, "dir": where}
    links = snapshot_nvlinks(snap, list(placed.gpus))  # read now: on vfio-pci NVML no longer sees them
    if links:
        op["nvlinks"] = {g: [[r, n] for r, n in rs] for g, rs in links.items()}
    return [op]


# -- steps ----------------------------------------------------------------------------------------------

def add_prepare_steps(host: ActionHost, plan: Plan, ops: list[Op]) -> None:
    """Build the steps (each operation once). A pins step planned before the shape step that runs first
    undoes to what the shape left (actions/shape_steps.py `pins_after_shape`), so the shape's undo follows."""
    from nodeconsole.actions.shape_steps import pins_after_shape
    from nodeconsole.console.vms.backend import VmShape

    seen: set[str] = set()
    shape: VmShape | None = None
    for op in ops:
        key = json.dumps(op, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        step: Step | None = build_step(host, op)
        if op["kind"] == "vm_shape":
            shape = VmShape.from_dict(op["shape"])
        if step is None:
            continue
        if op["kind"] == "vm_pins" and shape is not None:
            step = pins_after_shape(step, shape)
        plan.steps.append(step)
    if any(s.op.get("kind") == "nccl_guest_files" for s in plan.steps):
        plan.notes.append("the NCCL files are written from the definition once the devices are in: copy topo.xml "
                          "into the guest (NCCL_TOPO_FILE) and source nccl.env there")
