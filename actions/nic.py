"""NIC VFs for VMs: how many VFs a NIC has (`nic vfs`), one VF given to a VM (`nic passthrough`), and the
VF that goes with a GPU (`passthrough GPU --vm VM --with-nic`). The plans use the SR-IOV step kinds of
actions/nic_steps.py (`sriov_autoprobe`, `sriov_numvfs`), host_steps.py's `pci_driver` and vm_hostdev.py's
`vm_hostdev`.

Persistence (`nic vfs --persist`) is a udev rule, /etc/udev/rules.d/70-nodeconsole-sriov.rules: on the
PF's driver `bind` event it sets sriov_drivers_autoprobe, then sriov_numvfs. A rule rather than a systemd
unit because it runs whenever the PF's driver binds (at boot, and after a driver reload), not once.
"""
from __future__ import annotations

import re

from nodeconsole.actions.acs_path import acs_note
from nodeconsole.actions.gpu_holders import STUB_DRIVERS
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import read_raw
from nodeconsole.actions.nic_steps import vf_address, who
from nodeconsole.actions.plan import (
    Check,
    Op,
    Plan,
    RequestError,
    unreadable_vm_check,
    vms_known_check,
)
from nodeconsole.actions.targets import VFIO, add_steps, resolve_vm, source_checks, vms_with
from nodeconsole.actions.vm_guard import vm_change_checks
from nodeconsole.console.argtypes import did_you_mean
from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import Gpu, HostSnapshot, Nic, NicVf
from nodeconsole.console.nics import (
    distance_rank,
    distance_to,
    group_blockers,
    nic_of,
    vf_preference,
    vm_gpu_addresses,
    vm_nic_functions,
)
from nodeconsole.console.pciaddr import parse_pci_address

UDEV_FILE = "etc/udev/rules.d/70-nodeconsole-sriov.rules"
_RULE_PF = re.compile(r'KERNEL=="([0-9a-fA-F:.]+)"')
_DEV = "sys/bus/pci/devices"
NEAR = ("PIX", "PXB", "PHB", "NODE")  # what --with-nic takes without --allow-far-nic


# -- resolving a NIC or a VF ------------------------------------------------------------------------

def _nic_listing(snap: HostSnapshot) -> str:
    return ", ".join(f"{n.label} {n.address}" for n in snap.nics) or "none"


def resolve_nic_function(snap: HostSnapshot, text: str) -> tuple[Nic, NicVf | None]:
    """The NIC (and VF) a PCI address names. RequestError for anything else."""
    try:
        address = parse_pci_address(text or "")
    except ValueError:
        raise RequestError(f"{visible(repr(text))} is not a PCI address (DDDD:BB:DD.F); this host's NICs: "
                           f"{_nic_listing(snap)}") from None
    found = nic_of(snap, address)
    if found is not None:
        return found
    dev = snap.pci(address)
    known = [n.address for n in snap.nics] + [v.address for n in snap.nics for v in n.vfs]
    if dev is None:
        raise RequestError(f"no PCI device {address} on this host{did_you_mean(address, known)}; its NICs: "
                           f"{_nic_listing(snap)}")
    raise RequestError(f"{address} is not a network controller ({dev.class_name or f'class {dev.class_id:06x}'} "
                       f"{dev.device_name}); this host's NICs: {_nic_listing(snap)}")


def resolve_pf(snap: HostSnapshot, text: str) -> Nic:
    nic, vf = resolve_nic_function(snap, text)
    if vf is not None:
        raise RequestError(f"{vf.address} is VF {vf.index} of {nic.label} {nic.address}: give the physical function")
    if not nic.sriov_totalvfs:
        raise RequestError(f"{nic.label} {nic.address} ({nic.name}) does not support SR-IOV (no sriov_totalvfs)")
    return nic



# -- nic vfs ------------------------------------------------------------------------------------------

def udev_rule(pf: str, count: int, autoprobe: int) -> str:
    return (f'ACTION=="bind", SUBSYSTEM=="pci", KERNEL=="{pf}", ATTR{{sriov_drivers_autoprobe}}="{autoprobe}", '
            f'ATTR{{sriov_numvfs}}="{count}"')


