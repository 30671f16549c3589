"""The commands an admin would type to give a libvirt domain a shape (console/vms/shape.py): `virsh` for the
parts that change. Text for a plan's step, never run; the backends say them (`VmBackend.shape_commands`;
Proxmox's are its `qm set`, console/vms/proxmox_backend.py)."""
from __future__ import annotations

import shlex

from nodeconsole.console.vms.shape import VmShape


def virsh_shape_commands(vm: str, now: VmShape, target: VmShape) -> tuple[str, ...]:
    """The virsh commands an admin would type for the parts of the shape that change."""
    q = shlex.quote(vm)
    cmds = []
    if now.vcpus != target.vcpus:
        cmds += [f"virsh setvcpus {q} {target.vcpus} --config --maximum", f"virsh setvcpus {q} {target.vcpus} --config"]
    if now.memory_kib != target.memory_kib:
        size = f"{target.memory_kib >> 20}G" if not target.memory_kib % (1 << 20) else f"{target.memory_kib}K"
        cmds += [f"virsh setmaxmem {q} {size} --config", f"virsh setmem {q} {size} --config"]
    if now.hugepage_kib != target.hugepage_kib:
        cmds.append(f"virsh edit {q}  # <memoryBacking><hugepages><page size='{target.hugepage_kib}' unit='KiB'/>"
                    "</hugepages></memoryBacking>" if target.hugepage_kib is not None
                    else f"virsh edit {q}  # remove <hugepages> from <memoryBacking>")
    key_now, key_target = now.key(), target.key()
    if key_now[3] != key_target[3]:
        cmds.append(f"virsh numatune {q} --mode {target.numa[0]} --nodeset {target.numa[1]} --config" if target.numa
                    else f"virsh edit {q}  # remove <memory> from <numatune>")
    if key_now[4] != key_target[4]:
        cells = "".join(f"<cell id='{c.id}' cpus='{c.cpus}' memory='{c.memory_kib}' unit='KiB'/>" for c in target.cells)
        memnodes = "".join(f"<memnode cellid='{c.id}' mode='strict' nodeset='{c.host_nodes}'/>"
                           for c in target.cells if c.host_nodes)
        cmds.append(f"virsh edit {q}  # <cpu><numa>{cells}</numa></cpu>" + (f", <numatune>{memnodes}</numatune>"
                                                                            if memnodes else "")
                    if target.cells else f"virsh edit {q}  # remove <numa> from <cpu>, <memnode>s from <numatune>")
    if now.threads_per_core != target.threads_per_core or (now.vcpus != target.vcpus and target.threads_per_core > 1):
        cmds.append(f"virsh edit {q}  # <cpu><topology sockets='1' dies='1' "
                    f"cores='{target.vcpus // target.threads_per_core}' threads='{target.threads_per_core}'/>")
    return tuple(cmds)
