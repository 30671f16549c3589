"""vGPU: the types a GPU can still create, creating one and attaching it to a VM's config, removing it.

Two kernel interfaces (REFERENCE.md §4): mediated devices (`mdev_supported_types/TYPE/create` takes a
UUID, `/sys/bus/mdev/devices/UUID/remove` takes 1), and SR-IOV VFs of vGPU 17+ (write a type id to the
VF's `nvidia/current_vgpu_type`, 0 to remove; the VF itself is the VM's PCI hostdev, managed='no' so
libvirt leaves it on nvidia). MIG-backed types (`…-3-40C`) each need a GPU instance of their profile.

Plans only; the runner applies. Step kinds: `mdev`, `vf_vgpu`, `vm_mdev` (and `vm_hostdev` from
actions/vm_hostdev.py for VFs).
"""
from __future__ import annotations

import os
import re
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass

from nodeconsole.actions.gpu_names import with_gpu_name
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import (
    Check,
    Op,
    Plan,
    RequestError,
    Step,
    StepError,
    build_step,
    step_kind,
    unreadable_vm_check,
    vms_known_check,
)
from nodeconsole.actions.targets import resolve_gpu
from nodeconsole.actions.vm_guard import vm_change_checks, vms_change_checks
from nodeconsole.console.model import Gpu, HostSnapshot, VgpuInstance, Vm
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.vms.backend import VmConfigError