def render_udev(current: str | None, pf: str, count: int, autoprobe: int) -> str | None:
    """The rules file with the PF's rule replaced (count 0: removed); None when no rule is left."""
    rules = [ln for ln in (current or "").splitlines()
             if ln.strip() and not ln.lstrip().startswith("#") and not ((m := _RULE_PF.search(ln)) and m.group(1) == pf)]
    if count:
        rules.append(udev_rule(pf, count, autoprobe))
    if not rules:
        return None
    head = ["# Written by nodeconsole (nic vfs --persist): the SR-IOV VFs each PF gets when its driver binds",
            "# (at boot, and after a driver reload). `nodeconsole log` shows who changed it."]
    return "\n".join(head + sorted(rules, key=_rule_key)) + "\n"


def _rule_key(line: str) -> str:
    m = _RULE_PF.search(line)
    return m.group(1) if m else line


def plan_nic_vfs(host: ActionHost, snap: HostSnapshot, pf_text: str, count: int, persist: bool = False,
                 host_driver: bool = False) -> Plan:
    """Plan giving the PF `count` VFs (0 removes them), kept free of host drivers unless `host_driver`,
    persisted by a udev rule with `persist`. RequestError for a bad PF or count."""
    nic = resolve_pf(snap, pf_text)
    pf = nic.address
    total = nic.sriov_totalvfs or 0
    if count < 0 or count > total:
        raise RequestError(f"{nic.label} {pf} supports at most {total} VFs (sriov_totalvfs), not {count}")
    current = nic.sriov_numvfs or 0
    title = f"Give {nic.label} {pf} ({nic.name}) {count} VF(s)" + (", persistent across reboot" if persist else "")
    plan = Plan(action="nic vfs", title=title,
                request={"pf": pf, "given": pf_text, "count": count, "persist": persist, "host_driver": host_driver},
                rebuild=lambda: plan_nic_vfs(host, host.snapshot(), pf, count, persist, host_driver))
    going = _vfs_checks(host, snap, plan, nic, count)
    if not plan.ok:
        return plan
    ops: list[Op] = []
    autoprobe = 1 if nic.sriov_drivers_autoprobe in (True, None) else 0
    if count and not host_driver and autoprobe:
        ops.append({"kind": "sriov_autoprobe", "device": pf, "value": 0})
        autoprobe = 0
        plan.notes.append("the new VFs stay without a driver (sriov_drivers_autoprobe=0): they are meant for VMs, and "
                          "passthrough (or libvirt's managed='yes') binds each to vfio-pci; pass --host-driver to "
                          "let the host's driver take them")
    keep = {v.address: [v.driver_override, v.driver] for v in nic.vfs if v.index < count} if going and count else {}
    op: Op = {"kind": "sriov_numvfs", "device": pf, "count": count}
    if keep:
        op["vfs"] = keep
        plan.notes.append(f"VF(s) {', '.join(keep)} come back at the same address(es), on the driver each has now")
    ops.append(op)
    lost = [v for v in nic.vfs if v.index >= count] if current != count else []
    for v in lost:
        if v.rdma or v.netdevs:
            plan.notes.append(f"VF {v.address} goes away with its host RDMA device {', '.join(v.rdma) or '-'} and "
                              f"netdev {', '.join(v.netdevs) or '-'}")
    ops += _persistence(host, plan, pf, count, current, autoprobe, persist)
    add_steps(host, plan, ops)
    return plan


def _vfs_checks(host: ActionHost, snap: HostSnapshot, plan: Plan, nic: Nic, count: int) -> list[str]:
    """`nic vfs`'s checks, added to `plan` (the PF's driver, no VM holding a VF that goes away); the VFs
    that go away (a change of a nonzero count removes them all)."""
    pf = nic.address
    current = nic.sriov_numvfs or 0
    plan.checks += source_checks(snap)
    if current != count and current:
        plan.checks += vms_known_check(snap, f"the VFs of {pf}")
    if not plan.ok:
        return []
    if not nic.driver:
        plan.checks.append(Check(f"{pf} has a driver", False, "SR-IOV is enabled through the PF's driver, and it has none",
                                 f"bind it to its driver first (echo {pf} > /sys/bus/pci/drivers_probe)"))
        return []
    going = [v.address for v in nic.vfs] if current != count and current else []
    unreadable: dict[str, str] = {}
    held = vms_with(host, snap, set(going), unreadable)
    if held:
        plan.checks.append(Check(
            "no VM holds a VF that goes away", False,
            f"{who(held)}: changing the count removes every VF of {pf} (Linux takes a new count only from 0)",
            "take the VFs out of those VMs first (`nodeconsole undo` of the change that gave them, or "
            + "; ".join(host.command_hint("detach", n) for n in sorted(held)) + "), then plan again"))
        return []
    plan.checks += unreadable_vm_check(unreadable)
    if going:
        plan.checks.append(Check("no VM holds a VF that goes away", True,
                                 f"none of the {len(going)} VF(s) of {pf} is in a VM's definition"))
    return going


