"""What an admin types for an operation on a VM, in its hypervisor's own tool: `virsh` for a libvirt
domain, `qm` for a Proxmox VE VM (named by its vmid). Plans and checks print these as hints (a fix, a step's
commands); they are text to read, never run. The VM backends say them (`VmBackend.command_hint`); code that
has only the VM model asks `hint_for(vm, kind)`.

Kinds and their arguments: shutdown, start, stop, resume, show, edit, list, unlock, clone; setmem (size: "64G"); setvcpus
(n); detach; attach_hostdev (address) / detach_hostdev; attach_mdev / detach_mdev (uuid); restore (a saved definition put back).
"""
from __future__ import annotations

import shlex

from nodeconsole.console.model import Vm

LIBVIRT = {
    "shutdown": "virsh shutdown {vm}",
    "start": "virsh start {vm}",
    "stop": "virsh destroy {vm}",
    "resume": "virsh resume {vm}",
    "show": "virsh dumpxml --inactive {vm}",
    "edit": "virsh edit {vm}",
    "edit_hostdev": "virsh edit {vm}, delete this <hostdev>",
    "list": "virsh list --all",
    "unlock": "virsh domjobabort {vm}",
    "clone": "virt-clone --original {vm} --auto-clone",
    "setmem": "virsh setmaxmem {vm} {size} --config; virsh setmem {vm} {size} --config",
    "setvcpus": "virsh setvcpus {vm} {n} --config --maximum",
    "detach": "virsh detach-device {vm} DEVICE.xml --config",
    "attach_hostdev": "virsh attach-device {vm} /dev/stdin --config <<'EOF'  # the <hostdev> below, then EOF",
    "detach_hostdev": "virsh detach-device {vm} /dev/stdin --config <<'EOF'  # the <hostdev> below, then EOF",
    "attach_mdev": "virsh attach-device {vm} mdev-{uuid}.xml --config",
    "detach_mdev": "virsh detach-device {vm} mdev-{uuid}.xml --config",
    "restore": "virsh define /dev/stdin <<'EOF'  # the saved definition below, then EOF",
}
PROXMOX = {
    "shutdown": "qm shutdown {vm}",
    "start": "qm start {vm}",
    "stop": "qm stop {vm}",
    "resume": "qm resume {vm}",
    "show": "qm config {vm} --current 0",
    "edit": "qm set {vm} --delete hostpciN",
    "edit_hostdev": "qm set {vm} --delete hostpciN, N of this line",
    "list": "qm list",
    "unlock": "qm unlock {vm}",
    "clone": "qm clone {vm} NEWID --name NAME",
    "setmem": "qm set {vm} --memory {mib}",
    "setvcpus": "qm set {vm} --cores {n}",
    "detach": "qm set {vm} --delete hostpciN",
    "attach_hostdev": "qm set {vm} --hostpciN {address}  # the line below",
    "detach_hostdev": "qm set {vm} --delete hostpciN  # the line below",
    "attach_mdev": "qm set {vm} --hostpciN GPU,mdev=TYPE  # vGPU {uuid}",
    "detach_mdev": "qm set {vm} --delete hostpciN  # the line of vGPU {uuid}",
    "restore": "qm set {vm} --KEY VALUE … --delete KEY,…  # each key that differs from the saved config below",
}
TOOLS = {"libvirt": LIBVIRT, "proxmox": PROXMOX}


def _mib(size: str) -> str:
    """"64G" → "65536" (Proxmox's memory is in MiB); anything else as given."""
    if size[:-1].isdigit() and size[-1:] in "GM":
        return str(int(size[:-1]) * (1024 if size[-1] == "G" else 1))
    return size


def command_hint(hypervisor: str, kind: str, vm: str, **args: str) -> str:
    """The command for `kind` on `vm` (its name for libvirt, its vmid for Proxmox: quoted here)."""
    table = TOOLS.get(hypervisor, LIBVIRT)
    if hypervisor == "proxmox" and "size" in args:
        args = dict(args, mib=_mib(args["size"]))
    return table[kind].format(vm=shlex.quote(vm), **args)


def hint_for(vm: Vm | None, kind: str, name: str = "NAME", **args: str) -> str:
    """The command for `kind` on the VM as the model holds it (None: a placeholder `name`, libvirt's)."""
    if vm is None:
        return command_hint("libvirt", kind, name, **args)
    ref = str(vm.vmid) if vm.hypervisor == "proxmox" and vm.vmid is not None else vm.name
    return command_hint(vm.hypervisor, kind, ref, **args)
