"""libvirt's side of the VM backend's pins (console/vms/backend.py `VmPins`): read from and written to
domain XML, and set live on a running domain.

Where the state lives:
- real libvirt, live: pinVcpuFlags / pinEmulator / setNumaParameters with VIR_DOMAIN_AFFECT_LIVE (no pin
  = a pin to every CPU; libvirt cannot change the memory policy's mode of a running VM, so the planner
  only sets the policy live when the mode stays);
- real libvirt, the definition: the inactive XML edited and defined again (a removed pin is really
  removed, which pinVcpuFlags(CONFIG) cannot do);
- the demo's node file: the file itself. The libvirt test driver serves that one definition as both the
  running VM and its config, so for a running VM one edit sets its pins live and in its config.
Both definition edits go through console/domain_edits.py, which splices only the pin and memory-policy
elements, so an edit and its inverse leave the stored text byte for byte as it was.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, Protocol

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.domain_edits import set_emulatorpin, set_numa_memory, set_vcpupin
from nodeconsole.console.vms.backend import LIVE_AND_CONFIG, PinScopes, VmConfigError, VmPins

_AFFECT_LIVE = 1  # libvirt.VIR_DOMAIN_AFFECT_LIVE
_RETRY_CURRENT = (3, 8)  # VIR_ERR_NO_SUPPORT, VIR_ERR_INVALID_ARG ("unsupported flags": test driver)
NEXT_START = "only its config changes; the pins take effect at its next start"


class LiveDomains(Protocol):
    """What the live pins need of a libvirt connection (console/vms/libvirt_domains.py's
    `LibvirtDomainConfig`)."""

    def domain(self, vm: str) -> Any: ...

    def is_active(self, vm: str) -> bool: ...

    def live_xml(self, vm: str) -> str: ...

    def every_cpu(self) -> frozenset[int]: ...


def read_xml_state(xml: str) -> VmPins:
    """The pins of a domain XML, CPU sets as written."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise VmConfigError(f"domain XML is not well formed: {e}") from None
    vcpus = tuple(sorted((int(p.get("vcpu", "0")), p.get("cpuset", ""))
                         for p in root.findall("./cputune/vcpupin")))
    emu = root.find("./cputune/emulatorpin")
    mem = root.find("./numatune/memory")
    numa = (mem.get("mode"), mem.get("nodeset", "")) if mem is not None else None
    return VmPins(vcpus=vcpus, emulator=emu.get("cpuset") if emu is not None else None, numa=numa)


def edit_pins(xml: str, target: VmPins, with_numa: bool) -> str:
    """`xml` with exactly the target's pins, through the one domain editor (console/domain_edits.py):
    only the pin and memory-policy elements change, so an apply followed by its undo gives back the same
    bytes (the demo's node file) and libvirt gets its own document back with just those changes."""
    current = read_xml_state(xml)
    want = dict(target.vcpus)
    for v, _ in current.vcpus:
        if v not in want:
            xml = set_vcpupin(xml, v, None)
    for v, cpuset in target.vcpus:
        xml = set_vcpupin(xml, v, cpuset)
    if current.emulator != target.emulator:
        xml = set_emulatorpin(xml, target.emulator)
    if with_numa and current.numa != target.numa:
        xml = set_numa_memory(xml, target.numa[0], target.numa[1]) if target.numa else \
            set_numa_memory(xml, None, None)
    return xml


def stored_scopes(running: bool, label: str, one_state: bool) -> PinScopes:
    """Where the pins of a VM of a definition store without a libvirt connection go: a store that is the
    running state too (the demo's node file) takes one edit, live and config; any other the config only."""
    if not running:
        return PinScopes(("config",), False, NEXT_START)
    if one_state:
        return PinScopes(("config",), True, f"its pins are set {LIVE_AND_CONFIG}: libvirt here serves one "
                                            f"definition (the {label}) as both the running VM and its config, "
                                            "so one edit sets both")
    return PinScopes(("config",), False, "its pins are set in the config only, from its next start: live "
                                         f"pins need a libvirt connection (this host's VMs are read from a "
                                         f"{label})")


