"""GPU passthrough to a VM; its inverse, release, is actions/release.py.

`plan_passthrough` binds every non-bridge member of the GPU's IOMMU group to vfio-pci, optionally makes
that survive a reboot (driverctl when the host has it, else a modprobe.d file) and optionally adds the
GPU and its companion functions to a VM's config; it warns when that VM's memory is below twice the VRAM
it would hold. The plan's request records the VM's state: a running VM gets the GPU in its config only,
at its next start, and release reads that back. It only plans: the runner applies. The step kinds it
uses live in actions/host_steps.py and actions/vm_hostdev.py. `resolve_gpu` / `resolve_vm` name the
closest known GPUs and VMs for a typo.
"""
from __future__ import annotations

import re

from nodeconsole.actions.gpu_holders import STUB_DRIVERS, config_only, driver_of, holder_checks
from nodeconsole.actions.gpu_names import with_gpu_name
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import (
    MODPROBE_FILE,
    driverctl_state,
    modprobe_ids,
    read_raw,
    render_modprobe,
)
from nodeconsole.actions.pin_planner import MEMORY_PER_VRAM, vram_of
from nodeconsole.actions.plan import (
    Check,
    Op,
    Plan,
    RequestError,
    vms_known_check,
)
from nodeconsole.actions.targets import (
    VFIO,
    add_steps,
    companions,
    gpu_label,
    group_members,
    pci_id,
    resolve_gpu,
    resolve_vm,
    source_checks,
    vms_with,
)
from nodeconsole.actions.vm_guard import vm_change_checks
from nodeconsole.console.iommu import blocker_reasons
from nodeconsole.console.model import Gpu, HostSnapshot, Vm


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
                     persist: bool = False, with_nic: bool = False, allow_far_nic: bool = False) -> Plan:
    """Plan giving the GPU to vfio-pci (and to `vm`'s config; across reboots with `persist`; with
    `with_nic`, the free NIC VF closest to the GPU too, actions/nic.py). Raises RequestError for an
    unknown GPU or VM."""
    gpu = resolve_gpu(snap, gpu_text)
    if (with_nic or allow_far_nic) and vm is None:
        raise RequestError("--with-nic gives the NIC VF to a VM: name it with --vm VM")
    if allow_far_nic and not with_nic:
        raise RequestError("--allow-far-nic goes with --with-nic")
    target = resolve_vm(snap, vm) if vm is not None else None
    title = f"Pass {gpu_label(gpu)} through" + (f" to VM {vm}" if vm else " (vfio-pci)") + \
            (" with a NIC VF beside it" if with_nic else "") + (", persistent across reboot" if persist else "")
    request = with_gpu_name({"gpu": gpu.address, "given": gpu_text, "vm": vm, "persist": persist}, gpu)
    if with_nic:
        request["with_nic"] = True
    if target is not None:  # a running VM gets the GPU in its config only: release reads this back
        request["vm_state"] = target.state
    plan = Plan(action="passthrough", title=title, request=request,
                rebuild=lambda: plan_passthrough(host, host.snapshot(), gpu.address, vm, persist, with_nic,
                                                 allow_far_nic))
    if target is not None:  # a locked VM or a template: refused before anything else
        plan.checks += vm_change_checks(host, target, gives_device=True)
        if not plan.ok:
            return plan
    members, in_configs, mig_ops = _passthrough_checks(host, snap, gpu, vm, plan)
    if not plan.ok:
        return plan
    ops: list[Op] = list(mig_ops)
    to_bind = [a for a in members if driver_of(snap, a) not in STUB_DRIVERS]
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
        note = memory_note(host, snap, target, gpu)
        if note:
            plan.notes.append(note)
    if with_nic and vm is not None:
        from nodeconsole.actions.nic import nic_for_gpu

        loading = any(op["kind"] == "module" for op in ops)
        ops += [op for op in nic_for_gpu(host, snap, gpu, vm, allow_far_nic, plan)
                if not (loading and op["kind"] == "module")]
        if not plan.ok:
            return plan
    _other_configs_note(plan, gpu, vm, in_configs)
    add_steps(host, plan, ops)
    return plan


