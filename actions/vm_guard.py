"""What makes a VM unfit for a change at plan time, as failing checks: a VM its hypervisor has locked
(Proxmox VE's `lock:` — a backup, migration, snapshot… — refuses every config change until it is gone)
and, for a plan that gives the VM a device, a template (a Proxmox template never starts: it holds no GPU).
Every plan that changes a VM's definition adds these, so a refusal comes before anything runs, naming the
lock and what lifts it."""
from __future__ import annotations

from collections.abc import Iterable

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check
from nodeconsole.console.model import HostSnapshot, Vm


def _ref(vm: Vm) -> str:
    return str(vm.vmid) if vm.vmid is not None else vm.name


def vm_change_checks(host: ActionHost, vm: Vm, gives_device: bool = False) -> list[Check]:
    """Failing checks for a locked VM (and, with `gives_device`, a template); [] when neither."""
    out = []
    if vm.lock:
        out.append(Check(f"VM {vm.name} is not locked", False, f"VM {_ref(vm)} is locked ({vm.lock})",
                         f"{host.command_hint('unlock', vm.name)} once the {vm.lock} is done"))
    if gives_device and vm.template:
        out.append(Check(f"VM {vm.name} is not a template", False,
                         f"VM {_ref(vm)} is a template: a template never starts, so it holds no GPU",
                         f"give the device to a clone of it ({host.command_hint('clone', vm.name)})"))
    return out


def vms_change_checks(host: ActionHost, snap: HostSnapshot, names: Iterable[str]) -> list[Check]:
    """`vm_change_checks` of each named VM the snapshot knows (the VMs whose configs a plan edits)."""
    return [c for n in sorted(set(names)) if (vm := snap.vm(n)) is not None for c in vm_change_checks(host, vm)]