def libvirt_scopes(cfg: LiveDomains, vm: str) -> PinScopes:
    """libvirt, the VM active: live and in the persistent config; live only for a transient VM (no
    config); the config only when libvirt cannot show the live pins (the reason is said). The VM not
    running: the config, used from its next start."""
    import libvirt

    if not cfg.is_active(vm):
        return PinScopes(("config",), False, NEXT_START)
    try:
        persistent = bool(cfg.domain(vm).isPersistent())
    except libvirt.libvirtError as e:
        raise VmConfigError(f"libvirt: {e.get_error_message()}") from None
    if not persistent:
        return PinScopes(("live",), True, "its pins are set live now only: it is a transient VM (libvirt "
                                          "keeps no config for it), so they are gone when it stops")
    try:
        cfg.live_xml(vm)
    except VmConfigError as e:
        return PinScopes(("config",), False, "its pins are set in the config only, from its next start: "
                                             f"its live pins cannot be read ({e})")
    return PinScopes(("live", "config"), True, f"its pins are set {LIVE_AND_CONFIG}")


def write_live(cfg: LiveDomains, vm: str, target: VmPins, with_numa: bool) -> None:
    """Set the running domain's pins to `target` (only those that differ)."""
    dom = cfg.domain(vm)
    every = cfg.every_cpu()
    width = len(every)
    current = read_xml_state(cfg.live_xml(vm))
    now_v, now_e, now_n = current.sets(every)
    want_v, want_e, want_n = target.sets(every)
    nvcpus = max([v + 1 for v, _ in target.vcpus + current.vcpus] + [dom.vcpusFlags(_AFFECT_LIVE)])

    def cpumap(cpus: frozenset[int] | None) -> tuple[bool, ...]:
        cpus = cpus if cpus is not None else every
        beyond = sorted(c for c in cpus if c >= width)
        if beyond:
            raise VmConfigError(f"CPU {format_cpulist(beyond)} is beyond this host's {width} CPUs")
        return tuple(i in cpus for i in range(width))

    call = _caller(vm)
    for v in range(nvcpus):
        if now_v.get(v) != want_v.get(v):
            call(f"the pin of vCPU {v}", dom.pinVcpuFlags, v, cpumap(want_v.get(v)))
    if now_e != want_e:
        call("the emulator pin", dom.pinEmulator, cpumap(want_e))
    if with_numa and want_n is not None and now_n != want_n:  # want_n is None when target.numa is
        # the mode of a running VM's policy cannot change (the planner keeps it); the nodeset can
        call("the memory nodes", dom.setNumaParameters, {"numa_nodeset": format_cpulist(want_n[1])})


def _caller(vm: str) -> Callable[..., None]:
    """Calls a libvirt setter with VIR_DOMAIN_AFFECT_LIVE (flags 0 where the driver lacks that flag)."""
    import libvirt

    def call(what: str, fn: Callable[..., Any], *args: object) -> None:
        try:
            fn(*args, _AFFECT_LIVE)
        except libvirt.libvirtError as e:
            if e.get_error_code() not in _RETRY_CURRENT:
                raise VmConfigError(f"libvirt refused to set {what} of the running VM {vm}: "
                                    f"{e.get_error_message()}") from None
            try:  # drivers without the LIVE flag (test driver): flags 0 is the running state
                fn(*args, 0)
            except libvirt.libvirtError as e2:
                raise VmConfigError(f"libvirt refused to set {what} of the running VM {vm}: "
                                    f"{e2.get_error_message()}") from None
    return call


def pin_commands(vm: str, target: VmPins, current: VmPins, live: bool, memory_policy: bool,
                 all_cpus: str) -> tuple[str, ...]:
    """The virsh commands that make the pins `target` (from `current`) live or in the config."""
    flag = "--live" if live else "--config"
    cmds = [f"virsh vcpupin {vm} {v} {s} {flag}" for v, s in target.vcpus]
    cmds += [f"virsh vcpupin {vm} {v} {all_cpus} {flag}  # unpin" for v, _ in current.vcpus if v not in dict(target.vcpus)]
    if target.emulator or current.emulator:
        cmds.append(f"virsh emulatorpin {vm} {target.emulator or all_cpus} {flag}")
    if memory_policy and target.numa:
        cmds.append(f"virsh numatune {vm} --mode {target.numa[0] or 'strict'} --nodeset {target.numa[1]} {flag}")
    elif memory_policy and current.numa:
        cmds.append(f"virsh edit {vm}  # remove <numatune>")
    return tuple(cmds)
