"""The `vm_pins` step kind: a VM's vCPU pins, emulator pin and memory policy, live or in its config.

An operation holds the VM's complete pin state for one scope, so its inverse (the state read before the
change) restores it exactly, pins that were absent included:

    {"kind": "vm_pins", "vm": NAME, "scope": "live"|"config",
     "vcpus": [[VCPU, CPUSET], ...],  # every pinned vCPU; a vCPU not listed has no pin
     "emulator": CPUSET | None,
     "numa": {"mode": MODE, "nodeset": NODESET} | None}  # key absent: the memory policy is left alone

CPU sets are kept as the hypervisor wrote them ("0-3,^2"), so an undo writes back the very same text.

Everything goes through the host's VM backend (console/vms/backend.py): `pin_scopes` says where a VM's
pins go, `pins`/`set_pins` read and write them live or in the VM's definition (libvirt's, through its
one domain-XML editor, is console/vms/libvirt_pins.py: apply + undo leave the stored text byte for byte).
"""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.libvirt_xml import parse_libvirt_set
from nodeconsole.console.vms.backend import LIVE_AND_CONFIG, PinScopes, VmBackend, VmConfigError, VmPins

_NUMA_MODES = {"strict": 0, "preferred": 1, "interleave": 2, "restrictive": 3}
__all__ = ["LIVE_AND_CONFIG", "PinState", "describe", "pin_scopes", "read_state", "write_state"]


class PinState(VmPins):
    """One scope's pins (console/vms/backend.py `VmPins`) with their operation's form."""

    @classmethod
    def of(cls, pins: VmPins) -> PinState:
        return cls(pins.vcpus, pins.emulator, pins.numa)

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


def pin_scopes(cfg: VmBackend, vm: str, running: bool) -> PinScopes:
    """Where `vm`'s pins go (`running`: the snapshot's view, for a backend without a live state).
    VmConfigError when the backend cannot say whether the VM runs."""
    return cfg.pin_scopes(vm, running)


def read_state(cfg: VmBackend, vm: str, scope: str) -> PinState:
    return PinState.of(cfg.pins(vm, live=scope == "live"))


def write_state(cfg: VmBackend, vm: str, scope: str, target: VmPins, with_numa: bool) -> None:
    cfg.set_pins(vm, target, live=scope == "live", memory_policy=with_numa)


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
    cfg = host.vms
    if cfg is None:
        raise StepError("this host has no libvirt connection")
    target = PinState.from_op(op)
    with_numa = "numa" in op
    if with_numa and target.numa and (target.numa[0] or "strict") not in _NUMA_MODES:
        raise StepError(f"unknown memory mode {target.numa[0]!r}")
    try:
        every = cfg.every_cpu() if scope == "live" else frozenset()
        current = read_state(cfg, vm, scope)
    except VmConfigError as e:
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
    try:
        cmds = cfg.pin_commands(vm, target, current, scope == "live", with_numa, _online_text(host))
    except VmConfigError as e:
        raise StepError(str(e)) from None
    return Step(title=f"Pin VM {vm} {where}: {describe(target, with_numa)}",
                why=f"now: {describe(current, with_numa)}", commands=cmds, op=dict(op),
                inverse=current.op(vm, scope, with_numa), apply_fn=apply, verify_fn=verify)