def _persistence(host: ActionHost, plan: Plan, pf: str, count: int, current: int, autoprobe: int,
                 persist: bool) -> list[Op]:
    """With `persist`, the udev rules file with the PF's rule; without it, a note saying what a reboot
    brings back (the rule still there, or the boot configuration)."""
    ops: list[Op] = []
    if persist:
        current_rules = read_raw(host.root, UDEV_FILE)
        content = render_udev(current_rules, pf, count, autoprobe)
        if content != current_rules:
            ops.append({"kind": "file", "path": UDEV_FILE, "content": content,
                        "why": "the VFs come back at every boot: a udev rule sets sriov_drivers_autoprobe, then "
                               "sriov_numvfs, when the PF's driver binds"})
        plan.notes.append(f"persistence: the udev rule /{UDEV_FILE} (on the PF's driver bind event, so it also holds "
                          "after a driver reload; a systemd unit would run once at boot); undo puts back what the "
                          "file held")
    elif count != current:
        rule = next((ln for ln in (read_raw(host.root, UDEV_FILE) or "").splitlines()
                     if (m := _RULE_PF.search(ln)) and m.group(1) == pf), None)
        if rule is not None:
            plan.notes.append(f"not persistent: the udev rule in /{UDEV_FILE} still sets this PF's VFs at boot "
                              "(--persist changes it)")
        else:
            plan.notes.append("not persistent: after a reboot the PF has the VFs its boot configuration gives it "
                              "(--persist writes a udev rule)")
    return ops


# -- nic passthrough ----------------------------------------------------------------------------------

def _iommu_checks(snap: HostSnapshot, address: str) -> list[Check]:
    dev = snap.pci(address)
    if not snap.iommu.enabled or dev is None or dev.iommu_group is None:
        return [Check("IOMMU is on", False, f"{address} has no IOMMU group" if snap.iommu.enabled else
                      "no IOMMU is active, so no device can be given to a VM",
                      snap.iommu.how_to_enable or "check the firmware's IOMMU settings")]
    blockers = group_blockers(snap, address)
    title = f"IOMMU group {dev.iommu_group} of {address} can be handed over"
    if blockers:
        return [Check(title, False, "; ".join(blockers),
                      "use a VF of a NIC under a port with ACS (its VFs get IOMMU groups of their own)")]
    return [Check(title, True, f"{address} is alone in it")]


def _vf_ops(snap: HostSnapshot, host: ActionHost, address: str, vm: str) -> list[Op]:
    """Bind the VF to vfio-pci (loading it first if needed) and add it to the VM's definition."""
    ops: list[Op] = []
    dev = snap.pci(address)
    if dev is not None and dev.driver not in STUB_DRIVERS:
        if not host.root.exists(f"sys/bus/pci/drivers/{VFIO}"):
            ops.append({"kind": "module", "name": VFIO})
        ops.append({"kind": "pci_driver", "device": address, "override": VFIO, "driver": VFIO,
                    "group": dev.iommu_group, "vfio_node": True})
    ops.append({"kind": "vm_hostdev", "vm": vm, "address": address, "present": True, "managed": True})
    return ops


def _host_use_note(vf: NicVf) -> str | None:
    if vf.driver and vf.driver not in STUB_DRIVERS:
        extra = ", ".join(x for x in (f"RDMA device {', '.join(vf.rdma)}" if vf.rdma else "",
                                      f"netdev {', '.join(vf.netdevs)}" if vf.netdevs else "") if x)
        return f"VF {vf.address} leaves the host's {vf.driver}" + (f" (its {extra} go away)" if extra else "")
    return None


