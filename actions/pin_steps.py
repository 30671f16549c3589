"""The `vm_pins` step kind: a VM's vCPU pins, emulator pin and memory policy, live or in its config.

An operation holds the VM's complete pin state for one scope, so its inverse (the state read before the
change) restores it exactly, pins that were absent included:

    {"kind": "vm_pins", "vm": NAME, "scope": "live"|"config",
     "vcpus": [[VCPU, CPUSET], ...],  # every pinned vCPU; a vCPU not listed has no pin
     "emulator": CPUSET | None,
     "numa": {"mode": MODE, "nodeset": NODESET} | None}  # key absent: the memory policy is left alone

CPU sets are kept as libvirt wrote them ("0-3,^2"), so an undo writes back the very same text.

Where the state lives:
- real libvirt, "live": pinVcpuFlags / pinEmulator / setNumaParameters with VIR_DOMAIN_AFFECT_LIVE
  (no pin = a pin to every CPU; libvirt cannot change the memory policy's mode of a running VM, so the
  planner only includes "numa" live when the mode stays);
- real libvirt, "config": the inactive XML edited and defined again (a removed pin is really removed,
  which pinVcpuFlags(CONFIG) cannot do);
- the demo's node file, "config": the file itself. The libvirt test driver serves that one definition
  as both the running VM and its config, so for a running VM one edit sets its pins live and in its
  config (`pin_scopes` says so).
Both config edits go through console/domain_edits.py, which splices only the pin and memory-policy
elements, so apply + undo leave the stored text byte for byte as it was.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.domain_edits import set_emulatorpin, set_numa_memory, set_vcpupin
from nodeconsole.console.host_seams import DomainStore
from nodeconsole.console.libvirt_xml import parse_libvirt_set
from nodeconsole.console.vms.libvirt_domains import DomainConfigError, LibvirtDomainConfig

_AFFECT_LIVE = 1  # libvirt.VIR_DOMAIN_AFFECT_LIVE
_NUMA_MODES = {"strict": 0, "preferred": 1, "interleave": 2, "restrictive": 3}
_RETRY_CURRENT = (3, 8)  # VIR_ERR_NO_SUPPORT, VIR_ERR_INVALID_ARG ("unsupported flags": test driver)
# a PinState's comparable form: (vCPU → CPUs, emulator CPUs, (memory mode, nodes))
PinSets = tuple[dict[int, frozenset[int]], frozenset[int] | None, tuple[str, frozenset[int]] | None]


@dataclass(frozen=True)
class PinState:
    """One scope's pins, as written (CPU sets are libvirt syntax strings)."""
    vcpus: tuple[tuple[int, str], ...] = ()
    emulator: str | None = None
    numa: tuple[str | None, str] | None = None  # (mode, nodeset); mode None: no attribute (strict)

    @classmethod
    def from_op(cls, op: Op) -> PinState:
        numa = op.get("numa")
        return cls(vcpus=tuple(sorted((int(v), str(s)) for v, s in op.get("vcpus") or [])),
                   emulator=op.get("emulator") or None,
                   numa=(numa.get("mode"), str(numa["nodeset"])) if numa else None)

    def op(self, vm: str, scope: str, with_numa: bool) -> Op:
        out: Op = {"kind": "vm_pins", "vm": vm, "scope": scope, "vcpus": [[v, s] for v, s in self.vcpus],
                   "emulator": self.emulator}
        if with_numa:
            out["numa"] = {"mode": self.numa[0], "nodeset": self.numa[1]} if self.numa else None
        return out

    def sets(self, every: frozenset[int] = frozenset()) -> PinSets:
        """Comparable form: CPU sets parsed; a pin covering `every` CPU counts as no pin."""
        def norm(text: str | None) -> frozenset[int] | None:
            cpus = frozenset(parse_libvirt_set(text)) if text else frozenset()
            return None if not cpus or (every and cpus >= every) else cpus
        vcpus = {v: s for v, text in self.vcpus if (s := norm(text)) is not None}
        numa = (self.numa[0] or "strict", frozenset(parse_libvirt_set(self.numa[1]))) if self.numa else None
        return vcpus, norm(self.emulator), numa


