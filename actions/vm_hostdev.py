"""The `vm_hostdev` step kind: a VM's persistent configuration has (or has not) a PCI host device, through
the host's VM backend (console/vms/backend.py); a removed device's saved form (an opaque token: libvirt's
exact <hostdev> element) is recorded in the inverse, so an undo puts back exactly what was there."""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.vms.backend import SavedHostdev, VmBackend, VmConfigError

# -- step kind ----------------------------------------------------------------------------------------

def _exact_element(cfg: VmBackend, op: Op, address: str) -> str | None:
    """The device's saved form an undo puts back (recorded when it was removed), checked: the audit
    log is a file anyone with access could have edited, so the backend must find it one saved host
    device of `address`."""
    element = op.get("element")
    if element is None:
        return None
    child = op.get("child")
    if not isinstance(element, str) or len(element) > 65536 or not (child is None or isinstance(child, int)):
        raise StepError("malformed vm_hostdev operation: 'element' must be a <hostdev> of at most 64 KiB")
    try:
        return cfg.check_saved_hostdev(address, element)
    except VmConfigError as e:
        raise StepError(f"malformed vm_hostdev operation: {e}") from None


@step_kind("vm_hostdev")
def vm_hostdev_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "vm_hostdev", "vm": NAME, "address": PCI, "present": bool, "managed": bool}`: the VM's
    persistent config has (present) or has not a PCI <hostdev> for the address."""
    vm, address, present = op["vm"], parse_pci_address(op["address"]), bool(op["present"])
    managed = bool(op.get("managed", True))
    cfg = host.domains  # the VM backend (console/vms/backend.py)
    if cfg is None:
        raise StepError("this host has no libvirt connection")
    try:
        has = address in cfg.pci_hostdevs(vm)
    except VmConfigError as e:
        raise StepError(str(e)) from None
    if has == present:
        return None
    inverse = {"kind": "vm_hostdev", "vm": vm, "address": address, "present": not present, "managed": managed}
    taken: SavedHostdev | None = None
    if not present:
        place = cfg.hostdev_place(vm, address)
        if place is not None:  # put it back where it was, as it was
            inverse.update(index=place[0], managed=place[1])
        taken = cfg.saved_hostdev(vm, address)
        if taken is not None:  # and exactly as it was: its guest <address>, <rom>, boot order…
            inverse.update(element=taken.token, child=taken.place)
    element = _exact_element(cfg, op, address)

    def apply() -> None:
        if present and element is not None:
            cfg.restore_hostdev(vm, address, SavedHostdev(element, op.get("child")))
        elif present:
            cfg.add_hostdev(vm, address, managed=managed, index=op.get("index"))
        else:
            cfg.remove_hostdev(vm, address)

    def verify() -> str | None:
        now = address in cfg.pci_hostdevs(vm)
        if now == present:
            return None
        return f"the config of VM {vm} {'still lacks' if present else 'still has'} hostdev {address}"

    if present:
        title = f"Add {address} to VM {vm}'s config"
        why = (f"VM {vm} gets the device at its next start; managed='yes' lets libvirt keep it on vfio-pci "
               "while the VM runs")
        shown = cfg.hostdev_text(address, managed, element)
        cmd = cfg.command_hint("attach_hostdev", vm, address=address)
    else:
        title = f"Remove {address} from VM {vm}'s config"
        why = (f"VM {vm} must not claim the device once it is given back to the host (by hand: "
               f"{cfg.command_hint('edit_hostdev', vm)})")
        shown = cfg.hostdev_text(address, managed, taken.token if taken is not None else None)
        cmd = cfg.command_hint("detach_hostdev", vm)
    return Step(title=title, why=why, commands=(cmd,), op=dict(op), inverse=inverse, apply_fn=apply,
                verify_fn=verify, detail=shown)