def distance_notes(host: ActionHost, snap: HostSnapshot, nic: Nic, nic_address: str,
                   gpus: list[str]) -> list[str]:
    """The distance from the NIC function to each GPU, and what the ACS state on the path costs."""
    out = []
    # a VF still to be created hangs off the PF's port: the path to the PF is its path
    probe = nic_address if host.root.exists(f"{_DEV}/{nic_address}") else nic.address
    for a in gpus:
        g = snap.gpu(a)
        level = distance_to(nic, a)
        label = f"GPU {g.index} ({a})" if g else a
        out.append(f"{nic_address} ({nic.label}) is {level} from {label}: {acs_note(host.root, a, probe, level)}")
    return out


def plan_nic_passthrough(host: ActionHost, snap: HostSnapshot, vf_text: str, vm: str) -> Plan:
    """Plan giving one VF to a VM's definition (bound to vfio-pci)."""
    nic, vf = resolve_nic_function(snap, vf_text)
    if vf is None:
        free = [v.address for v in nic.vfs if v.vm is None]
        hint = f"its free VFs: {', '.join(free)}" if free else f"create VFs first: nodeconsole nic vfs {nic.address} N"
        raise RequestError(f"{nic.address} is the physical function of {nic.label}: give one of its VFs ({hint})")
    target = resolve_vm(snap, vm)
    plan = Plan(action="nic passthrough", title=f"Pass VF {vf.address} of {nic.label} ({nic.name}) through to VM {vm}",
                request={"vf": vf.address, "pf": nic.address, "given": vf_text, "vm": vm, "vm_state": target.state},
                rebuild=lambda: plan_nic_passthrough(host, host.snapshot(), vf.address, vm))
    plan.checks += source_checks(snap)
    plan.checks += vms_known_check(snap, f"VF {vf.address}")
    plan.checks += vm_change_checks(host, target, gives_device=True)
    if host.vms is None:
        plan.checks.append(Check("libvirt reachable", False, "this host has no libvirt connection", "pass --libvirt URI"))
    if not plan.ok:
        return plan
    plan.checks += _iommu_checks(snap, vf.address)
    unreadable: dict[str, str] = {}
    others = {n: a for n, a in vms_with(host, snap, {vf.address}, unreadable).items() if n != vm}
    if others:
        plan.checks.append(Check("the VF is free", False, who(others),
                                 "take it out of that VM first, or pick a free VF (nodeconsole nic list)"))
    plan.checks += unreadable_vm_check(unreadable)
    if not plan.ok:
        return plan
    ops = _vf_ops(snap, host, vf.address, vm)
    if target.state != "shut off":
        plan.notes.append(f"VM {vm} is {target.state}: it gets the VF at its next start")
    if (note := _host_use_note(vf)) is not None:
        plan.notes.append(note)
    gpus = vm_gpu_addresses(snap, vm)
    plan.notes += distance_notes(host, snap, nic, vf.address, gpus)
    if gpus and all(distance_to(nic, g) == "SYS" for g in gpus):
        plan.notes.append(f"warning: {nic.label} is across the sockets from every GPU of VM {vm}: GPUDirect RDMA "
                          "crosses the inter-socket link; a VF of a NIC on the GPU's switch is better")
    add_steps(host, plan, ops)
    return plan


# -- the VF that goes with a GPU ----------------------------------------------------------------------

Candidate = tuple[tuple[int, int, int, str], Nic, NicVf | None, str, str]


def _candidates(host: ActionHost, snap: HostSnapshot, gpu: Gpu, configs: set[str]) -> list[Candidate]:
    """(rank, NIC, free VF or None for one to create, its address, distance) of every VF the GPU could get."""
    out: list[Candidate] = []
    for nic in snap.nics:
        level = distance_to(nic, gpu.address)
        for vf in nic.vfs:
            if vf.vm is None and vf.address not in configs and not group_blockers(snap, vf.address):
                out.append(((distance_rank(level), 0, vf_preference(vf), vf.address), nic, vf, vf.address, level))
        creatable = nic.sriov_totalvfs and not nic.sriov_numvfs and nic.driver and not group_blockers(snap, nic.address)
        if creatable and (address := vf_address(host, nic.address, 0)) is not None:
            out.append(((distance_rank(level), 1, 0, address), nic, None, address, level))
    return sorted(out, key=lambda c: c[0])


