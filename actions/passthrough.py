"""GPU passthrough to a VM, and its reverse (release).

`plan_passthrough` binds every non-bridge member of the GPU's IOMMU group to vfio-pci, optionally makes
that survive a reboot (driverctl when the host has it, else a modprobe.d file) and optionally adds the
GPU and its companion functions to a VM's config. `plan_release` gives everything back. Both only plan:
the runner applies. The step kinds they use live in actions/host_steps.py and actions/libvirt_edit.py.
"""
from __future__ import annotations

import re

from nodeconsole.actions.gpu_holders import STUB_DRIVERS, driver_of, holder_checks
from nodeconsole.actions.host_steps import (
    MODPROBE_FILE,
    driverctl_state,
    modprobe_ids,
    pci_state,
    read_raw,
    render_modprobe,
)
from nodeconsole.actions.plan import (
    Check,
    Op,
    Plan,
    RequestError,
    Step,
    build_step,
    unreadable_vm_check,
    vms_known_check,
)
from nodeconsole.actions.runner import ActionHost
from nodeconsole.console.iommu import EXEMPT_DRIVERS, blocker_reasons, slot_of
from nodeconsole.console.model import Gpu, HostSnapshot, PciDevice
from nodeconsole.console.pciaddr import parse_pci_address

VFIO = "vfio-pci"
_INDEX_RE = re.compile(r"^[0-9]+$")  # ASCII digits only (\d takes "٤")
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F-]{8,}$")


def resolve_gpu(snap: HostSnapshot, text: str) -> Gpu:
    """The GPU named by a console index ("3"), a PCI address or an NVML UUID ("GPU-..."). Raises
    RequestError saying what is wrong and what is accepted."""
    t = (text or "").strip()
    listing = ", ".join(f"{g.index} ({g.address})" for g in snap.gpus) or "none"
    if _INDEX_RE.match(t):
        for g in snap.gpus:
            if g.index == int(t):
                return g
        raise RequestError(f"no GPU with index {t}; this host's GPUs: {listing}")
    if _UUID_RE.match(t):
        for g in snap.gpus:
            if g.uuid and g.uuid.lower() == t.lower():
                return g
        raise RequestError(f"no GPU with UUID {t} (NVML does not see GPUs on vfio-pci: use the PCI "
                           f"address); this host's GPUs: {listing}")
    try:
        address = parse_pci_address(t)
    except ValueError:
        raise RequestError(f"{text!r} is not a GPU: give a console index, a PCI address "
                           f"(DDDD:BB:DD.F) or a UUID (GPU-...); this host's GPUs: {listing}") from None
    gpu = snap.gpu(address)
    if gpu is not None:
        return gpu
    dev = snap.pci(address)
    if dev is not None:
        raise RequestError(f"{address} is not an NVIDIA GPU ({dev.class_name or f'class {dev.class_id:06x}'} "
                           f"{dev.device_name}); this host's GPUs: {listing}")
    raise RequestError(f"no PCI device {address} on this host; its GPUs: {listing}")


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


def _pci_id(dev: PciDevice) -> str:
    return f"{dev.vendor_id:04x}:{dev.device_id:04x}"


def _label(gpu: Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.address}, {gpu.name})"


def _source_checks(snap: HostSnapshot) -> list[Check]:
    if snap.sources.sysfs != "ok":
        return [Check("host readable", False, f"sysfs {snap.sources.sysfs}",
                      "run on the host itself (or --demo)")]
    return []


def _vms_with(host: ActionHost, snap: HostSnapshot, addresses: set[str],
              unreadable: dict[str, str] | None = None) -> dict[str, list[str]]:
    """VM name → which of `addresses` its persistent config holds as PCI hostdevs. A VM whose config
    cannot be read goes into `unreadable` (name → why), never silently out of the plan."""
    out: dict[str, list[str]] = {}
    cfg = host.domains
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


def _iommu_check(snap: HostSnapshot, gpu: Gpu) -> Check:
    if not snap.iommu.enabled:
        fix = snap.iommu.how_to_enable or ("add intel_iommu=on iommu=pt (Intel) or amd_iommu=on iommu=pt "
                                           "(AMD) to the kernel command line and reboot")
        return Check("IOMMU is on", False, "no IOMMU is active, so no device can be given to a VM",
                     fix + " Then plan the passthrough again.")
    if gpu.iommu_group is None:
        return Check("IOMMU is on", False, f"{gpu.address} has no IOMMU group",
                     "check the firmware's IOMMU settings for this slot")
    flags = " ".join(snap.iommu.cmdline_flags)
    return Check("IOMMU is on", True, f"group {gpu.iommu_group}" + (f" ({flags})" if flags else ""))


