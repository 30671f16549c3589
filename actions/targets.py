"""What a request names, shared by the actions that plan on GPUs, VMs and PCI functions (passthrough,
release, MIG, vGPU, NIC pairing, drains): `resolve_gpu` / `resolve_vm` (the closest known GPUs and VMs
for a typo), a GPU's IOMMU group members and companion functions, which VM definitions hold some
addresses, and `add_steps`. Its own module so those actions import it, not each other.
"""
from __future__ import annotations

import re

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check, Op, Plan, RequestError, Step, build_step
from nodeconsole.console.argtypes import did_you_mean, smi_index
from nodeconsole.console.hosttext import visible
from nodeconsole.console.iommu import EXEMPT_DRIVERS, slot_of
from nodeconsole.console.model import Gpu, HostSnapshot, PciDevice, Vm
from nodeconsole.console.pciaddr import parse_pci_address

VFIO = "vfio-pci"
_INDEX_RE = re.compile(r"^[0-9]+$")  # ASCII digits only (\d takes "٤")
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F-]{8,}$")


def _gpu_names(snap: HostSnapshot) -> list[str]:
    return [str(g.index) for g in snap.gpus] + [g.address for g in snap.gpus] + [g.uuid for g in snap.gpus if g.uuid]


def resolve_gpu(snap: HostSnapshot, text: str) -> Gpu:
    """The GPU named by a console index ("3"), a PCI address, an NVML UUID ("GPU-...") or nvidia-smi's
    index ("smi:2"). Raises RequestError saying what is wrong, the closest GPU names and what is accepted."""
    t = (text or "").strip()
    listing = ", ".join(f"{g.index} ({g.address})" for g in snap.gpus) or "none"
    try:
        smi = smi_index(t)
    except ValueError as e:
        raise RequestError(str(e)) from None
    if smi is not None:
        return _by_smi_index(snap, smi)
    if _INDEX_RE.match(t):
        for g in snap.gpus:
            if g.index == int(t):
                return g
        hint = did_you_mean(t, [str(g.index) for g in snap.gpus])
        raise RequestError(f"no GPU with index {t}{hint}; this host's GPUs: {listing}")
    if _UUID_RE.match(t):
        for g in snap.gpus:
            if g.uuid and g.uuid.lower() == t.lower():
                return g
        hint = did_you_mean(t, [g.uuid for g in snap.gpus if g.uuid])
        raise RequestError(f"no GPU with UUID {visible(t)}{hint} (NVML does not see GPUs on vfio-pci: use the "
                           f"PCI address); this host's GPUs: {listing}")
    try:
        address = parse_pci_address(t)
    except ValueError:
        raise RequestError(f"{visible(repr(text))} is not a GPU{did_you_mean(t, _gpu_names(snap))}: give a console "
                           f"index, a PCI address (DDDD:BB:DD.F), a UUID (GPU-...) or nvidia-smi's index (smi:N); "
                           f"this host's GPUs: {listing}") from None
    gpu = snap.gpu(address)
    if gpu is not None:
        return gpu
    hint = did_you_mean(address, [g.address for g in snap.gpus])
    dev = snap.pci(address)
    if dev is not None:
        raise RequestError(f"{address} is not an NVIDIA GPU ({dev.class_name or f'class {dev.class_id:06x}'} "
                           f"{dev.device_name}){hint}; this host's GPUs: {listing}")
    raise RequestError(f"no PCI device {address} on this host{hint}; its GPUs: {listing}")


def _by_smi_index(snap: HostSnapshot, smi: int) -> Gpu:
    for g in snap.gpus:
        if g.nvml_index == smi:
            return g
    seen = ", ".join(f"smi:{g.nvml_index} = {g.index} ({g.address})" for g in snap.gpus if g.nvml_index is not None)
    hidden = ", ".join(f"{g.index} ({g.address}, {g.driver or 'no driver'})" for g in snap.gpus if g.nvml_index is None)
    why = f"; NVML does not see {hidden}: name those by console index or PCI address" if hidden else ""
    if not snap.sources.nvml.ok:
        why += f" (NVML {snap.sources.nvml})"
    raise RequestError(f"nvidia-smi has no GPU smi:{smi} on this host; its GPUs: {seen or 'none'}{why}")


def resolve_vm(snap: HostSnapshot, name: str) -> Vm:
    """The VM called `name`. RequestError naming the closest known VMs (or why none are known)."""
    vm = snap.vm(name)
    if vm is not None:
        return vm
    if not snap.sources.libvirt.ok:
        raise RequestError(f"no VM named {visible(repr(name))} (libvirt {snap.sources.libvirt})")
    known = sorted(v.name for v in snap.vms)
    raise RequestError(f"unknown VM {visible(name)}{did_you_mean(name, known)}; known VMs: "
                       f"{', '.join(visible(n) for n in known) or 'none'}")


def _is_bridge(dev: PciDevice | None) -> bool:
    return dev is not None and (dev.is_bridge or dev.driver in EXEMPT_DRIVERS)


def group_members(snap: HostSnapshot, gpu: Gpu) -> list[str]:
    """Non-bridge members of the GPU's IOMMU group (every function that must go to vfio together);
    without IOMMU groups, the functions of the GPU's card."""
    grp = snap.group(gpu.iommu_group)
    addrs = list(grp.devices) if grp is not None else [d.address for d in snap.pci_devices
                                                         if slot_of(d.address) == slot_of(gpu.address)]
    return sorted(a for a in addrs if not _is_bridge(snap.pci(a)))


def companions(snap: HostSnapshot, gpu: Gpu) -> list[str]:
    """The GPU and the other functions of its card in its group (audio, USB-C): what a VM is given."""
    return [a for a in group_members(snap, gpu) if slot_of(a) == slot_of(gpu.address)]


def pci_id(dev: PciDevice) -> str:
    return f"{dev.vendor_id:04x}:{dev.device_id:04x}"


def gpu_label(gpu: Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.address}, {gpu.name}, nvidia-smi {gpu.smi})"


def source_checks(snap: HostSnapshot) -> list[Check]:
    if not snap.sources.sysfs.ok:
        return [Check("host readable", False, f"sysfs {snap.sources.sysfs}",
                      "run on the host itself (or --demo)")]
    return []


def vms_with(host: ActionHost, snap: HostSnapshot, addresses: set[str],
              unreadable: dict[str, str] | None = None) -> dict[str, list[str]]:
    """VM name → which of `addresses` its persistent config holds as PCI hostdevs. A VM whose config
    cannot be read goes into `unreadable` (name → why), never silently out of the plan."""
    out: dict[str, list[str]] = {}
    cfg = host.vms
    for v in snap.vms:
        name = v.name
        try:
            have = cfg.pci_hostdevs(name) if cfg is not None else {
                h.address for h in v.hostdevs if h.type == "pci" and h.address}
        except Exception as e:
            if unreadable is not None:
                unreadable[name] = str(e) or type(e).__name__
            continue
        hit = sorted(addresses & have)
        if hit:
            out[name] = hit
    return out



def add_steps(host: ActionHost, plan: Plan, ops: list[Op]) -> None:
    for op in ops:
        step: Step | None = build_step(host, op)
        if step is not None:
            plan.steps.append(step)