def _passthrough_checks(host: ActionHost, snap: HostSnapshot, gpu: Gpu, vm: str | None,
                        plan: Plan) -> tuple[list[str], dict[str, list[str]], list[Op]]:
    """Passthrough's checks, added to `plan` (the IOMMU and the GPU's group, who holds its members, MIG,
    libvirt); the group's members, the VM definitions holding any of them, and the operations that turn
    MIG off first. Stops at the first failing part (the plan is then not ok)."""
    plan.checks += source_checks(snap)
    plan.checks.append(_iommu_check(snap, gpu))
    if not plan.ok:
        return [], {}, []
    members = group_members(snap, gpu)
    plan.checks.append(_group_check(snap, gpu, members))
    in_configs = vms_with(host, snap, set(members))
    plan.checks += holder_checks(host, snap, gpu, members,
                                 config_only(host, snap, gpu.address, members, in_configs))
    from nodeconsole.actions.passthrough_mig import mig_off_first

    mig_ops = mig_off_first(host, snap, gpu, plan)  # MIG mode on: off first, or who holds its instances
    if vm is not None or gpu.vgpu.instances:  # a VM is named, or VMs may hold its vGPUs
        plan.checks += vms_known_check(snap, f"GPU {gpu.address}")
    if vm is not None and host.vms is None:
        plan.checks.append(Check("libvirt reachable", False, "this host has no libvirt connection",
                                 "pass --libvirt URI"))
    return members, in_configs, mig_ops


def passthrough_checks(host: ActionHost, snap: HostSnapshot, gpu: Gpu, vm: str | None, plan: Plan) -> list[str]:
    """Passthrough's checks for `gpu` going to `vm` (the IOMMU, its group, who holds its members, MIG,
    the VMs), added to `plan`; the group's members that go to vfio-pci with it. MIG mode on is refused
    here (`passthrough` alone turns it off first)."""
    members, _configs, mig_ops = _passthrough_checks(host, snap, gpu, vm, plan)
    if mig_ops:
        plan.checks.append(Check(f"GPU {gpu.index} has MIG mode off", False, "MIG mode is on",
                                 f"turn it off first (nodeconsole mig {gpu.address} --off --apply), then plan again"))
    return members


def _other_configs_note(plan: Plan, gpu: Gpu, vm: str | None, in_configs: dict[str, list[str]]) -> None:
    """What the other VM definitions holding the GPU mean; with a VM named, the admin types the GPU's
    address to confirm (two VM definitions with one GPU)."""
    others = sorted(n for n in in_configs if n != vm)
    if others and vm is not None:
        # two VM configs with one GPU: the admin types the address to show this is meant
        plan.notes.append(f"the config of VM {', '.join(others)} also holds this GPU: only one VM "
                          "with it can run at a time")
        plan.confirm_text = gpu.address
    elif others:
        plan.notes.append(f"VM {', '.join(others)} has this GPU in its config and can start with it "
                          "once it is on vfio-pci")


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
        new_ids.add(pci_id(dev))
        if dev.driver and dev.driver not in STUB_DRIVERS and re.match(r"^[a-z0-9_]+$", dev.driver):
            new_deps.add(dev.driver)
    content = render_modprobe(sorted(new_ids), sorted(new_deps), sorted(set(devices) | set(members)))
    twins = sorted(d.address for d in snap.pci_devices if pci_id(d) in new_ids
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


# -- VM memory --------------------------------------------------------------------------------------

def memory_note(host: ActionHost, snap: HostSnapshot, vm: Vm, gpu: Gpu) -> str | None:
    """A warning when the VM's memory is below MEMORY_PER_VRAM × the VRAM of every whole GPU it would
    hold (its live and persistent hostdevs, and `gpu`); None when enough or a size is unknown."""
    addrs = {h.address for h in vm.hostdevs if h.type == "pci" and h.address}
    if host.vms is not None:
        try:
            addrs |= host.vms.pci_hostdevs(vm.name)
        except Exception:  # an unreadable definition: the live one has to do
            pass
    gpus = sorted({a for a in addrs if snap.gpu(a) is not None} | {gpu.address})
    sizes = [vram_of(snap, a) for a in gpus]
    if not vm.memory_kib or any(v is None for v in sizes):
        return None
    vram_kib = sum(v or 0 for v in sizes) * 1024
    want = MEMORY_PER_VRAM * vram_kib
    if vm.memory_kib >= want:
        return None
    held = "the GPU" if len(gpus) == 1 else f"its {len(gpus)} GPUs"
    want_gib = -(-want // 1048576)  # rounded up: the size to give it
    return (f"warning: VM {vm.name} has {_gib(vm.memory_kib)} of memory, below {MEMORY_PER_VRAM}× the "
            f"{_gib(vram_kib)} VRAM of {held} ({want_gib} GiB; 2–3× is recommended): data loading may starve "
            f"the GPU. To give it more: {host.command_hint('setmem', vm.name, size=f'{want_gib}G')}")


def _gib(kib: int) -> str:
    return f"{kib / 1048576:.0f} GiB"


def plan_release(host: ActionHost, snap: HostSnapshot, gpu_text: str) -> Plan:
    """Plan giving the GPU back to the host: actions/release.py's `plan_release` (its inverse), kept
    here beside the passthrough, where callers have always found it."""
    from nodeconsole.actions.release import plan_release as plan

    return plan(host, snap, gpu_text)