def _group_check(snap: HostSnapshot, gpu: Gpu, members: list[str]) -> Check:
    by_addr = {d.address: d for d in snap.pci_devices}
    listing = ", ".join(f"{a} ({driver_of(snap, a) or 'no driver'})" for a in members)
    title = f"IOMMU group {gpu.iommu_group} can be handed over"
    grp = snap.group(gpu.iommu_group)
    blockers = blocker_reasons(grp if grp is not None else members, by_addr, [gpu.address])
    vga = [a for a in members if (dev := snap.pci(a)) is not None and dev.boot_vga]
    if vga:
        blockers.append(f"{', '.join(vga)} is the boot VGA device (the host console draws on it)")
    if blockers:
        return Check(title, False, f"members {listing}; " + "; ".join(blockers),
                     "move the card to a slot with its own IOMMU group (or one without host devices)")
    return Check(title, True, f"members {listing}")


def plan_passthrough(host: ActionHost, snap: HostSnapshot, gpu_text: str, vm: str | None = None,
                     persist: bool = False) -> Plan:
    """Plan giving the GPU to vfio-pci (and to `vm`'s config; across reboots with `persist`).
    Raises RequestError for an unknown GPU or VM."""
    gpu = resolve_gpu(snap, gpu_text)
    target = snap.vm(vm) if vm is not None else None
    if vm is not None and target is None:
        known = sorted(v.name for v in snap.vms)
        why = f"libvirt {snap.sources.libvirt}" if snap.sources.libvirt != "ok" else \
            f"known VMs: {', '.join(known) or 'none'}"
        raise RequestError(f"no VM named {vm!r} ({why})")
    title = f"Pass {_label(gpu)} through" + (f" to VM {vm}" if vm else " (vfio-pci)") + \
            (", persistent across reboot" if persist else "")
    plan = Plan(action="passthrough", title=title,
                request={"gpu": gpu.address, "given": gpu_text, "vm": vm, "persist": persist},
                rebuild=lambda: plan_passthrough(host, host.snapshot(), gpu.address, vm, persist))
    plan.checks += _source_checks(snap)
    plan.checks.append(_iommu_check(snap, gpu))
    if not plan.ok:
        return plan
    members = group_members(snap, gpu)
    plan.checks.append(_group_check(snap, gpu, members))
    plan.checks += holder_checks(host, snap, gpu, members)
    if vm is not None or gpu.vgpu.instances:  # a VM is named, or VMs may hold its vGPUs
        plan.checks += vms_known_check(snap, f"GPU {gpu.address}")
    if vm is not None and host.domains is None:
        plan.checks.append(Check("libvirt reachable", False, "this host has no libvirt connection",
                                 "pass --libvirt URI"))
    if not plan.ok:
        return plan
    to_bind = [a for a in members if driver_of(snap, a) not in STUB_DRIVERS]
    ops: list[Op] = []
    if to_bind and not host.root.exists(f"sys/bus/pci/drivers/{VFIO}"):
        ops.append({"kind": "module", "name": VFIO})
    # the last member to bind completes the group: then /dev/vfio/GROUP must exist
    ops += [{"kind": "pci_driver", "device": a, "override": VFIO, "driver": VFIO, "group": gpu.iommu_group,
             "vfio_node": a == to_bind[-1]} for a in to_bind]
    if persist:
        ops += _persist_ops(host, snap, gpu, members, plan)
    if target is not None:
        ops += [{"kind": "vm_hostdev", "vm": vm, "address": a, "present": True, "managed": True}
                for a in companions(snap, gpu)]
        if target.state not in ("shut off",):
            plan.notes.append(f"VM {vm} is {target.state}: it gets the GPU at its next start")
    others = sorted(n for n in _vms_with(host, snap, set(members)) if n != vm)
    if others and vm is not None:
        # two VM configs with one GPU: the admin types the address to show this is meant
        plan.notes.append(f"the config of VM {', '.join(others)} also holds this GPU: only one VM "
                          "with it can run at a time")
        plan.confirm_text = gpu.address
    elif others:
        plan.notes.append(f"VM {', '.join(others)} has this GPU in its config and can start with it "
                          "once it is on vfio-pci")
    _add_steps(host, plan, ops)
    return plan


