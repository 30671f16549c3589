"""Release: a GPU back to the host, as the inverse of its passthrough.

`plan_release` puts back what the passthroughs of the GPU still in effect changed (the audit log holds
each step's inverse: drivers, driver_override, driverctl or modprobe.d persistence, the hostdevs added
to a VM's config), each thing as it was before the oldest of them, and says what it leaves alone (a VM
config that named the GPU before, an override that is older). Without such a record (the GPU was passed
through by hand or by another tool) it plans from the host's state: out of every VM config that holds
the GPU, no persistence, the host's drivers; an unbound GPU goes to its host driver. A running VM that
holds the GPU in its persistent config only (it gets it at its next start) is taken out of that config;
a VM running with it is a refusal. It only plans: the runner applies.
"""
from __future__ import annotations

from typing import Any

from nodeconsole.actions.gpu_holders import INACTIVE, config_only, passthroughs_in_effect
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import (
    MODPROBE_FILE,
    driverctl_state,
    modprobe_ids,
    pci_state,
    read_raw,
    render_modprobe,
)
from nodeconsole.actions.plan import Check, Op, Plan, unreadable_vm_check, vms_known_check
from nodeconsole.actions.release_notes import kept_notes, loss_notes, removed_by_vm
from nodeconsole.actions.targets import (
    VFIO,
    add_steps,
    companions,
    gpu_label,
    group_members,
    pci_id,
    resolve_gpu,
    source_checks,
    vms_with,
)
from nodeconsole.actions.vm_guard import vms_change_checks
from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.model import Gpu, HostSnapshot

_RELEASE_KINDS = ("vm_hostdev", "driverctl", "file", "pci_driver", "sriov_numvfs", "sriov_autoprobe")


def _live_users(snap: HostSnapshot, members: list[str], cfg_only: dict[str, str]) -> list[str]:
    return [v.name for v in snap.vms if v.state not in INACTIVE and v.name not in cfg_only
            and any(h.type == "pci" and h.address in members for h in v.hostdevs)]


def plan_release(host: ActionHost, snap: HostSnapshot, gpu_text: str) -> Plan:
    """Plan giving the GPU back to the host: the inverse of its passthroughs in effect, else (none
    recorded) out of every VM config, no persistence, host drivers."""
    gpu = resolve_gpu(snap, gpu_text)
    plan = Plan(action="release", title=f"Give {gpu_label(gpu)} back to the host",
                request={"gpu": gpu.address, "given": gpu_text},
                rebuild=lambda: plan_release(host, host.snapshot(), gpu.address))
    plan.checks += source_checks(snap)
    plan.checks += vms_known_check(snap, f"GPU {gpu.address}")
    if not plan.ok:
        return plan
    members = group_members(snap, gpu)
    unreadable: dict[str, str] = {}
    in_configs = vms_with(host, snap, set(members), unreadable)
    cfg_only = config_only(host, snap, gpu.address, members, in_configs)
    running = _live_users(snap, members, cfg_only)
    if running:
        plan.checks.append(Check("no running VM uses the GPU", False, f"VM {', '.join(running)} is running with it",
                                 f"shut it down first ({'; '.join(host.command_hint('shutdown', n) for n in running)})"))
        return plan
    if cfg_only:
        plan.checks.append(Check("no running VM uses the GPU", True,
                                 f"VM {', '.join(sorted(cfg_only))} holds it in its config only"))
    plan.checks += unreadable_vm_check(unreadable)
    plan.checks += vms_change_checks(host, snap, in_configs)  # their configs lose the GPU: none locked
    if not plan.ok:
        return plan
    records = passthroughs_in_effect(host, gpu.address)
    if records:
        from nodeconsole.actions.nic import nic_release_keys

        ops = _inverse_ops(host, snap, gpu, members, records, in_configs, plan, nic_release_keys(records))
    else:
        ops = _host_state_ops(host, snap, gpu, members, in_configs, plan)
    if removed_by_vm(ops):
        plan.confirm_text = gpu.address
    plan.notes += loss_notes(gpu, members, ops, cfg_only)
    add_steps(host, plan, ops)
    return plan


def _op_key(op: Any, members: list[str]) -> tuple[str, ...] | None:
    """What an inverse operation of a passthrough record changes (None: not one release puts back)."""
    if not isinstance(op, dict) or op.get("kind") not in _RELEASE_KINDS:
        return None
    kind = op["kind"]
    if kind == "file":
        return (kind, MODPROBE_FILE) if op.get("path") == MODPROBE_FILE else None
    if kind == "vm_hostdev":
        ok = op.get("address") in members and not op.get("present") and isinstance(op.get("vm"), str)
        return (kind, op["vm"], op["address"]) if ok else None
    return (kind, op["device"]) if op.get("device") in members else None