def read_xml_state(xml: str) -> PinState:
    """The pins of a domain XML, CPU sets as written."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise DomainConfigError(f"domain XML is not well formed: {e}") from None
    vcpus = tuple(sorted((int(p.get("vcpu", "0")), p.get("cpuset", ""))
                         for p in root.findall("./cputune/vcpupin")))
    emu = root.find("./cputune/emulatorpin")
    mem = root.find("./numatune/memory")
    numa = (mem.get("mode"), mem.get("nodeset", "")) if mem is not None else None
    return PinState(vcpus=vcpus, emulator=emu.get("cpuset") if emu is not None else None, numa=numa)


LIVE_AND_CONFIG = "live now and in the config (kept at the next start)"
_NEXT_START = "only its config changes; the pins take effect at its next start"


@dataclass(frozen=True)
class PinScopes:
    """Where a VM's pins are set: the steps' scopes, whether the running VM changes now, and what the
    plan says about it ("VM x is running: " + `says`)."""
    scopes: tuple[str, ...]
    live: bool
    says: str


def pin_scopes(cfg: DomainStore, vm: str, running: bool) -> PinScopes:
    """Where `vm`'s pins go (`running`: the snapshot's view, for a store without a live state):
    - libvirt, the VM active: live and in the persistent config; live only for a transient VM (no
      config); the config only when libvirt cannot show the live pins (the reason is said);
    - libvirt, the VM not running: the config, used from its next start;
    - a store that is the running state too (the demo's node file): one edit, live and config;
    - any other store: the config only (live pins need a libvirt connection).
    DomainConfigError when libvirt cannot say whether the VM runs."""
    if isinstance(cfg, LibvirtDomainConfig):
        if not cfg.is_active(vm):
            return PinScopes(("config",), False, _NEXT_START)
        if not _persistent(cfg, vm):
            return PinScopes(("live",), True, "its pins are set live now only: it is a transient VM (libvirt "
                                              "keeps no config for it), so they are gone when it stops")
        try:
            cfg.live_xml(vm)
        except DomainConfigError as e:
            return PinScopes(("config",), False, "its pins are set in the config only, from its next start: "
                                                 f"its live pins cannot be read ({e})")
        return PinScopes(("live", "config"), True, f"its pins are set {LIVE_AND_CONFIG}")
    if not running:
        return PinScopes(("config",), False, _NEXT_START)
    label = getattr(cfg, "label", "domain store")
    if getattr(cfg, "one_state", False):
        return PinScopes(("config",), True, f"its pins are set {LIVE_AND_CONFIG}: libvirt here serves one "
                                            f"definition (the {label}) as both the running VM and its config, "
                                            "so one edit sets both")
    return PinScopes(("config",), False, "its pins are set in the config only, from its next start: live "
                                         f"pins need a libvirt connection (this host's VMs are read from a "
                                         f"{label})")


def _persistent(cfg: LibvirtDomainConfig, vm: str) -> bool:
    import libvirt

    try:
        return bool(cfg.domain(vm).isPersistent())
    except libvirt.libvirtError as e:
        raise DomainConfigError(f"libvirt: {e.get_error_message()}") from None


def host_cpus(cfg: DomainStore) -> frozenset[int]:
    """Every CPU of libvirt's CPU maps: a live pin to all of them is no pin (libvirt keeps an unpinned
    vCPU's "pin" as the full map; offline CPUs in it are ignored by the kernel)."""
    return frozenset(range(cfg.cpu_count())) if isinstance(cfg, LibvirtDomainConfig) else frozenset()


def read_state(cfg: DomainStore, vm: str, scope: str) -> PinState:
    if scope == "live":
        if not isinstance(cfg, LibvirtDomainConfig):
            raise DomainConfigError("live pins need a libvirt connection")
        return read_xml_state(cfg.live_xml(vm))
    return read_xml_state(cfg.xml(vm))


def write_state(cfg: DomainStore, vm: str, scope: str, target: PinState, with_numa: bool) -> None:
    if scope == "live":
        if not isinstance(cfg, LibvirtDomainConfig):
            raise DomainConfigError("live pins need a libvirt connection")
        _write_live(cfg, vm, target, with_numa)
        return
    try:
        cfg.edit(vm, lambda xml: edit_pins(xml, target, with_numa))
    except ValueError as e:
        raise DomainConfigError(f"the config of {vm} cannot be edited: {e}") from None


def _write_live(cfg: LibvirtDomainConfig, vm: str, target: PinState, with_numa: bool) -> None:
    import libvirt

    dom = cfg.domain(vm)
    every = host_cpus(cfg)
    width = len(every)
    current = read_xml_state(cfg.live_xml(vm))
    now_v, now_e, now_n = current.sets(every)
    want_v, want_e, want_n = target.sets(every)
    nvcpus = max([v + 1 for v, _ in target.vcpus + current.vcpus] + [dom.vcpusFlags(_AFFECT_LIVE)])

    def cpumap(cpus: frozenset[int] | None) -> tuple[bool, ...]:
        cpus = cpus if cpus is not None else every
        beyond = sorted(c for c in cpus if c >= width)
        if beyond:
            raise StepError(f"CPU {format_cpulist(beyond)} is beyond this host's {width} CPUs")
        return tuple(i in cpus for i in range(width))

    def call(what: str, fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args, _AFFECT_LIVE)
        except libvirt.libvirtError as e:
            if e.get_error_code() not in _RETRY_CURRENT:
                raise DomainConfigError(f"libvirt refused to set {what} of the running VM {vm}: "
                                        f"{e.get_error_message()}") from None
            try:  # drivers without the LIVE flag (test driver): flags 0 is the running state
                fn(*args, 0)
            except libvirt.libvirtError as e2:
                raise DomainConfigError(f"libvirt refused to set {what} of the running VM {vm}: "
                                        f"{e2.get_error_message()}") from None

    for v in range(nvcpus):
        if now_v.get(v) != want_v.get(v):
            call(f"the pin of vCPU {v}", dom.pinVcpuFlags, v, cpumap(want_v.get(v)))
    if now_e != want_e:
        call("the emulator pin", dom.pinEmulator, cpumap(want_e))
    if with_numa and want_n is not None and now_n != want_n:  # want_n is None when target.numa is
        # the mode of a running VM's policy cannot change (the planner keeps it); the nodeset can
        call("the memory nodes", dom.setNumaParameters, {"numa_nodeset": format_cpulist(want_n[1])})


# -- edits of the XML --------------------------------------------------------------------------------

def edit_pins(xml: str, target: PinState, with_numa: bool) -> str:
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


# -- the step kind -----------------------------------------------------------------------------------

def describe(state: PinState, with_numa: bool) -> str:
    """One line: what the state pins where."""
    cpus = format_cpulist(c for _, s in state.vcpus for c in parse_libvirt_set(s))
    parts = [f"{len(state.vcpus)} vCPU pin(s) on CPU {cpus}" if state.vcpus else "vCPUs unpinned",
             f"emulator on {state.emulator}" if state.emulator else "emulator unpinned"]
    if with_numa:
        parts.append(f"memory {state.numa[0] or 'strict'} on node {state.numa[1]}" if state.numa
                     else "no memory policy")
    return ", ".join(parts)


def _online_text(host: ActionHost) -> str:
    return host.root.read("sys/devices/system/cpu/online") or "0-N"


def _check_op(op: Op) -> None:
    """Refuse a malformed operation (e.g. a damaged audit record): read loosely, a missing or odd
    `vcpus` would plan "unpin every vCPU" instead."""
    def bad(why: str) -> StepError:
        return StepError(f"malformed vm_pins operation: {why}")
    if not isinstance(op.get("vm"), str) or not op["vm"]:
        raise bad("'vm' is not a VM name")
    vcpus = op.get("vcpus", ...)
    if not isinstance(vcpus, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is int and p[0] >= 0 and isinstance(p[1], str)
            for p in vcpus):
        raise bad("'vcpus' is not a list of [vCPU, CPU set] pairs")
    if "emulator" not in op or not (op["emulator"] is None or isinstance(op["emulator"], str)):
        raise bad("'emulator' is missing or not a CPU set")
    numa = op.get("numa")
    if numa is not None and not (isinstance(numa, dict) and isinstance(numa.get("nodeset"), str)
                                 and (numa.get("mode") is None or isinstance(numa.get("mode"), str))):
        raise bad("'numa' is not {mode, nodeset}")


@step_kind("vm_pins")
def vm_pins_step(host: ActionHost, op: Op) -> Step | None:
    """See the module docstring for the operation."""
    scope = op.get("scope", "config")
    if scope not in ("live", "config"):
        raise StepError(f"unknown pin scope {scope!r}")
    _check_op(op)
    vm: str = op["vm"]
    cfg = host.domains
    if cfg is None:
        raise StepError("this host has no libvirt connection")
    target = PinState.from_op(op)
    with_numa = "numa" in op
    if with_numa and target.numa and (target.numa[0] or "strict") not in _NUMA_MODES:
        raise StepError(f"unknown memory mode {target.numa[0]!r}")
    try:
        every = host_cpus(cfg) if scope == "live" else frozenset()
        current = read_state(cfg, vm, scope)
    except DomainConfigError as e:
        raise StepError(str(e)) from None

    def same(state: PinState) -> bool:
        a, b = state.sets(every), target.sets(every)
        return a[:2] == b[:2] and (not with_numa or a[2] == b[2])

    if same(current):
        return None

    def apply() -> None:
        write_state(cfg, vm, scope, target, with_numa)

    def verify() -> str | None:
        now = read_state(cfg, vm, scope)
        if same(now):
            return None
        return f"VM {vm}'s {scope} pins read back as: {describe(now, with_numa)}"

    where = "live now (the running VM)" if scope == "live" else "in its persistent config"
    flag = f"--{scope}"
    cmds = [f"virsh vcpupin {vm} {v} {s} {flag}" for v, s in target.vcpus]
    cmds += [f"virsh vcpupin {vm} {v} {_online_text(host)} {flag}  # unpin"
             for v, _ in current.vcpus if v not in dict(target.vcpus)]
    if target.emulator or current.emulator:
        cmds.append(f"virsh emulatorpin {vm} {target.emulator or _online_text(host)} {flag}")
    if with_numa and target.numa:
        cmds.append(f"virsh numatune {vm} --mode {target.numa[0] or 'strict'} --nodeset {target.numa[1]} {flag}")
    elif with_numa and current.numa:
        cmds.append(f"virsh edit {vm}  # remove <numatune>")
    return Step(title=f"Pin VM {vm} {where}: {describe(target, with_numa)}",
                why=f"now: {describe(current, with_numa)}", commands=tuple(cmds), op=dict(op),
                inverse=current.op(vm, scope, with_numa), apply_fn=apply, verify_fn=verify)
