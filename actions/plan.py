"""Plans are data: preconditions that pass or fail with a reason, and ordered steps.

A step is built from an *operation* — a small JSON-able dict naming a step kind and its parameters
(`{"kind": "pci_driver", "device": "0000:17:00.0", ...}`). Every step also carries the operation that
undoes it, computed from the host's state when the step was planned. The audit log stores those inverse
operations, and `build_step` turns them back into steps: that is how `undo` works long after the
snapshot a change was planned from is gone, and how a failed run rolls back.

Step kinds register themselves with `@step_kind(name)`; a kind's builder reads the host and returns
None when the host already is in the operation's target state (so an empty plan means "already done").
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodeconsole.actions.host import ActionHost

if TYPE_CHECKING:
    from nodeconsole.console.model import HostSnapshot

Op = dict[str, Any]  # JSON-able: it is stored in the audit log

# Modules that define step kinds; imported before an undo plan is rebuilt from the audit log.
KIND_MODULES = ("nodeconsole.actions.host_steps", "nodeconsole.actions.vm_hostdev", "nodeconsole.actions.mig_steps",
                "nodeconsole.actions.mig_persist",
                "nodeconsole.actions.vgpu", "nodeconsole.actions.pin_steps", "nodeconsole.actions.boot_steps",
                "nodeconsole.actions.live_steps", "nodeconsole.actions.nic_steps",
                "nodeconsole.actions.drain", "nodeconsole.actions.reset_steps",
                "nodeconsole.actions.shape_steps", "nodeconsole.actions.nccl.guest_files")


class RequestError(ValueError):
    """The request itself is wrong (malformed or unknown GPU, unknown VM): nothing was planned."""


class StepError(Exception):
    """A step cannot be built or applied; the message says why."""


@dataclass(frozen=True)
class Check:
    """One precondition: what was checked, whether it holds, why, and how to fix it when not."""
    title: str
    ok: bool
    reason: str
    fix: str = ""


def vms_known_check(snap: HostSnapshot, what: str) -> list[Check]:
    """Which VMs hold a device is known only while libvirt answers: a plan that must not take a device
    from a VM refuses when libvirt is down, naming it, instead of planning as if no VM held `what`."""
    if snap.sources.libvirt.ok:
        return []
    return [Check("libvirt answers", False,
                  f"libvirt {snap.sources.libvirt}: which VMs hold {what} cannot be known",
                  "start libvirtd, or fix the domain definition it cannot read (virsh list --all), "
                  "then plan again")]


def unreadable_vm_check(unreadable: dict[str, str]) -> list[Check]:
    """A VM whose definition cannot be read might hold the device: refuse, naming it."""
    if not unreadable:
        return []
    listing = "; ".join(f"{name}: {why}" for name, why in sorted(unreadable.items()))
    return [Check("every VM definition readable", False, f"cannot read {listing}",
                  "fix the VM definition (virsh dumpxml NAME), then plan again")]


@dataclass(eq=False)
class Step:
    """One change. `commands` are the equivalent shell commands, for display only: nothing ever runs
    them through a shell. `apply` changes the host; `verify` re-reads it and returns None when the
    change is there, else what is wrong; `undo` applies `inverse` (None: nothing to undo). `apply` may
    complete `inverse` in place with what only the change itself shows (a digest of what it left): the
    runner records the completed inverses with the result."""
    title: str
    why: str
    commands: tuple[str, ...]
    op: Op
    inverse: Op | None
    apply_fn: Callable[[], None]
    verify_fn: Callable[[], str | None]
    detail: str = ""  # extra text shown with the step, e.g. the content of a file it writes
    host: ActionHost | None = None  # the host the step was built for (set by build_step)
    undo_note: str = ""  # what undoing this step cannot restore exactly (said in the audit and result)
    needs_reboot: bool = False  # takes effect only at the next boot (kernel command line, initramfs)
    outcome: str = ""  # set by apply/verify: what the change reached short of its aim (e.g. fewer
    # hugepages than asked while a boot-time reservation follows); the runner reports it

    def apply(self) -> None:
        self.apply_fn()

    def verify(self) -> str | None:
        return self.verify_fn()

    def undo(self) -> str | None:
        """Put back what this step changed (also after a partial apply). None when the host is back
        in its previous state, else why not. Safe to call when the step never ran."""
        if self.inverse is None:
            return None
        if self.host is None:
            raise StepError(f"step {self.title!r} was not built for a host (build_step sets it)")
        back = build_step(self.host, self.inverse)
        if back is None:
            return None  # the host already is as it was
        back.apply()
        return back.verify()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"title": self.title, "why": self.why, "commands": list(self.commands),
                               "detail": self.detail, "op": self.op, "inverse": self.inverse}
        if self.needs_reboot:
            out["needs_reboot"] = True
        return out


@dataclass(eq=False)
class Plan:
    """What an action will do. Refused when a check fails; empty (already done) when every check
    passes and no step is left."""
    action: str  # "passthrough", "release", "undo"
    title: str
    request: dict[str, Any]
    checks: list[Check] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    confirm_text: str | None = None  # what the admin must type to confirm (see needs_typed_confirmation)
    undoes: str | None = None  # for an undo plan: the audit id it rolls back
    rebuild: Callable[[], Plan] | None = None  # re-plan from a fresh read (stale-plan check)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def empty(self) -> bool:
        return self.ok and not self.steps

    @property
    def refusal(self) -> str:
        """Why the plan cannot run: the failed checks, one per line ('' when it can)."""
        return "\n".join(f"{c.title}: {c.reason}" for c in self.checks if not c.ok)

    @property
    def needs_reboot(self) -> bool:
        """Some step takes effect only at the next boot."""
        return any(s.needs_reboot for s in self.steps)

    def ops(self) -> list[Op]:
        return [s.op for s in self.steps]

    def lines(self) -> list[str]:
        """The plan as display lines (the CLI prints them; the TUI modal shows them)."""
        out = [self.title]
        if self.checks:
            out.append("Preconditions:")
            for c in self.checks:
                out.append(f"  [{'ok' if c.ok else 'FAILED'}] {c.title}: {c.reason}")
                if not c.ok and c.fix:
                    out += [f"      fix: {line}" if i == 0 else f"           {line}"
                            for i, line in enumerate(c.fix.splitlines())]
        if not self.ok:
            out.append("Refused: nothing will be changed.")
        elif not self.steps:
            out.append("Nothing to do: the host is already in the requested state.")
        else:
            out.append(f"Steps ({len(self.steps)}):")
            for i, s in enumerate(self.steps, 1):
                out.append(f"  {i}. {s.title}")
                out.append(f"     why: {s.why}")
                out += [f"     $ {c}" for c in s.commands]
                out += [f"     | {line}" for line in s.detail.splitlines()]
                if s.needs_reboot:
                    out.append("     takes effect at the next boot")
        if self.notes:
            out.append("Notes:")
            out += [f"  - {n}" for n in self.notes]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "title": self.title, "request": self.request,
                "checks": [c.__dict__ for c in self.checks], "steps": [s.to_dict() for s in self.steps],
                "notes": self.notes, "confirm_text": self.confirm_text, "undoes": self.undoes,
                "needs_reboot": self.needs_reboot}


def needs_typed_confirmation(plan: Plan) -> str | None:
    """The text (a GPU's PCI address) the admin must type to confirm, or None when a yes/no is enough:
    a plan that touches a GPU some VM's config uses asks for the address, not a keypress."""
    return plan.confirm_text if plan.ok and plan.steps else None


# -- step kinds ---------------------------------------------------------------------------------------

StepBuilder = Callable[["ActionHost", Op], "Step | None"]
KINDS: dict[str, StepBuilder] = {}


def step_kind(name: str) -> Callable[[StepBuilder], StepBuilder]:
    """Register the builder of a step kind: `builder(host, op) -> Step | None`."""
    def wrap(fn: StepBuilder) -> StepBuilder:
        KINDS[name] = fn
        return fn
    return wrap


def load_kinds() -> None:
    for mod in KIND_MODULES:
        importlib.import_module(mod)


def build_step(host: ActionHost, op: Op) -> Step | None:
    """The step that brings the host to `op`'s target state; None when it is there already.
    Raises StepError when the operation cannot be built (unknown kind, device gone)."""
    kind = op.get("kind") if isinstance(op, dict) else None
    if not isinstance(kind, str):
        raise StepError(f"malformed operation (no step kind): {str(op)[:80]}")
    if kind not in KINDS:
        load_kinds()
    if kind not in KINDS:
        raise StepError(f"unknown step kind {kind!r}")
    try:
        step = KINDS[kind](host, op)
    except StepError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        # a damaged or hand-edited operation (from the audit log): refuse, never plan something else
        raise StepError(f"malformed {kind} operation ({type(e).__name__}: {e})") from None
    if step is not None:
        step.host = host
    return step
