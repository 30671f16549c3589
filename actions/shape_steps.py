"""The `vm_shape` and `vm_definition` step kinds: a shut-off VM's size and memory layout, and the exact
put-back of its whole definition.

    {"kind": "vm_shape", "vm": NAME, "shape": VmShape.to_dict()}
        the definition's vCPUs, memory, hugepage backing, memory policy, guest NUMA cells and threads per
        core become the shape (console/vms/shape.py); nothing else of it changes. A running VM is refused,
        unless "next_start": true says the change is for its persistent definition (the doctor's vm-memory
        fix: the VM takes it at its next start).
    {"kind": "vm_definition", "vm": NAME, "token": SAVED, "expect": SHA256 | None}
        the definition becomes exactly SAVED (the backend's `save` token: libvirt, the inactive XML) --
        only while it still is as the change left it (its sha256 `expect`, checked when the step runs,
        after an undo's earlier steps took back their own edits), so an undo never throws away what
        someone changed since: it fails, and the runner puts those earlier steps back.

A vm_shape's inverse is a vm_definition: the definition saved just before the edit, and the digest of
the definition the edit left, which the step puts into its inverse once applied (the runner records the
completed inverse with the result: libvirt rewrites a definition it is given, so that digest is known
only after the edit). Everything goes through the host's VM backend (console/vms/backend.py).
"""
from __future__ import annotations

import hashlib
import re

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.vms.backend import VmBackend, VmConfigError, VmShape

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def digest(token: str) -> str:
    """The sha256 of a saved definition (what a vm_definition's `expect` holds)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _backend(host: ActionHost) -> VmBackend:
    if host.vms is None:
        raise StepError("this host has no libvirt connection")
    return host.vms


def _vm(op: Op, kind: str) -> str:
    vm = op.get("vm")
    if not isinstance(vm, str) or not vm:
        raise StepError(f"malformed {kind} operation: 'vm' is not a VM name")
    return vm


def pins_after_shape(pins_step: Step, shape: VmShape) -> Step:
    """A config-scope `vm_pins` step planned from the definition before a `vm_shape` that runs first: its
    inverse then names only the vCPUs the shape keeps (the shape drops the pins of the others), so the
    pins' undo gives back the definition exactly as the shape left it and the shape's undo can follow.
    Plan such a pins step without "numa": the shape owns the memory policy."""
    inverse = pins_step.inverse
    if inverse is not None and inverse.get("kind") == "vm_pins":
        inverse["vcpus"] = [p for p in inverse.get("vcpus") or [] if p[0] < shape.vcpus]
    return pins_step


@step_kind("vm_shape")
def vm_shape_step(host: ActionHost, op: Op) -> Step | None:
    """See the module docstring. None when the definition already has the shape."""
    vm = _vm(op, "vm_shape")
    try:
        target = VmShape.from_dict(op["shape"])
    except ValueError as e:
        raise StepError(f"malformed vm_shape operation: {e}") from None
    cfg = _backend(host)
    try:
        now = cfg.shape(vm)
        if now.key() == target.key():
            return None
        state = cfg.run_state(vm)
        saved = cfg.save(vm)
        commands = cfg.shape_commands(vm, target)
    except VmConfigError as e:
        raise StepError(str(e)) from None
    later = state != "shut off" and op.get("next_start") is True  # the persistent definition only
    if state != "shut off" and not later:
        raise StepError(f"VM {vm} is {state}: its size and memory layout change only while it is shut off "
                        f"({host.command_hint('shutdown', vm)})")
    inverse: Op = {"kind": "vm_definition", "vm": vm, "token": saved, "expect": None}

    def apply() -> None:
        inverse["token"] = cfg.save(vm)  # the definition as it is now, not as it was when planned
        cfg.set_shape(vm, target)
        inverse["expect"] = digest(cfg.save(vm))

    def verify() -> str | None:
        got = cfg.shape(vm)
        return None if got.key() == target.key() else f"VM {vm}'s definition reads back as: {got.describe()}"

    return Step(title=f"Shape VM {vm}: {target.describe()}" + (f" (its definition: the {state} VM takes it at its "
                                                               "next start)" if later else ""),
                why=f"now: {now.describe()}",
                commands=commands, op=dict(op), inverse=inverse, apply_fn=apply,
                verify_fn=verify)


def _checked_token(cfg: VmBackend, vm: str, op: Op) -> tuple[str, str | None]:
    """The saved definition and the expected digest of the current one, checked: the audit log is a file
    anyone with access could have edited, so the backend must find the token a definition of `vm`."""
    token, expect = op.get("token"), op.get("expect")
    if not (expect is None or (isinstance(expect, str) and _DIGEST.match(expect))):
        raise StepError("malformed vm_definition operation: 'expect' is not a sha256 digest")
    if not isinstance(token, str):
        raise StepError("malformed vm_definition operation: the saved definition must be a domain XML text")
    try:
        return cfg.check_saved(vm, token), expect
    except VmConfigError as e:
        raise StepError(f"malformed vm_definition operation: {e}") from None


@step_kind("vm_definition")
def vm_definition_step(host: ActionHost, op: Op) -> Step | None:
    """See the module docstring. None when the definition already is the saved one. The digest is checked
    when the step runs: in an undo the steps before it (pins, devices) first take back their own edits."""
    vm = _vm(op, "vm_definition")
    cfg = _backend(host)
    try:
        token, expect = _checked_token(cfg, vm, op)
        current = cfg.save(vm)
    except VmConfigError as e:
        raise StepError(str(e)) from None
    if current == token:
        return None
    if expect is None:
        raise StepError(f"VM {vm}'s definition as the change left it is unknown (the change did not record "
                        "its result): restoring the saved one could throw away other changes; nothing was "
                        f"changed. Compare by hand ({host.command_hint('show', vm)})")
    inverse: Op = {"kind": "vm_definition", "vm": vm, "token": current, "expect": digest(token)}

    def apply() -> None:
        now = cfg.save(vm)
        inverse["token"] = now  # a redo (or this step's own rollback) puts back the definition as it is now
        if now == token:
            return
        if digest(now) != expect:
            raise StepError(f"VM {vm}'s definition was changed since (sha256 {digest(now)[:12]}…, the change "
                            f"left {expect[:12]}…): restoring the saved one would throw those changes away. "
                            f"See {host.command_hint('show', vm)}")
        cfg.restore(vm, token)

    def verify() -> str | None:
        return None if cfg.save(vm) == token else f"VM {vm}'s definition reads back different from the saved one"

    return Step(title=f"Restore VM {vm}'s definition exactly as it was saved",
                why="its definition goes back to the bytes saved before the change, if it still is as the "
                    "change left it (checked when this step runs)",
                commands=(host.command_hint("restore", vm),),
                op=dict(op), inverse=inverse, apply_fn=apply, verify_fn=verify, detail=token)
