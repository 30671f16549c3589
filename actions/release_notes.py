"""What a release plan says about the VM definitions it changes and those it leaves alone.

Every sentence names exactly what its steps take out of which VM's config (the GPU, a device of its
IOMMU group, the NIC VF a `--with-nic` passthrough gave the VM) and, for a VM whose config still names
the GPU after the release (it did before the passthrough being undone), that it still does and what its
next start does. The release truth tests re-read the host after apply and check each sentence.
"""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Op
from nodeconsole.console.model import Gpu


def removed_by_vm(ops: list[Op]) -> dict[str, list[str]]:
    """VM name → the addresses the release's vm_hostdev operations take out of its config."""
    out: dict[str, list[str]] = {}
    for op in ops:
        if op["kind"] == "vm_hostdev" and not op.get("present"):
            out.setdefault(op["vm"], []).append(op["address"])
    return out


def _what(gpu: Gpu, members: list[str], addresses: list[str]) -> str:
    """'the GPU' when the addresses are the GPU's group (or the GPU alone); else each one named."""
    mine = [a for a in addresses if a in members]
    parts: list[str] = []
    if gpu.address in mine:
        parts.append("the GPU")
    else:
        parts += [f"{a} (of the GPU's IOMMU group)" for a in mine]
    parts += [f"the NIC VF {a}" for a in addresses if a not in members]
    return " and ".join(parts)


def loss_notes(gpu: Gpu, members: list[str], ops: list[Op], cfg_only: dict[str, str]) -> list[str]:
    """One sentence per VM whose config the release changes, naming what it loses."""
    notes: list[str] = []
    for name, addrs in sorted(removed_by_vm(ops).items()):
        what = _what(gpu, members, addrs)
        if name in cfg_only:
            notes.append(f"VM {name} is running without the GPU ({cfg_only[name]}): release takes {what} out "
                         "of its config only; the running VM is not touched")
        else:
            notes.append(f"VM {name} loses {what} from its config")
    return notes


def _managed(host: ActionHost, vm: str, address: str) -> bool:
    try:
        place = host.vms.hostdev_place(vm, address) if host.vms is not None else None
    except Exception:  # an unreadable definition: libvirt's default
        place = None
    return place[1] if place is not None else True


def kept_notes(host: ActionHost, gpu: Gpu, in_configs: dict[str, list[str]], ops: list[Op],
               what: str) -> list[str]:
    """One sentence per VM whose config still names the GPU (or a device of its group) after release:
    the passthroughs being undone (`what`) did not put it there. What its next start does depends on
    managed: libvirt takes a managed device from the host; an unmanaged one on a host driver fails it."""
    removed = removed_by_vm(ops)
    notes: list[str] = []
    for name, addrs in sorted(in_configs.items()):
        left = [a for a in addrs if a not in removed.get(name, [])]
        if not left:
            continue
        held = "the GPU" if gpu.address in left else ", ".join(left)
        if all(_managed(host, name, a) for a in left):
            start = f"{name}'s next start takes it from the host again"
        else:
            start = f"{name} cannot start while it is on a host driver (managed='no')"
        notes.append(f"{name}'s config names {held} too; {what} did not put it there: left alone, and {start} "
                     f"({host.command_hint('edit', name)} to remove it)")
    return notes
