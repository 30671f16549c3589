"""One HostSnapshot assembled from the sources' data, in one place.

`assemble` is pure but for the `marks` it is handed: it merges the sources' data into the facts (the
PCI functions, the GPUs, the VMs with their host devices mapped to GPUs), asks `marks` (the collector's
drains, kernel-log events and health verdicts) what to put on them, derives the NICs and the problems,
and builds the frozen snapshot once. What it derives from parts that rarely change is kept in a
`Derived` for the next poll.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from nodeconsole.console.derived import Derived, GpuIndex
from nodeconsole.console.gpu_events import KernelEvent, SourceChange
from nodeconsole.console.gpu_merge import merge_gpus, with_fields
from nodeconsole.console.model import (
    SCHEMA,
    Gpu,
    Hostdev,
    HostInfo,
    HostSnapshot,
    Iommu,
    Load,
    Problem,
    Sources,
    VgpuInstance,
    Vm,
)
from nodeconsole.console.sources.types import LibvirtData, NvmlData, SysfsData


@dataclass(frozen=True)
class Marks:
    """What the collector puts on a snapshot beside the sources' facts: each GPU with its drain, its
    kernel-log events and its health verdict; the host's and guests' GPU events; the sources lost and
    got back; why the kernel log cannot be read; the problems the events raise (first)."""
    gpus: tuple[Gpu, ...]
    kernel_events: tuple[KernelEvent, ...] = ()
    source_changes: tuple[SourceChange, ...] = ()
    kernel_log_error: str = ""
    problems: tuple[Problem, ...] = ()


MarkFn = Callable[[HostSnapshot], Marks]


def assemble(sysfs: SysfsData | None, nvml: NvmlData | None, virt: LibvirtData | None,
             load: Load | None, sources: Sources, known_names: dict[str, str] | None = None,
             derived: Derived | None = None, marks: MarkFn | None = None) -> HostSnapshot:
    """The snapshot of the sources' data (tested directly). `derived`: what the previous snapshot
    derived (see Derived); without it everything is derived afresh. `marks`: what to put on the facts
    (see Marks); without it, nothing."""
    d = derived if derived is not None else Derived()
    with d.lock:
        return _assemble(sysfs, nvml, virt, load, sources, known_names or {}, d, marks)


def _assemble(sysfs: SysfsData | None, nvml: NvmlData | None, virt: LibvirtData | None, load: Load | None,
              sources: Sources, known_names: dict[str, str], d: Derived, marks: MarkFn | None) -> HostSnapshot:
    from nodeconsole.console.checks import find_problems, problem_inputs
    from nodeconsole.console.nics import build_nics, nic_inputs

    pci = sysfs.pci_devices if sysfs else ()
    d.index(pci, sysfs.vgpu_instances if sysfs else (), sysfs.vgpu_types if sysfs else ())
    vms = map_hostdevs(virt.vms if virt else (), d.gpu_of, d.mdevs or (), d.hostdevs, d.mapped_vms)
    # the facts: what the sources say, nothing derived; what is derived and marked is read from them
    facts = HostSnapshot(
        schema=SCHEMA, taken_at=time.time(), host=sysfs.host if sysfs else HostInfo(),
        cpus=sysfs.cpus if sysfs else (), numa_nodes=sysfs.numa_nodes if sysfs else (), pci_devices=pci,
        iommu=sysfs.iommu if sysfs else Iommu(enabled=False), gpus=merge_gpus(d, nvml, vms, known_names),
        vms=vms, load=load or Load(), sources=sources, nvml_driver_version=nvml.driver_version if nvml else None,
    )
    net = sysfs.net_functions if sysfs else ()
    nics = d.keep("nics", nic_inputs(facts, net), lambda: build_nics(facts, net))
    checked = with_fields(facts, nics=nics)  # what the checks read (never handed out)
    problems = d.keep("problems", problem_inputs(checked), lambda: find_problems(checked))
    m = marks(facts) if marks is not None else Marks(facts.gpus)
    return HostSnapshot(
        schema=facts.schema, taken_at=facts.taken_at, host=facts.host, cpus=facts.cpus,
        numa_nodes=facts.numa_nodes, pci_devices=pci, iommu=facts.iommu, gpus=m.gpus, vms=vms, load=facts.load,
        sources=sources, nvml_driver_version=facts.nvml_driver_version,
        problems=(*m.problems, *problems) if m.problems else problems, nics=nics,
        kernel_events=m.kernel_events, source_changes=m.source_changes, kernel_log_error=m.kernel_log_error,
    )


def map_hostdevs(vms: Iterable[Vm], gpu_of: GpuIndex, vgpu_instances: Iterable[VgpuInstance],
                 memo: dict[int, tuple[tuple[Hostdev, ...], tuple[Hostdev, ...]]],
                 mapped_vms: dict[str, tuple[Vm, Vm]] | None = None) -> tuple[Vm, ...]:
    """Each VM's host devices with the GPU each belongs to. `memo` (made with the same `gpu_of` and
    `vgpu_instances`): the last poll's mappings by hostdevs tuple, replaced by this poll's;
    `mapped_vms`: the last poll's records by name (the source's, the mapped one), replaced by this
    poll's."""
    mdev_parent: dict[str, str] | None = None
    out = []
    seen: dict[int, tuple[tuple[Hostdev, ...], tuple[Hostdev, ...]]] = {}
    mapped_vms = {} if mapped_vms is None else mapped_vms
    now_mapped: dict[str, tuple[Vm, Vm]] = {}
    for vm in vms:
        if not vm.hostdevs:  # most VMs of a big host: nothing to map
            out.append(vm)
            continue
        hit = memo.get(id(vm.hostdevs))
        if hit is not None and hit[0] is vm.hostdevs:
            mapped = hit[1]
        else:
            if mdev_parent is None:
                mdev_parent = {v.uuid: v.parent for v in vgpu_instances}
            mapped = _mapped(vm.hostdevs, gpu_of, mdev_parent)
        seen[id(vm.hostdevs)] = (vm.hostdevs, mapped)
        if mapped is vm.hostdevs:
            out.append(vm)
            continue
        last = mapped_vms.get(vm.name)
        # the same record with the same mapping: the very same mapped record as the last poll's
        vm_mapped = last[1] if last is not None and last[0] is vm and last[1].hostdevs is mapped else \
            with_fields(vm, hostdevs=mapped)
        now_mapped[vm.name] = (vm, vm_mapped)
        out.append(vm_mapped)
    memo.clear()
    memo.update(seen)
    mapped_vms.clear()
    mapped_vms.update(now_mapped)
    return tuple(out)


def _mapped(hostdevs: tuple[Hostdev, ...], gpu_of: GpuIndex, mdev_parent: dict[str, str]) -> tuple[Hostdev, ...]:
    """`hostdevs` each with its GPU (the very same tuple when none moved)."""
    devs = []
    for h in hostdevs:
        gpu = None
        if h.type == "pci" and h.address:
            gpu = gpu_of(h.address)
        elif h.type == "mdev" and h.uuid and h.uuid in mdev_parent:
            gpu = gpu_of(mdev_parent[h.uuid])
        devs.append(replace(h, gpu=gpu) if gpu != h.gpu else h)
    changed = any(a is not b for a, b in zip(devs, hostdevs))
    return tuple(devs) if changed else hostdevs
