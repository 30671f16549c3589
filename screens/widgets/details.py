"""Plain-text details of one GPU, VM or IOMMU group (used by the details modal)."""
from __future__ import annotations

from collections.abc import Sequence

from nodeconsole.console.checks import vm_alignment, vm_gpu_nodes, vm_numa_nodes
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.events import KernelEvent, gpu_of
from nodeconsole.console.hosttext import show
from nodeconsole.console.model import Gpu, HostSnapshot, IommuGroup, Vm
from nodeconsole.console.topology import vm_gpus, vm_paths
from nodeconsole.screens.widgets.gpu_text import clocks_text, fabric_text, gpu_group_text, nvlink_text
from nodeconsole.screens.widgets.text import metric

LAST_EVENTS = 5


def gpu_details(snap: HostSnapshot, g: Gpu, events: Sequence[KernelEvent] | None = None) -> str:
    """`events`: GPU events, oldest first (default: the GPU's own, from the snapshot); this GPU's last few
    are shown, with its health verdict."""
    if events is None:
        events = g.events
    lines = [
        f"{g.name}  uuid {g.uuid or '-'}  nvidia-smi index {g.smi}",
        f"health {g.health.summary}",
        f"address {g.address}  NUMA node {metric(g.numa_node)}  IOMMU group {metric(g.iommu_group)}",
        f"driver {g.driver or 'none'}  owner {g.owner.kind}  VMs {', '.join(g.owner.vms) or '-'}",
        f"PCIe link x{metric(g.link.current_width)} of x{metric(g.link.max_width)}, "
        f"{g.link.current_speed or '-'} of {g.link.max_speed or '-'}",
        f"utilization {metric(g.utilization_gpu, '%')}  memory {metric(g.memory_used_mib)}/"
        f"{metric(g.memory_total_mib)} MiB  temp {metric(g.temperature_c, 'C')}  "
        f"power {metric(g.power_w, 'W')}/{metric(g.power_limit_w, 'W')}",
        f"ECC uncorrected volatile {metric(g.ecc_volatile_uncorrected)} aggregate "
        f"{metric(g.ecc_aggregate_uncorrected)}, corrected volatile {metric(g.ecc_volatile_corrected)} aggregate "
        f"{metric(g.ecc_aggregate_corrected)}  retired pages {metric(g.retired_pages)}",
        f"remapped rows correctable {metric(g.remapped_rows_correctable)} uncorrectable "
        f"{metric(g.remapped_rows_uncorrectable)} pending {metric(g.remapped_rows_pending)} failed "
        f"{metric(g.remapped_rows_failure)}  PCIe replays {metric(g.pcie_replay_count)}",
        f"clocks {clocks_text(g)}",
        f"NVLink {nvlink_text(g)}  fabric {fabric_text(g)}",
        f"MIG mode {g.mig.mode} (pending {g.mig.pending_mode})",
    ]
    if g.nvml_index is None:
        lines.append("NVML does not see this GPU (bound to another driver): metrics come from sysfs only")
    if g.nvml_error:
        lines.append(f"NVML error: {g.nvml_error}")
    for i in g.mig.instances:
        lines.append(f"  MIG {i.profile} slices {i.start}-{i.start + i.size - 1}  {i.uuid or ''}  VM {i.vm or '-'}")
    for t in g.vgpu.types:
        lines.append(f"  vGPU type {t.id} {t.name} available {metric(t.available)} ({t.via} on {t.parent})")
    for v in g.vgpu.instances:
        lines.append(f"  vGPU {v.uuid} {v.type_name} on {v.parent} VM {v.vm or '-'}")
    for p in g.processes:
        lines.append(f"  process {p.pid} {p.name} {metric(p.used_memory_mib)} MiB")
    group = gpu_group_text(snap, g)
    if group:
        lines.append(group)
    mine = [ev for ev in events if gpu_of(ev, (g.address,)) == g.address][-LAST_EVENTS:]
    lines.append(f"Last events ({len(mine)}, newest first):" if mine else "Last events: none in the kernel log")
    for ev in reversed(mine):
        lines.append(f"  {ev.when}  {ev.what} {ev.severity}  VM {ev.vm or '-'}  {show(ev.text, 160)}  "
                     f"→ {ev.action}")
    return "\n".join(lines)


def vm_details(snap: HostSnapshot, v: Vm) -> str:
    node = snap.cpu_node()
    lines = [
        f"state {v.state}  vCPUs {v.vcpus}  memory {v.memory_kib // 1024} MiB  CPU {metric(v.cpu_percent, '%')}"
        f"  steal {metric(v.steal_percent, '%', 1)}",
        f"NUMA alignment {vm_alignment(snap, v) or 'no GPU'}: vCPUs on nodes "
        f"{sorted(vm_numa_nodes(snap, v)) or '-'}, GPUs on nodes {sorted(vm_gpu_nodes(snap, v)) or '-'}",
        f"memory policy {v.numa_mode or 'none'} {format_cpulist(v.numa_nodeset)}",
        f"emulator pins {format_cpulist(v.emulator_pins) or '-'}",
    ]
    for g in vm_gpus(snap, v):
        lines.append(f"  GPU {g.index} (nvidia-smi {g.smi}) {g.address}  NUMA node {metric(g.numa_node)}")
    for path in vm_paths(snap, v):
        lines.append(f"  path {path.a} (node {metric(path.a_node)}) ↔ {path.b} (node {metric(path.b_node)}): "
                     f"{path.level}")
    for p in v.pins:
        nodes = sorted({n for c in p.cpus if (n := node.get(c)) is not None})
        lines.append(f"  vCPU {p.vcpu:>3} → CPUs {format_cpulist(p.cpus)}  (node {','.join(map(str, nodes))})")
    if not v.pins:
        lines.append("  vCPUs not pinned (float over all host CPUs)")
    for h in v.hostdevs:
        what = h.address if h.type == "pci" else h.uuid
        lines.append(f"  hostdev {h.type} {what}" + (f" → GPU {h.gpu}" if h.gpu else ""))
    return "\n".join(lines)


def group_details(snap: HostSnapshot, grp: IommuGroup) -> str:
    verdict = "viable for passthrough" if grp.viable else "NOT viable for passthrough"
    lines = [verdict + (f": {grp.reason}" if grp.reason else "")]
    for a in grp.devices:
        d = snap.pci(a)
        if d is None:
            lines.append(f"  {a}")
            continue
        lines.append(f"  {a} {d.class_name or ''}: {d.device_name or d.vendor_name} [{d.driver or 'no driver'}]"
                     + ("  (bridge, exempt)" if d.is_bridge else ""))
    gpus = [g for a in grp.devices if (g := snap.gpu(a)) is not None]
    if len(gpus) > 1:  # the verdict above is about the group's first card: each GPU from its own side
        lines.append("Each GPU (its own functions never block it):")
        lines += [f"  GPU {g.index} {g.address}: {gpu_group_text(snap, g).partition(': ')[2]}" for g in gpus]
    return "\n".join(lines)