_MIG_TYPE = re.compile(r"-(\d+)-(\d+)[A-Z]$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_TYPE_DIR = re.compile(r"^[A-Za-z0-9_.-]+$")


def mig_profile_of(type_name: str) -> str | None:
    """The GPU instance profile a MIG-backed vGPU type lives in: "NVIDIA H100XM-3-40C" → "3g.40gb"."""
    m = _MIG_TYPE.search(type_name or "")
    return f"{m.group(1)}g.{m.group(2)}gb" if m else None


@dataclass(frozen=True)
class Offer:
    """One vGPU type a GPU offers and how many more can be created now."""
    gpu: str
    type_id: str  # mdev type directory ("nvidia-1103") or SR-IOV type id ("1113")
    name: str
    via: str  # "mdev" or "sriov"
    available: int
    parents: tuple[str, ...]  # where to create: the GPU (mdev) or its free VFs offering the type
    framebuffer_mib: int | None = None
    why_none: str = ""  # when available is 0: why


def _vf_held(g: Gpu) -> dict[str, list[str]]:
    """MIG profile → VFs holding a MIG-backed vGPU of that profile."""
    out: dict[str, list[str]] = {}
    for i in g.vgpu.instances:
        prof = mig_profile_of(i.type_name)
        if prof and i.uuid == i.parent:
            out.setdefault(prof, []).append(i.parent)
    return out


def offers(snap: HostSnapshot, g: Gpu) -> list[Offer]:
    """Every vGPU type the GPU offers now, with available counts (0 with the reason)."""
    out: list[Offer] = []
    running = Counter(i.type_name for i in g.vgpu.instances)
    for t in g.vgpu.types:
        if t.via != "mdev":
            continue
        avail = t.available or 0
        why = "" if avail else (
            "time-sliced vGPU runs one type per GPU: " + ", ".join(f"{n} × {name}" for name, n in running.items())
            + " exist" if running else "available_instances is 0")
        out.append(Offer(g.address, t.id, t.name, "mdev", avail, (t.parent,), t.framebuffer_mib, why))
    vfs: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for t in g.vgpu.types:
        if t.via == "sriov":
            vfs.setdefault(t.id, []).append(t.parent)
            names[t.id] = t.name
    held = _vf_held(g)
    mig_on = g.mig.mode == "enabled"
    for tid, parents in sorted(vfs.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        name, avail, why = names[tid], len(parents), ""
        prof = mig_profile_of(name)
        if prof and mig_on:
            gis = [i for i in g.mig.instances if i.profile == prof]
            free = max(0, len(gis) - len(held.get(prof, [])))
            if free < avail:
                avail = free
            if avail == 0:
                used = ", ".join(held.get(prof, [])) or "none"
                why = (f"no free {prof} GPU instance (the GPU has {len(gis)}; VFs holding {prof} vGPUs: {used}); "
                       f"create one first: nodeconsole mig {g.address} LAYOUT")
        out.append(Offer(g.address, tid, name, "sriov", avail, tuple(sorted(parents)), None, why))
    return out


def _find_offer(all_offers: list[Offer], g: Gpu, text: str) -> Offer:
    t = (text or "").strip()
    for o in all_offers:
        short = o.name[7:] if o.name.startswith("NVIDIA ") else o.name
        if t in (o.type_id, o.name) or t.lower() in (o.name.lower(), short.lower()) or \
                (o.via == "mdev" and o.type_id == f"nvidia-{t}"):
            return o
    listing = ", ".join(f"{o.type_id} ({o.name})" for o in all_offers) or "none"
    raise RequestError(f"GPU {g.index} ({g.address}) offers no vGPU type {text!r}; it offers: {listing}")


def _label(g: Gpu) -> str:
    return f"GPU {g.index} ({g.address}, {g.name}, nvidia-smi {g.smi})"


def _check_vm(host: ActionHost, snap: HostSnapshot, vm: str) -> Vm:
    found = snap.vm(vm)
    if found is None:
        known = ", ".join(sorted(v.name for v in snap.vms)) or "none"
        why = f"libvirt {snap.sources.libvirt}" if not snap.sources.libvirt.ok else f"known VMs: {known}"
        raise RequestError(f"no VM named {vm!r} ({why})")
    return found


def plan_vgpu_create(host: ActionHost, snap: HostSnapshot, gpu_text: str, type_text: str, vm: str | None = None,
                     uuid: str | None = None) -> Plan:
    """Plan creating one vGPU of a type on a GPU (an mdev with `uuid`, default a new one; or a free VF),
    and adding it to `vm`'s config. Raises RequestError for an unknown GPU, type or VM, or a bad UUID."""
    g = resolve_gpu(snap, gpu_text)
    target = _check_vm(host, snap, vm) if vm is not None else None
    if uuid is not None and not _UUID.match(uuid):
        raise RequestError(f"{uuid!r} is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
    all_offers = offers(snap, g)
    plan = Plan(action="vgpu-create", title=f"Create a vGPU on {_label(g)}" + (f" for VM {vm}" if vm else ""),
                request=with_gpu_name({"gpu": g.address, "given": gpu_text, "type": type_text, "vm": vm}, g))
    if not all_offers:
        plan.checks.append(Check("the GPU offers vGPU types", False,
                                 f"no mdev types and no SR-IOV VF with creatable types on {g.address} "
                                 f"(driver {g.driver or 'none'})",
                                 "install the NVIDIA vGPU host driver; on SR-IOV GPUs enable the VFs first "
                                 f"(/usr/lib/nvidia/sriov-manage -e {g.address})"))
        return plan
    offer = _find_offer(all_offers, g, type_text)
    plan.title = f"Create vGPU {offer.name} on {_label(g)}" + (f" for VM {vm}" if vm else "")
    plan.request["type"] = offer.type_id
    plan.checks.append(Check(f"{offer.name} can be created", offer.available > 0,
                             f"{offer.available} more can be created" if offer.available else
                             f"no instance available: {offer.why_none or 'none left'}",
                             "free one: remove a vGPU of this GPU (nodeconsole vgpu list shows them); a "
                             "MIG-backed type needs a free GPU instance of its profile (nodeconsole mig)"))
    if target is not None:
        plan.checks += vms_known_check(snap, f"VM {target.name}'s devices")
        plan.checks += vm_change_checks(host, target, gives_device=True)
    if vm is not None and host.vms is None:
        plan.checks.append(Check("libvirt reachable", False, "this host has no libvirt connection",
                                 "pass --libvirt URI"))
    if not plan.ok:
        return plan
    ops: list[Op] = []
    if offer.via == "mdev":
        uuid = (uuid or str(uuidlib.uuid4())).lower()
        plan.request["uuid"] = uuid
        ops.append({"kind": "mdev", "parent": offer.parents[0], "type": offer.type_id, "uuid": uuid,
                    "present": True})
        if vm:
            ops.append({"kind": "vm_mdev", "vm": vm, "uuid": uuid, "present": True})
    else:
        vf = offer.parents[0]
        plan.request["vf"] = vf
        ops.append({"kind": "vf_vgpu", "vf": vf, "type_id": int(offer.type_id), "name": offer.name})
        if vm:
            ops.append({"kind": "vm_hostdev", "vm": vm, "address": vf, "present": True, "managed": False})
    if vm and target is not None and target.state != "shut off":
        plan.notes.append(f"VM {vm} is {target.state}: it gets the vGPU at its next start")
    plan.rebuild = lambda: plan_vgpu_create(host, host.snapshot(), g.address, offer.type_id, vm,
                                            plan.request.get("uuid"))
    _add_steps(host, plan, ops)
    return plan


def _instances(snap: HostSnapshot) -> list[tuple[Gpu, VgpuInstance]]:
    return [(g, i) for g in snap.gpus for i in g.vgpu.instances]


def plan_vgpu_remove(host: ActionHost, snap: HostSnapshot, ident: str) -> Plan:
    """Plan removing a vGPU (an mdev UUID or a VF address) and taking it out of every VM config that
    holds it. Raises RequestError when there is no such vGPU."""
    text = (ident or "").strip()
    key: str | None = text.lower() if _UUID.match(text) else None
    if key is None:
        try:
            key = parse_pci_address(text)
        except ValueError:
            raise RequestError(f"{ident!r} is neither an mdev UUID nor a VF's PCI address") from None
    found = [(g, i) for g, i in _instances(snap) if i.uuid.lower() == key]
    if not found:
        listing = ", ".join(f"{i.uuid} ({i.type_name})" for _, i in _instances(snap)) or "none"
        raise RequestError(f"no vGPU {ident!r} on this host; its vGPUs: {listing}")
    g, inst = found[0]
    is_vf = inst.uuid == inst.parent
    plan = Plan(action="vgpu-remove", title=f"Remove vGPU {inst.type_name} {inst.uuid} from {_label(g)}",
                request={"vgpu": inst.uuid, "given": ident, "gpu": g.address},
                rebuild=lambda: plan_vgpu_remove(host, host.snapshot(), inst.uuid))
    plan.checks += vms_known_check(snap, f"vGPU {inst.uuid}")
    unreadable: dict[str, str] = {}
    holders = _vms_holding(host, snap, inst.uuid, is_vf, unreadable)
    plan.checks += unreadable_vm_check(unreadable)
    plan.checks += vms_change_checks(host, snap, holders)
    if not plan.ok:
        return plan
    running = [n for n in holders if (held := snap.vm(n)) is not None and held.state not in ("shut off", "crashed")]
    if running:
        plan.checks.append(Check("no running VM uses the vGPU", False,
                                 f"VM {', '.join(running)} is running with it",
                                 f"shut it down first ({'; '.join(host.command_hint('shutdown', n) for n in running)})"))
        return plan
    ops: list[Op] = []
    for name in holders:
        ops.append({"kind": "vm_hostdev", "vm": name, "address": inst.uuid, "present": False, "managed": False}
                   if is_vf else {"kind": "vm_mdev", "vm": name, "uuid": inst.uuid, "present": False})
    if holders:
        plan.confirm_text = inst.uuid
        plan.notes.append(f"VM {', '.join(holders)} loses the vGPU from its config")
    if is_vf:
        ops.append({"kind": "vf_vgpu", "vf": inst.uuid, "type_id": 0, "name": inst.type_name})
    else:
        ops.append({"kind": "mdev", "parent": inst.parent, "type": _mdev_type(host, inst.uuid) or "",
                    "uuid": inst.uuid, "present": False})
    _add_steps(host, plan, ops)
    return plan


def _vms_holding(host: ActionHost, snap: HostSnapshot, ident: str, is_vf: bool,
                 unreadable: dict[str, str]) -> list[str]:
    out = []
    cfg = host.vms
    for v in snap.vms:
        try:
            if cfg is not None:
                held = cfg.pci_hostdevs(v.name) if is_vf else cfg.mdev_hostdevs(v.name)
            else:
                held = {k for h in v.hostdevs if h.type == ("pci" if is_vf else "mdev")
                        and (k := h.address if is_vf else h.uuid)}
        except (VmConfigError, ValueError) as e:
            unreadable[v.name] = str(e) or type(e).__name__
            continue
        if ident in held:
            out.append(v.name)
    return sorted(out)


def _add_steps(host: ActionHost, plan: Plan, ops: list[Op]) -> None:
    for op in ops:
        try:
            step = build_step(host, op)
        except StepError as e:
            plan.checks.append(Check("step can be planned", False, str(e)))
            return
        if step is not None:
            if op["kind"] == "vm_hostdev" and op["present"] and not op.get("managed", True):
                step.why = (f"VM {op['vm']} gets the vGPU at its next start; managed='no' keeps the VF on "
                            "nvidia, which serves the vGPU")
            plan.steps.append(step)


# -- step kinds ---------------------------------------------------------------------------------------

def _mdev_type(host: ActionHost, uuid: str) -> str | None:
    return host.root.link_name(f"sys/bus/mdev/devices/{uuid}/mdev_type")


def _mdev_parent(host: ActionHost, uuid: str) -> str | None:
    """The PCI device an mdev lives on (its sysfs link points below the parent's directory)."""
    target = host.root.readlink(f"sys/bus/mdev/devices/{uuid}")
    parent = os.path.basename(os.path.dirname(target.rstrip("/"))) if target else ""
    return parent or None


@step_kind("mdev")
def mdev_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "mdev", "parent": PCI, "type": "nvidia-N", "uuid": U, "present": bool}`."""
    uuid, present, type_dir = op["uuid"].lower(), bool(op["present"]), op["type"]
    parent = parse_pci_address(op["parent"])
    if not _UUID.match(uuid) or (present and not _TYPE_DIR.match(type_dir or "")):
        raise StepError(f"bad mdev operation {op!r}")
    base = f"sys/bus/mdev/devices/{uuid}"
    exists = host.root.exists(base)
    if exists == present:
        return None
    inverse = {"kind": "mdev", "parent": parent, "type": _mdev_type(host, uuid) or type_dir, "uuid": uuid,
               "present": exists}
    create = f"sys/class/mdev_bus/{parent}/mdev_supported_types/{type_dir}/create"

    def apply() -> None:
        if present:
            host.kernel.write(create, uuid)
        else:
            host.kernel.write(f"{base}/remove", "1")

    def verify() -> str | None:
        if host.root.exists(base) != present:
            return f"mdev {uuid} {'was not created' if present else 'still exists'}"
        if present and _mdev_type(host, uuid) != type_dir:
            return f"mdev {uuid} has type {_mdev_type(host, uuid)}, expected {type_dir}"
        return None

    if present:
        return Step(f"Create vGPU mdev {uuid} ({type_dir}) on {parent}", "the VM is given this mediated device",
                    (f"echo {uuid} > /{create}",), dict(op, uuid=uuid), inverse, apply, verify)
    return Step(f"Remove vGPU mdev {uuid} from {parent}", "its framebuffer and scheduler slot go back to the GPU",
                (f"echo 1 > /{base}/remove",), dict(op, uuid=uuid), inverse, apply, verify)


def _vf_type(host: ActionHost, vf: str) -> int:
    text = host.root.read(f"sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type")
    return int(text) if text and text.strip().isdigit() else 0


@step_kind("vf_vgpu")
def vf_vgpu_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "vf_vgpu", "vf": PCI, "type_id": N (0: none), "name": TEXT}`: the VF's current vGPU type."""
    vf, want = parse_pci_address(op["vf"]), int(op["type_id"])
    rel = f"sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
    if not host.root.exists(rel):
        raise StepError(f"{vf} has no nvidia/current_vgpu_type (not a vGPU VF on the nvidia driver)")
    now = _vf_type(host, vf)
    if now == want:
        return None

    def apply() -> None:
        if want and _vf_type(host, vf):
            host.kernel.write(rel, "0")  # a VF holds one vGPU: clear it first
        host.kernel.write(rel, str(want))

    def verify() -> str | None:
        got = _vf_type(host, vf)
        return None if got == want else f"{vf} holds vGPU type {got}, expected {want}"

    name = op.get("name") or str(want)
    inverse = {"kind": "vf_vgpu", "vf": vf, "type_id": now, "name": name}
    if want:
        return Step(f"Create vGPU {name} on VF {vf}", "writing the type id creates the vGPU on this VF",
                    (f"echo {want} > /{rel}",), dict(op, vf=vf), inverse, apply, verify)
    return Step(f"Remove the vGPU from VF {vf}", "writing 0 gives its resources back to the GPU",
                (f"echo 0 > /{rel}",), dict(op, vf=vf), inverse, apply, verify)


@step_kind("vm_mdev")
def vm_mdev_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "vm_mdev", "vm": NAME, "uuid": U, "present": bool}`: the VM's persistent config has (or
    has not) an mdev <hostdev> for U."""
    vm, uuid, present = op["vm"], op["uuid"].lower(), bool(op["present"])
    cfg = host.vms
    if cfg is None:
        raise StepError("this host has no libvirt connection")

    def has() -> bool:
        try:
            return uuid in cfg.mdev_hostdevs(vm)
        except VmConfigError as e:
            raise StepError(str(e)) from None

    if has() == present:
        return None

    def apply() -> None:
        if present:  # the mdev's GPU and type, for a hypervisor that creates the mdev itself
            cfg.add_mdev(vm, uuid, parent=_mdev_parent(host, uuid), type_id=_mdev_type(host, uuid))
        else:
            cfg.remove_mdev(vm, uuid)

    def verify() -> str | None:
        return None if has() == present else \
            f"the config of VM {vm} {'still lacks' if present else 'still has'} mdev {uuid}"

    inverse = {"kind": "vm_mdev", "vm": vm, "uuid": uuid, "present": not present}
    xml = (f"<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'><source>"
           f"<address uuid='{uuid}'/></source></hostdev>")
    if present:
        return Step(f"Add vGPU {uuid} to VM {vm}'s config", f"VM {vm} gets the vGPU at its next start",
                    (host.command_hint("attach_mdev", vm, uuid=uuid),), dict(op, uuid=uuid), inverse,
                    apply, verify, detail=xml)
    return Step(f"Remove vGPU {uuid} from VM {vm}'s config", f"VM {vm} must not claim a vGPU that is gone",
                (host.command_hint("detach_mdev", vm, uuid=uuid),), dict(op, uuid=uuid), inverse,
                apply, verify)