def _inverse_ops(host: ActionHost, snap: HostSnapshot, gpu: Gpu, members: list[str],
                 records: list[AuditRecord], in_configs: dict[str, list[str]], plan: Plan,
                 nic: list[str] | None = None) -> list[Op]:
    """The inverse operations of `records` (newest first, in each record's undo order), one per thing
    changed: the state before the oldest record that changed it. `nic`: the NIC VF and PF a record gave
    the VM with the GPU (--with-nic), whose changes go back too. Notes what release leaves alone."""
    ids = ", ".join(r.id for r in records)
    what = f"passthrough {ids}"
    by_key: dict[tuple[str, ...], Op] = {}
    for r in reversed(records):
        for inverse in r.undo:
            key = _op_key(inverse, members + (nic or []))
            if key is not None:
                by_key[key] = dict(inverse)  # an older record's wins; the place stays the newest's
    defined = set(host.vms.names()) if host.vms is not None else set()
    ops: list[Op] = []
    for key, op in by_key.items():
        if key[0] == "vm_hostdev" and op["vm"] not in defined:
            plan.notes.append(f"VM {op['vm']} (given the GPU by {what}) is no longer defined: nothing to remove")
            continue
        if key[0] == "file":
            fixed = _modprobe_inverse(host, snap, members, records, op)
            if fixed is None:
                continue
            op = fixed
        ops.append(op)
    plan.notes.insert(0, f"release undoes what {what} did for this GPU; what was there before stays")
    plan.notes += kept_notes(host, gpu, in_configs, ops, what)
    bound = {op["device"] for op in ops if op["kind"] == "pci_driver"}
    for a in members:
        override, driver = pci_state(host.root, a)
        if a not in bound and VFIO in (driver, override):
            plan.notes.append(f"{a} stays on vfio-pci: it was there before {what}")
    pinned = {op["device"] for op in ops if op["kind"] == "driverctl"}
    for a in members:
        if a not in pinned and driverctl_state(host.root, a) is not None:
            plan.notes.append(f"the driverctl override of {a} is older than {what}: left alone "
                              f"(driverctl unset-override {a})")
    return ops


def _modprobe_inverse(host: ActionHost, snap: HostSnapshot, members: list[str], records: list[AuditRecord],
                      inverse: Op) -> Op | None:
    """The recorded content of the modprobe.d file when it is still what the newest passthrough wrote;
    after another change of it, only this GPU's devices and ids come out."""
    written = [op.get("content") for r in records for st in r.steps
               if isinstance(op := st.get("op"), dict) and op.get("kind") == "file" and op.get("path") == MODPROBE_FILE]
    if written and read_raw(host.root, MODPROBE_FILE) == written[-1]:
        return inverse
    return _modprobe_removal(host, snap, members)


def _modprobe_removal(host: ActionHost, snap: HostSnapshot, members: list[str]) -> Op | None:
    """The modprobe.d file without this GPU's devices and the ids only they needed (None: no change)."""
    current = read_raw(host.root, MODPROBE_FILE)
    if current is None:
        return None
    ids, deps, devices = modprobe_ids(current)
    rest = [d for d in devices if d not in members]
    mine = {pci_id(dev) for a in members if (dev := snap.pci(a))}
    still = {pci_id(dev) for d in rest if (dev := snap.pci(d))}
    keep = [i for i in ids if i not in mine or i in still]  # ids written by hand stay
    if keep == ids and rest == devices:
        return None
    return {"kind": "file", "path": MODPROBE_FILE, "content": render_modprobe(keep, deps, rest) if keep else None}


def _previous(host: ActionHost, address: str) -> tuple[str | None, str | None] | None:
    """(override, driver) the device had before its latest recorded passthrough, None when unknown."""
    try:
        records = host.audit.records()
    except OSError:  # an unreadable log (not root): the kernel's default driver will do
        return None
    for rec in reversed(records):
        for s in rec.steps:
            op, inv = s.get("op") or {}, s.get("inverse") or {}
            if op.get("kind") == "pci_driver" and op.get("device") == address and op.get("driver") == VFIO:
                return inv.get("override"), inv.get("driver")
    return None


def _place(host: ActionHost, vm: str, address: str) -> int:
    """The index of the address's hostdev among the VM's <hostdev> elements (-1 when unknown)."""
    try:
        place = host.vms.hostdev_place(vm, address) if host.vms is not None else None
    except Exception:  # an unreadable definition: the plan's own checks say so
        place = None
    return place[0] if place is not None else -1


def _host_state_ops(host: ActionHost, snap: HostSnapshot, gpu: Gpu, members: list[str],
                    in_configs: dict[str, list[str]], plan: Plan) -> list[Op]:
    """Release planned from the host's state (no passthrough of this GPU recorded): out of every VM
    config that holds it, no persistence, host drivers; an unbound GPU goes to its host driver."""
    ops: list[Op] = []
    for name, addrs in sorted(in_configs.items()):
        # last in the definition first: each removal's recorded place then holds when the undo puts them
        # back in the reverse order (the earlier ones are still out of it)
        places = {a: _place(host, name, a) for a in addrs}
        ops += [{"kind": "vm_hostdev", "vm": name, "address": a, "present": False, "managed": True}
                for a in sorted(addrs, key=lambda a: -places[a])]
    for a in members:
        if driverctl_state(host.root, a) is not None:
            ops.append({"kind": "driverctl", "device": a, "driver": None})
    modprobe = _modprobe_removal(host, snap, members)
    if modprobe is not None:
        ops.append(modprobe)
    card = set(companions(snap, gpu))
    unbound = []
    for a in members:
        override, driver = pci_state(host.root, a)
        if driver == VFIO or override == VFIO:
            prev = _previous(host, a)
            want_override, want_driver = prev if prev is not None else (None, "*")
            if want_override == VFIO:
                want_override = None
            ops.append({"kind": "pci_driver", "device": a, "override": want_override,
                        "driver": want_driver if want_driver not in (VFIO, None) else "*", "group": gpu.iommu_group})
        elif driver is None and a in card:
            unbound.append(a)
            ops.append({"kind": "pci_driver", "device": a, "override": None, "driver": "*", "group": gpu.iommu_group})
    if gpu.address in unbound:
        plan.notes.insert(0, f"{gpu_label(gpu)} has no driver: release binds it to its host driver (the one the "
                             "kernel picks for it, not vfio-pci)")
    return ops