def _persist_ops(host: ActionHost, snap: HostSnapshot, gpu: Gpu, members: list[str], plan: Plan) -> list[Op]:
    if host.commands.which("driverctl"):
        return [{"kind": "driverctl", "device": a, "driver": VFIO} for a in members
                if driverctl_state(host.root, a) != VFIO]
    current = read_raw(host.root, MODPROBE_FILE)
    ids, softdeps, devices = modprobe_ids(current)
    new_ids = set(ids)
    new_deps = set(softdeps) | {"nvidia"}
    for a in members:
        dev = snap.pci(a)
        assert dev is not None, "IOMMU group members are PCI devices of the snapshot"
        new_ids.add(_pci_id(dev))
        if dev.driver and dev.driver not in STUB_DRIVERS and re.match(r"^[a-z0-9_]+$", dev.driver):
            new_deps.add(dev.driver)
    content = render_modprobe(sorted(new_ids), sorted(new_deps), sorted(set(devices) | set(members)))
    twins = sorted(d.address for d in snap.pci_devices if _pci_id(d) in new_ids
                   and d.address not in members and d.driver not in STUB_DRIVERS)
    if twins:
        # ids= matches by model: at the next boot vfio-pci would take every other card of this
        # model from the host (GPUs running jobs, MIG, vGPU). Refuse instead of warning.
        shown = ", ".join(twins[:6]) + (f" and {len(twins) - 6} more" if len(twins) > 6 else "")
        plan.checks.append(Check(
            "persistence can be limited to this GPU", False,
            f"without driverctl, persistence is a modprobe.d ids= line that matches by model: at boot "
            f"vfio-pci would also take {shown}",
            "install driverctl (apt-get install driverctl) to persist single devices, or pass through "
            "without --persist"))
        return []
    plan.notes.append("if vfio-pci loads from the initramfs, regenerate it (update-initramfs -u, or "
                      "dracut -f) so early boot sees the modprobe.d file")
    return [{"kind": "file", "path": MODPROBE_FILE, "content": content}] if content != current else []


def _add_steps(host: ActionHost, plan: Plan, ops: list[Op]) -> None:
    for op in ops:
        step: Step | None = build_step(host, op)
        if step is not None:
            plan.steps.append(step)


# -- release ------------------------------------------------------------------------------------------

def _previous(host: ActionHost, address: str) -> tuple[str | None, str | None] | None:
    """(override, driver) the device had before its latest recorded passthrough, None when unknown."""
    try:
        records = host.audit.records()
    except OSError:  # an unreadable log (not root): the kernel's default driver will do
        return None
    for rec in reversed(records):
        for s in rec.get("steps", []):
            op, inv = s.get("op") or {}, s.get("inverse") or {}
            if op.get("kind") == "pci_driver" and op.get("device") == address and op.get("driver") == VFIO:
                return inv.get("override"), inv.get("driver")
    return None


def plan_release(host: ActionHost, snap: HostSnapshot, gpu_text: str) -> Plan:
    """Plan giving the GPU back to the host: out of every VM config, no persistence, host drivers."""
    gpu = resolve_gpu(snap, gpu_text)
    plan = Plan(action="release", title=f"Give {_label(gpu)} back to the host",
                request={"gpu": gpu.address, "given": gpu_text},
                rebuild=lambda: plan_release(host, host.snapshot(), gpu.address))
    plan.checks += _source_checks(snap)
    plan.checks += vms_known_check(snap, f"GPU {gpu.address}")
    if not plan.ok:
        return plan
    members = group_members(snap, gpu)
    running = [v.name for v in snap.vms if v.state not in ("shut off", "crashed")
               and any(h.type == "pci" and h.address in members for h in v.hostdevs)]
    if running:
        plan.checks.append(Check("no running VM uses the GPU", False, f"VM {', '.join(running)} is running with it",
                                 "shut it down first (virsh shutdown NAME)"))
        return plan
    ops: list[Op] = []
    unreadable: dict[str, str] = {}
    in_configs = _vms_with(host, snap, set(members), unreadable)
    plan.checks += unreadable_vm_check(unreadable)
    if not plan.ok:
        return plan
    for name, addrs in sorted(in_configs.items()):
        ops += [{"kind": "vm_hostdev", "vm": name, "address": a, "present": False, "managed": True} for a in addrs]
    if in_configs:
        plan.confirm_text = gpu.address
        plan.notes.append(f"VM {', '.join(sorted(in_configs))} loses the GPU from its config")
    for a in members:
        if driverctl_state(host.root, a) is not None:
            ops.append({"kind": "driverctl", "device": a, "driver": None})
    current = read_raw(host.root, MODPROBE_FILE)
    if current is not None:
        ids, deps, devices = modprobe_ids(current)
        rest = [d for d in devices if d not in members]
        mine = {_pci_id(dev) for a in members if (dev := snap.pci(a))}
        still = {_pci_id(dev) for d in rest if (dev := snap.pci(d))}
        keep = [i for i in ids if i not in mine or i in still]  # ids written by hand stay
        if keep != ids or rest != devices:
            ops.append({"kind": "file", "path": MODPROBE_FILE,
                        "content": render_modprobe(keep, deps, rest) if keep else None})
    for a in members:
        override, driver = pci_state(host.root, a)
        if driver == VFIO or override == VFIO:
            prev = _previous(host, a)
            want_override, want_driver = prev if prev is not None else (None, "*")
            if want_override == VFIO:
                want_override = None
            ops.append({"kind": "pci_driver", "device": a, "override": want_override,
                        "driver": want_driver if want_driver != VFIO else "*", "group": gpu.iommu_group})
    _add_steps(host, plan, ops)
    return plan