def nic_for_gpu(host: ActionHost, snap: HostSnapshot, gpu: Gpu, vm: str, allow_far: bool,
                plan: Plan) -> list[Op]:
    """The operations that give VM `vm` the free VF closest to `gpu` (creating one on an idle NIC when
    that is closer), with checks and notes added to `plan`; [] when the VM already has a NIC beside it."""
    held_by_vm = vm_nic_functions(snap, vm)
    mine = [(n, v) for n, v in held_by_vm if distance_to(n, gpu.address) != "SYS"]
    across = [v.address if v else n.address for n, v in held_by_vm if distance_to(n, gpu.address) == "SYS"]
    if across and not mine:
        plan.notes.append(f"VM {vm} also holds {', '.join(across)}, across the sockets from GPU {gpu.index}: once it "
                          f"has the VF beside the GPU, take that out of its definition ({host.command_hint('detach', vm)})")
    if mine:
        n, v = mine[0]
        plan.notes.append(f"VM {vm} already holds {v.address if v else n.address} ({n.label}, "
                          f"{distance_to(n, gpu.address)} from GPU {gpu.index}): no other VF added")
        return []
    held = vms_with(host, snap, {v.address for n in snap.nics for v in n.vfs})
    configs = {a for addrs in held.values() for a in addrs}
    cands = _candidates(host, snap, gpu, configs)
    allowed = [c for c in cands if c[4] in NEAR or allow_far]
    if not allowed:
        far = next((c for c in cands if c[4] == "SYS"), None)
        what = f"free VF is {far[3]} of {far[1].label}" if far and far[2] is not None else \
            f"VF would be one created on {far[1].label}" if far else ""
        reason = (f"the nearest {what}, across the sockets (SYS)" if far
                  else "no NIC has a free VF (every VF is in a VM's definition) or room for one")
        fix = ("pass --allow-far-nic to take it anyway (GPUDirect RDMA then crosses the inter-socket link), or "
               "create VFs on a NIC beside the GPU: nodeconsole nic vfs PF N") if far else \
            "create VFs on a NIC beside the GPU: nodeconsole nic vfs PF N"
        plan.checks.append(Check(f"a free NIC VF near GPU {gpu.index}", False, reason, fix))
        return []
    _rank, nic, vf, address, level = allowed[0]
    plan.checks.append(Check(f"a free NIC VF near GPU {gpu.index}", True,
                             f"{address} of {nic.label} ({nic.name}), {level}" +
                             ("" if vf is not None else ": created on the NIC, which has no VFs yet")))
    plan.request["nic"] = {"vf": address, "pf": nic.address, "distance": level, "created": vf is None}
    if level == "SYS":
        plan.notes.append(f"warning: {nic.label} is across the sockets from GPU {gpu.index} (--allow-far-nic): "
                          "GPUDirect RDMA crosses the inter-socket link")
    plan.notes += distance_notes(host, snap, nic, address, [gpu.address])
    if vf is not None:
        if (note := _host_use_note(vf)) is not None:
            plan.notes.append(note)
        return _vf_ops(snap, host, address, vm)
    ops: list[Op] = []
    if not host.root.exists(f"sys/bus/pci/drivers/{VFIO}"):
        ops.append({"kind": "module", "name": VFIO})
    if nic.sriov_drivers_autoprobe is not False:
        ops.append({"kind": "sriov_autoprobe", "device": nic.address, "value": 0})
    ops.append({"kind": "sriov_numvfs", "device": nic.address, "count": 1, "vfs": {address: [VFIO, VFIO]}})
    ops.append({"kind": "vm_hostdev", "vm": vm, "address": address, "present": True, "managed": True})
    plan.notes.append(f"{nic.label} gets one VF ({address}), kept off the host's driver (sriov_drivers_autoprobe=0) "
                      "and bound to vfio-pci; not persistent across reboot (nodeconsole nic vfs "
                      f"{nic.address} 1 --persist)")
    return ops


def nic_release_keys(records: list[AuditRecord]) -> list[str]:
    """The NIC VF and PF addresses the passthrough records gave a VM (request["nic"])."""
    out: list[str] = []
    for r in records:
        nic = (r.request or {}).get("nic")
        if isinstance(nic, dict):
            out += [a for a in (nic.get("vf"), nic.get("pf")) if isinstance(a, str) and a not in out]
    return out
