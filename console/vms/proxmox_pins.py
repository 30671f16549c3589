"""A Proxmox VE VM's pins in the backend's terms (console/vms/backend.py's VmPins), and the `qm set`
arguments that make them so.

Proxmox pins the whole QEMU process (`affinity: CPUS`, taskset at start) and binds memory per NUMA cell
(`numa: 1`, `numaN: cpus=…,hostnodes=…,memory=…,policy=…`); it has no per-vCPU pin and no emulator pin of
its own. So a VM's pins read as every vCPU, and the emulator, on the affinity set (the CPUs each may run
on); and only pins of that form can be written: every vCPU and the emulator on one set (or no pin at all).
Any other (the per-vCPU pins a libvirt plan makes) is refused, saying so, before anything runs.

The memory policy is one cell, `numa0`, over every vCPU with the VM's memory (Proxmox wants the cells'
memory to add up to the VM's), the nodeset as `hostnodes` and the mode as `policy` (libvirt's strict is
Proxmox's bind); no policy deletes every cell, and `numa: 1` unless huge pages need it. Undone through the
same method with the pins read before, a config written by Proxmox comes back byte for byte (a `numa: 1`
that stood alone, without cells or huge pages, is the one thing not put back).
"""
from __future__ import annotations

from nodeconsole.console.cpulist import format_cpulist, parse_cpulist
from nodeconsole.console.libvirt_xml import parse_libvirt_set
from nodeconsole.console.vms.backend import VmConfigError, VmPins
from nodeconsole.console.vms.proxmox_conf import Section, VmSettings

_POLICY = {None: "bind", "strict": "bind", "restrictive": "bind", "preferred": "preferred", "interleave": "interleave"}
_MODE = {"bind": "strict", "preferred": "preferred", "interleave": "interleave"}


def read_pins(s: VmSettings, affinity_text: str | None) -> VmPins:
    """The pins of a section's settings (`affinity_text`: its affinity as written)."""
    text = affinity_text if s.affinity else None
    bound = [c for c in s.cells if c.hostnodes]
    numa = (_MODE.get(bound[0].policy or "bind"), format_cpulist(sorted({n for c in bound for n in c.hostnodes}))) \
        if bound else None
    return VmPins(tuple((v, text) for v in range(s.vcpus)) if text else (), text, numa)


def _one_set(pins: VmPins, vcpus: int, vm: str) -> str | None:
    """The one CPU set `pins` put the whole process on (None: no pin); VmConfigError when they differ."""
    sets = {frozenset(parse_libvirt_set(t)) for _, t in pins.vcpus}
    emulator = frozenset(parse_libvirt_set(pins.emulator)) if pins.emulator else None
    if not pins.vcpus and emulator is None:
        return None
    if len(sets) == 1 and len(pins.vcpus) >= vcpus and emulator == next(iter(sets)):  # >=: a shape first
        return pins.vcpus[0][1]
    raise VmConfigError(f"VM {vm}: Proxmox pins the whole QEMU process to one CPU set (`affinity`), every vCPU and "
                        "the emulator together, not each apart; these pins differ. By hand: `qm set VMID --affinity "
                        "CPUS --numa 1 --numa0 cpus=0-N,hostnodes=NODE,memory=MiB,policy=bind`")


def pin_args(section: Section, s: VmSettings, pins: VmPins, memory_policy: bool, vm: str) -> list[str]:
    """The `qm set` arguments that make the section's pins `pins` ([] when they are already)."""
    sets: list[str] = []
    deletes: list[str] = []
    text = _one_set(pins, s.vcpus, vm)
    now = section.get("affinity")
    if text is None and now is not None:
        deletes.append("affinity")
    elif text is not None and (now is None or set(parse_cpulist(now.value)) != set(parse_libvirt_set(text))):
        sets += ["--affinity", format_cpulist(parse_libvirt_set(text))]
    if memory_policy:
        cells = [k for k in section.keys() if k.startswith("numa") and k[4:].isdigit()]
        if pins.numa is not None:
            nodes = ";".join(format_cpulist(parse_libvirt_set(pins.numa[1])).split(","))
            cell = (f"cpus=0-{s.vcpus - 1},hostnodes={nodes},memory={s.memory_mib},"
                    f"policy={_POLICY.get(pins.numa[0], 'bind')}")
            if not s.numa:
                sets += ["--numa", "1"]
            if (line := section.get("numa0")) is None or line.value != cell:
                sets += ["--numa0", cell]
            deletes += [k for k in cells if k != "numa0"]
        else:
            deletes += cells
            if section.get("numa") is not None and s.hugepages is None:
                deletes.append("numa")
    return sets + (["--delete", ",".join(deletes)] if deletes else [])
