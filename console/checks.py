"""The problems an admin should see first, derived from one snapshot (no I/O).

Ordered by severity; each says what is wrong and, where we know, how to fix it.
"""
from __future__ import annotations

import shlex
from dataclasses import fields
from operator import attrgetter

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.iommu import blocker_reasons, slot_of
from nodeconsole.console.model import NA, Gpu, HostSnapshot, PciDevice, Problem, VcpuPin, Vm

_RANK = {"error": 0, "warning": 1, "info": 2}


def effective_pins(snap: HostSnapshot, vm: Vm) -> tuple[VcpuPin, ...]:
    """The VM's vCPU pins, leaving out pins to every online CPU (libvirt writes that when a pin is
    removed live, and `virsh vcpupin VM N 0-LAST` means the same: not pinned)."""
    online = {c.id for c in snap.cpus if c.online}
    return tuple(p for p in vm.pins if not online or not online <= set(p.cpus))


def vm_numa_nodes(snap: HostSnapshot, vm: Vm) -> set[int]:
    """NUMA nodes the VM's pinned vCPUs sit on (empty when unpinned)."""
    node = snap.cpu_node()
    return {n for p in effective_pins(snap, vm) for c in p.cpus if (n := node.get(c)) is not None}


def vm_gpu_nodes(snap: HostSnapshot, vm: Vm) -> set[int]:
    """NUMA nodes of the GPUs the VM uses."""
    nodes = set()
    for h in vm.hostdevs:
        g = snap.gpu(h.gpu) if h.gpu else None
        if g is not None and g.numa_node is not None:
            nodes.add(g.numa_node)
    return nodes


def vm_alignment(snap: HostSnapshot, vm: Vm) -> str:
    """"aligned", "cross-numa", "unpinned", or "" (no GPU, nothing to align with)."""
    gpu_nodes = vm_gpu_nodes(snap, vm)
    if not gpu_nodes:
        return ""
    if not effective_pins(snap, vm):
        return "unpinned"
    return "aligned" if vm_numa_nodes(snap, vm) <= gpu_nodes else "cross-numa"


# What moves on every poll and no check reads: the figures NVML and libvirt give each second. Two
# snapshots whose other parts are equal have the same problems (problem_inputs).
GPU_FIGURES = ("memory_used_mib", "utilization_gpu", "utilization_memory", "temperature_c", "power_w",
               "processes")
VM_FIGURES = ("cpu_percent", "steal_percent", "rss_kib")
SNAPSHOT_FIGURES = ("taken_at", "load", "problems")


def _without(obj: object, names: tuple[str, ...]) -> dict[str, object]:
    fields = dict(vars(obj))
    for name in names:
        fields.pop(name, None)
    return fields


# every field of a GPU and a VM but the per-poll figures, as one tuple (built in C: a 500-VM host's
# problem inputs are made every poll)
_GPU_REST = attrgetter(*(f.name for f in fields(Gpu) if f.name not in GPU_FIGURES))
_VM_REST = attrgetter(*(f.name for f in fields(Vm) if f.name not in VM_FIGURES))


def problem_inputs(snap: HostSnapshot) -> tuple[object, ...]:
    """Everything find_problems may read of `snap`: the whole snapshot but its time, its load and the
    per-poll figures of its GPUs and VMs. Equal inputs give equal problems (the collector keeps the last
    problems while they are equal; most parts are then the very same objects, compared at once)."""
    return (_without(snap, SNAPSHOT_FIGURES + ("gpus", "vms")), tuple(map(_GPU_REST, snap.gpus)),
            tuple(map(_VM_REST, snap.vms)))


def find_problems(snap: HostSnapshot) -> tuple[Problem, ...]:
    out = _host_problems(snap)
    by_addr = {d.address: d for d in snap.pci_devices}
    for g in snap.gpus:
        out += _gpu_problems(snap, g, by_addr)
    out += _vm_problems(snap)
    out += _nic_problems(snap)
    out.sort(key=lambda p: _RANK.get(p.severity, 3))
    return tuple(out)


def _host_problems(snap: HostSnapshot) -> list[Problem]:
    """Sources that do not answer, and the IOMMU's state."""
    out: list[Problem] = []
    for name, status in snap.sources.items():
        if status.lost:
            out.append(Problem("error" if name == "sysfs" else "warning", name,
                               f"{name} {status}", _source_fix(name)))
    if snap.sources.sysfs.ok and not snap.iommu.enabled:
        out.append(Problem("warning", "iommu", "IOMMU is off: no GPU can be passed through to a VM",
                           snap.iommu.how_to_enable, check="iommu"))
    if snap.iommu.acs_override:
        out.append(Problem("warning", "iommu", "ACS override is on the kernel command line: IOMMU "
                           "groups do not reflect real isolation", "remove pcie_acs_override",
                           check="acs-override"))
    return out


