"""The `vm_hostdev` step kind: a VM's persistent configuration has (or has not) a PCI host device, through
the host's domain store (console/vms/libvirt_domains.py; the demo's node file)."""
from __future__ import annotations

import shlex

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.domain_edits import Taken, put_hostdev, take_hostdev
from nodeconsole.console.host_seams import DomainStore
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.vms.libvirt_domains import DomainConfigError, hostdev_xml

# -- step kind ----------------------------------------------------------------------------------------

def _taken(cfg: DomainStore, vm: str, address: str) -> Taken | None:
    """The hostdev of `address` as the store edits the definition (the text `edit` hands over, whose
    indentation can differ from `xml()`'s), read through an edit that changes nothing."""
    seen: list[Taken] = []

    def look(text: str) -> str:
        found = take_hostdev(text, "pci", address)
        if found is not None:
            seen.append(found)
        return text  # unchanged: nothing is written

    cfg.edit(vm, look)
    return seen[0] if seen else None


def _exact_element(op: Op, address: str) -> str | None:
    """The exact <hostdev> text an undo puts back (recorded when it was removed), checked: the audit
    log is a file anyone with access could have edited, so it must be one <hostdev> of `address`."""
    element = op.get("element")
    if element is None:
        return None
    child = op.get("child")
    if not isinstance(element, str) or len(element) > 65536 or not (child is None or isinstance(child, int)):
        raise StepError("malformed vm_hostdev operation: 'element' must be a <hostdev> of at most 64 KiB")
    text = element.strip()
    if not (text.startswith("<hostdev") and text.endswith(">")):
        raise StepError("malformed vm_hostdev operation: 'element' is not a <hostdev> element")
    probe = "<domain><devices>" + text + "</devices></domain>"
    try:
        hostdevs = parse_domain(probe).hostdevs
    except ValueError as e:
        raise StepError(f"malformed vm_hostdev operation: {e}") from None
    if [(h.type, h.address) for h in hostdevs] != [("pci", address)]:
        raise StepError(f"malformed vm_hostdev operation: 'element' is not the hostdev of {address}")
    return text


@step_kind("vm_hostdev")
def vm_hostdev_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "vm_hostdev", "vm": NAME, "address": PCI, "present": bool, "managed": bool}`: the VM's
    persistent config has (present) or has not a PCI <hostdev> for the address."""
    vm, address, present = op["vm"], parse_pci_address(op["address"]), bool(op["present"])
    managed = bool(op.get("managed", True))
    cfg = host.domains
    if cfg is None:
        raise StepError("this host has no libvirt connection")
    try:
        has = address in cfg.pci_hostdevs(vm)
    except DomainConfigError as e:
        raise StepError(str(e)) from None
    if has == present:
        return None
    inverse = {"kind": "vm_hostdev", "vm": vm, "address": address, "present": not present, "managed": managed}
    taken: Taken | None = None
    if not present:
        place = cfg.hostdev_place(vm, address)
        if place is not None:  # put it back where it was, as it was
            inverse.update(index=place[0], managed=place[1])
        taken = _taken(cfg, vm, address)
        if taken is not None:  # and exactly as it was: its guest <address>, <rom>, boot order…
            inverse.update(element=taken.text, child=taken.child)
    element = _exact_element(op, address)

    def apply() -> None:
        if present and element is not None:
            cfg.edit(vm, lambda x: put_hostdev(x, element, child=op.get("child")))
        elif present:
            cfg.add_hostdev(vm, address, managed=managed, index=op.get("index"))
        else:
            cfg.remove_hostdev(vm, address)

    def verify() -> str | None:
        now = address in cfg.pci_hostdevs(vm)
        if now == present:
            return None
        return f"the config of VM {vm} {'still lacks' if present else 'still has'} hostdev {address}"

    vm_arg = shlex.quote(vm)
    if present:
        title = f"Add {address} to VM {vm}'s config"
        why = (f"VM {vm} gets the device at its next start; managed='yes' lets libvirt keep it on vfio-pci "
               "while the VM runs")
        shown = _as_shown(element) if element is not None else hostdev_xml(address, managed)
        cmd = f"virsh attach-device {vm_arg} /dev/stdin --config <<'EOF'  # the <hostdev> below, then EOF"
    else:
        title = f"Remove {address} from VM {vm}'s config"
        why = (f"VM {vm} must not claim the device once it is given back to the host (by hand: virsh edit "
               f"{vm_arg}, delete this <hostdev>)")
        shown = _as_shown(taken.text) if taken is not None else hostdev_xml(address, managed)
        cmd = f"virsh detach-device {vm_arg} /dev/stdin --config <<'EOF'  # the <hostdev> below, then EOF"
    return Step(title=title, why=why, commands=(cmd,), op=dict(op), inverse=inverse, apply_fn=apply,
                verify_fn=verify, detail=shown)


def _as_shown(element: str) -> str:
    """An element's text as a domain file holds it, without the indentation of its place there: its
    closing line's indent comes off every later line."""
    lines = element.strip("\n").split("\n")
    if len(lines) < 2:
        return element.strip()
    last = lines[-1]
    indent = last[:len(last) - len(last.lstrip(" \t"))]
    return "\n".join([lines[0]] + [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[1:]])