def _gpu_problems(snap: HostSnapshot, g: Gpu, by_addr: dict[str, PciDevice]) -> list[Problem]:
    """One GPU's health, link, IOMMU group, MIG mode and vfio ownership."""
    out: list[Problem] = []
    label = f"GPU {g.index} {g.address}"
    if g.nvml_error:
        out.append(Problem("error", g.address, f"{label}: {g.nvml_error}",
                           "check `dmesg` for Xid errors; the GPU may need a reset or reboot"))
    for field, what in (("ecc_volatile_uncorrected", "uncorrected ECC errors"),
                        ("remapped_rows_failure", "row remapping failures")):
        v = getattr(g, field)
        if isinstance(v, int) and v > 0:
            out.append(Problem("error", g.address, f"{label}: {v} {what}",
                               "drain the GPU and reset it; replace if it repeats"))
    agg = g.ecc_aggregate_uncorrected
    if isinstance(agg, int) and agg > 0 and not (isinstance(g.ecc_volatile_uncorrected, int)
                                                and g.ecc_volatile_uncorrected > 0):
        out.append(Problem("warning", g.address, f"{label}: {agg} uncorrected ECC errors in its lifetime "
                           "(aggregate; none since the driver loaded)",
                           "check `nvidia-smi -q -d ROW_REMAPPER,ECC -i " + g.address + "`; a pending row remap "
                           "needs a GPU reset; if they keep coming, drain the GPU and RMA it"))
    out += _health_problems(g, label)
    if isinstance(g.remapped_rows_pending, int) and g.remapped_rows_pending > 0:
        out.append(Problem("warning", g.address, f"{label}: row remapping pending",
                           "reset the GPU when idle to apply the remap"))
    if g.link.downtrained:
        out.append(Problem("warning", g.address,
                           f"{label}: PCIe link x{g.link.current_width} of x{g.link.max_width}",
                           "reseat the card or check the riser/slot; the link trained below its width",
                           check="pcie-link"))
    grp = snap.group(g.iommu_group)
    if grp is not None and g.owner.kind != "vfio":
        # Judge the group from this GPU's side: its own card's functions never block it.
        blockers = blocker_reasons(grp, by_addr, [slot_of(g.address)])
        if blockers:
            out.append(Problem("warning", g.address,
                               f"{label}: cannot be passed through: {'; '.join(blockers)}",
                               "move the card to a slot with its own IOMMU group, or enable ACS "
                               "on the switch above it", check="acs"))
    if g.mig.mode != NA and g.mig.pending_mode != NA and g.mig.mode != g.mig.pending_mode:
        out.append(Problem("info", g.address, f"{label}: MIG mode {g.mig.pending_mode} is pending",
                           "reset the GPU (stops everything on it) or reboot to apply", check="mig-pending"))
    if g.owner.kind == "vfio" and not g.owner.vms:
        out.append(Problem("info", g.address, f"{label}: on vfio-pci but no VM uses it",
                           f"`nodeconsole release {g.address}` gives it back to the host"))
    return out


# Clock-event reasons that mean the hardware is protecting itself (not a setting, not idleness).
HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
PCIE_REPLAY_WARN = 100  # retransmitted TLPs since boot: a handful happen, hundreds mean a marginal link


def _health_problems(g: Gpu, label: str) -> list[Problem]:
    """Hardware slowdown, NVLinks down or erroring, the fabric not joined, PCIe replays."""
    out: list[Problem] = []
    events = g.clock_events if isinstance(g.clock_events, tuple) else ()
    slow = [e for e in events if e in HW_SLOWDOWN]
    if slow:
        out.append(Problem("warning", g.address, f"{label}: clocks held down by {', '.join(slow)}",
                           "check cooling and power delivery (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`)"))
    if g.nvlinks:
        down = [lk.link for lk in g.nvlinks if not lk.active]
        if down and len(down) < len(g.nvlinks):
            out.append(Problem("warning", g.address,
                               f"{label}: NVLink {','.join(map(str, down))} down ({len(g.nvlinks) - len(down)} of "
                               f"{len(g.nvlinks)} active)", "reset the GPU; if the link stays down, the baseboard "
                               "needs service (`nvidia-smi nvlink -s`)"))
        bad = [lk for lk in g.nvlinks if lk.active and (isinstance(lk.crc_data, int) and lk.crc_data
                                                        or isinstance(lk.recovery, int) and lk.recovery)]
        if bad:
            out.append(Problem("warning", g.address, f"{label}: NVLink errors on link "
                               f"{','.join(str(lk.link) for lk in bad)}", "watch `nvidia-smi nvlink -e`; growing "
                               "counts mean a bad link: reset the GPU, then service"))
    if g.fabric_state not in (None, NA, "completed"):
        out.append(Problem("warning", g.address, f"{label}: NVLink fabric {g.fabric_state} "
                           f"({g.fabric_status or '-'})", "start nvidia-fabricmanager; until the GPU is in the "
                           "fabric, CUDA programs fail on it"))
    if isinstance(g.pcie_replay_count, int) and g.pcie_replay_count >= PCIE_REPLAY_WARN:
        out.append(Problem("warning", g.address, f"{label}: {g.pcie_replay_count} PCIe replays",
                           "the link retransmits: reseat the card or check the riser/slot", check="pcie-link"))
    return out


def _vm_problems(snap: HostSnapshot) -> list[Problem]:
    """VMs whose config is wrong as read (Proxmox: a malformed line, a stale mapping), whose vCPUs are not
    on their GPU's NUMA node, or not pinned at all."""
    out: list[Problem] = []
    for vm in snap.vms:
        out += [Problem("warning", vm.name, f"VM {vm.name}: {why}",
                        "fix the VM's config (Proxmox: `qm config VMID`, /etc/pve/mapping/pci.cfg)")
                for why in vm.config_problems]
        align = vm_alignment(snap, vm)
        if align == "cross-numa":
            cpus = format_cpulist(c for p in vm.pins for c in p.cpus)
            out.append(Problem("warning", vm.name,
                               f"VM {vm.name}: vCPUs on node(s) "
                               f"{','.join(map(str, sorted(vm_numa_nodes(snap, vm))))} (CPUs {cpus}) but its "
                               f"GPU on node(s) {','.join(map(str, sorted(vm_gpu_nodes(snap, vm))))}",
                               f"`nodeconsole pin {vm.name}` proposes a pinning on the GPU's node"))
        elif align == "unpinned" and vm.state == "running":
            out.append(Problem("info", vm.name, f"VM {vm.name}: GPU VM with unpinned vCPUs",
                               f"`nodeconsole pin {vm.name}`"))
    return out


def _nic_problems(snap: HostSnapshot) -> list[Problem]:
    """VMs with whole GPUs: a NIC function across the sockets from all their GPUs (GPUDirect RDMA over
    the inter-socket link), or none at all while the host has SR-IOV RDMA NICs to give them."""
    from nodeconsole.console.nics import closest_free_vf, distance_to, vm_gpu_addresses, vm_nic_functions

    out: list[Problem] = []
    rdma_vfs = any(n.rdma and n.sriov_totalvfs for n in snap.nics)
    for vm in snap.vms:
        gpus = vm_gpu_addresses(snap, vm)
        if not gpus:
            continue
        held = vm_nic_functions(snap, vm)
        labels = ", ".join(f"GPU {g.index}" for a in gpus if (g := snap.gpu(a)) is not None)
        pick = closest_free_vf(snap, gpus[0])
        first = snap.gpu(gpus[0])
        if pick is not None:
            better = (f"`nodeconsole nic passthrough {pick[1].address} --vm {shlex.quote(vm.name)}` gives it a free "
                      f"VF of {pick[0].label} ({pick[2]} from GPU {first.index if first else '?'})")
        else:
            better = ("create VFs on a NIC beside its GPU (`nodeconsole nic vfs PF N`), then `nodeconsole nic "
                      "passthrough VF --vm VM`")
        for nic, vf in held:
            if all(distance_to(nic, g) == "SYS" for g in gpus):
                what = f"VF {vf.address}" if vf is not None else f"NIC {nic.address}"
                out.append(Problem("warning", vm.name,
                                   f"VM {vm.name}: its {what} ({nic.label}, NUMA node {nic.numa_node}) is across the "
                                   f"sockets from {labels} (SYS): GPUDirect RDMA crosses the inter-socket link",
                                   better + f"; then take {vf.address if vf else nic.address} out of its config"))
        if not held and rdma_vfs:
            out.append(Problem("info", vm.name, f"VM {vm.name}: {labels} but no NIC VF: multi-node training "
                               "goes through the host's network stack", better))
    return out


def _source_fix(name: str) -> str:
    return {
        "sysfs": "run on the host itself, or pass --root to a captured tree",
        "nvml": "load the NVIDIA driver (nvidia-smi should work); GPUs on vfio-pci are still shown",
        "libvirt": "start libvirtd, or pass --libvirt URI; run as root or a member of group libvirt",
        "psutil": "install psutil",
    }[name]
