"""Run a plan: confirm, lock, apply step by step with verification, roll back on failure, audit.

The runner is headless and synchronous: the CLI calls it directly; the TUI calls it from a thread worker
(the `confirm` and `progress` callbacks then run in that worker thread, so a UI posts from them).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nodeconsole.actions.audit import (
    APPLIED,
    AUDIT_NAME,
    FAILED,
    FAILED_PARTIAL,
    IN_PROGRESS,
    AuditLog,
    new_id,
    now_iso,
    who,
)
from nodeconsole.actions.host_seams import DomainStore, KernelWriter
from nodeconsole.actions.lock import LOCK_NAME, HostLock, LockHeld
from nodeconsole.actions.plan import Check, Plan, StepError, build_step
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams

if TYPE_CHECKING:
    from nodeconsole.console.model import HostSnapshot

# results of a run
DONE = "applied"
NOTHING = "nothing to do"
REFUSED = "refused"
CANCELLED = "cancelled"
FAILED_RESULT = "failed"
DEFAULT_STATE = "/var/log/nodeconsole"  # audit log and lock of a real host


class Commands:
    """Runs host programs (driverctl, modprobe) as argv lists, never through a shell."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(self, argv: list[str]) -> tuple[int, str]:
        """(exit status, combined output)."""
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120, shell=False)
        except FileNotFoundError as e:
            return 127, str(e)
        except subprocess.TimeoutExpired:
            return 124, f"{argv[0]} did not finish in 120 s"
        return out.returncode, (out.stdout + out.stderr).strip()


class NoCommands(Commands):
    """The demo host has no programs of its own: running the machine's driverctl would change the
    real host, so persistence on the demo goes through files under its root."""

    def which(self, name: str) -> str | None:
        return None

    def run(self, argv: list[str]) -> tuple[int, str]:
        return 127, f"{argv[0]}: not available on this host"


class DemoCommands(NoCommands):
    """The demo host's programs: a driverctl that keeps its saved overrides under the demo root
    (etc/driverctl.d/pci-ADDR, as driverctl does under /etc), so persistence on the demo is per
    device, exactly like a real host with driverctl. Nothing of the machine's own is run."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def which(self, name: str) -> str | None:
        return "driverctl (demo)" if name == "driverctl" else None

    def run(self, argv: list[str]) -> tuple[int, str]:
        from nodeconsole.console.pciaddr import parse_pci_address

        if len(argv) < 3 or argv[0] != "driverctl" or argv[1] not in ("set-override", "unset-override"):
            return 127, f"{argv[0]}: not available on the demo host"
        try:
            address = parse_pci_address(argv[2])
        except ValueError as e:
            return 2, f"driverctl: {e}"
        conf = self.root.p(f"etc/driverctl.d/pci-{address}")
        if argv[1] == "set-override":
            if len(argv) < 4:
                return 2, "driverctl: set-override needs a driver"
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(argv[3] + "\n")
        elif conf.exists():
            conf.unlink()
            for d in (conf.parent, conf.parent.parent):  # leave the demo root as it was generated
                try:
                    d.rmdir()
                except OSError:
                    break
        else:
            return 1, f"driverctl: no override for {address}"
        return 0, ""


@dataclass
class ActionHost:
    """Everything an action reads and writes a host through. `from_seams` builds the real or demo one;
    tests construct it with their own kernel, domain config, commands and root check."""
    seams: Seams
    kernel: KernelWriter  # console.demo.kernel.Kernel (SimulatedKernel on the demo)
    domains: DomainStore | None  # actions.libvirt_edit.DomainConfig, None when the host has no libvirt
    state_dir: Path
    commands: Commands = field(default_factory=Commands)
    is_root: Callable[[], bool] = lambda: os.geteuid() == 0
    on_changed: Callable[[], None] | None = None  # e.g. the console's Collector.invalidate
    read_only_reason: str = ""  # non-empty: this host cannot be changed (e.g. a captured tree)

    @classmethod
    def from_seams(cls, seams: Seams, on_changed: Callable[[], None] | None = None) -> ActionHost:
        """The real host (needs root), a captured tree (read-only) or the demo host (simulated kernel,
        node-file libvirt config, no root needed, audit log and lock in its state directory)."""
        from nodeconsole.actions.libvirt_edit import domain_config_for

        if seams.demo_dir is not None:  # the demo host (Seams.is_demo)
            from nodeconsole.console.demo.kernel import SimulatedKernel

            return cls(seams=seams, kernel=SimulatedKernel(seams.root), domains=domain_config_for(seams),
                       state_dir=Path(seams.state_dir or seams.demo_dir), commands=DemoCommands(seams.root),
                       is_root=lambda: True, on_changed=on_changed)
        from nodeconsole.console.demo.kernel import Kernel

        captured = os.path.abspath(seams.root.path) != "/"
        state = seams.state_dir or (seams.root.p("var/log/nodeconsole") if captured else Path(DEFAULT_STATE))
        return cls(seams=seams, kernel=Kernel(seams.root), domains=domain_config_for(seams),
                   state_dir=Path(state), on_changed=on_changed,
                   read_only_reason="a captured tree (--root) is read-only: changes need the real host "
                                    "or --demo" if captured else "")

    @property
    def root(self) -> Root:
        return self.seams.root

    @property
    def audit(self) -> AuditLog:
        return AuditLog(self.state_dir / AUDIT_NAME)

    def lock(self) -> HostLock:
        return HostLock(self.state_dir / LOCK_NAME)

    def snapshot(self) -> HostSnapshot:
        """A fresh read of the host. A new collector every time: plans must not see cached facts, and
        libvirt's test driver (the demo) only re-reads its node file when a connection is opened."""
        from nodeconsole.console.collector import Collector

        collector = Collector(self.seams)
        try:
            return collector.collect()
        finally:
            # Let NVML go: a process holding it keeps /dev/nvidia* open, which blocks an unbind.
            collector.close()

    def hostname(self) -> str:
        return self.root.read("proc/sys/kernel/hostname") or ""

    def changed(self) -> None:
        if self.on_changed is not None:
            self.on_changed()


@dataclass(frozen=True)
class Progress:
    """One progress event: step `index` (1-based) of `total`; phase is "apply", "verify", "ok",
    "failed", "undo", "undone", "undo-failed"."""
    index: int
    total: int
    title: str
    phase: str
    message: str = ""


@dataclass
class RunResult:
    status: str  # DONE, NOTHING, REFUSED, CANCELLED, FAILED_RESULT
    message: str
    record_id: str | None = None
    failed_step: str | None = None
    error: str | None = None
    undone: list[str] = field(default_factory=list)
    undo_failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in (DONE, NOTHING)


Confirm = Callable[[Plan], bool]
ProgressFn = Callable[[Progress], None]


class Runner:
    """`Runner(host).run(plan, confirm, progress)`; see the module docstring."""

    def __init__(self, host: ActionHost) -> None:
        self.host = host

    def preflight(self, plan: Plan) -> str:
        """Why `run` would refuse this plan right now ('' when it would go ahead), without changing
        anything: lets a UI grey out its Apply button with the reason."""
        if not plan.ok:
            return plan.refusal
        if not plan.steps:
            return "nothing to do: the host is already in the requested state"
        if self.host.read_only_reason:
            return self.host.read_only_reason
        if not self.host.is_root():
            return "changing the host needs root: run nodeconsole as root (sudo)"
        lock = self.host.lock()
        try:
            lock.acquire()
        except LockHeld as e:
            return str(e)
        except OSError as e:
            return f"cannot take the host lock {lock.path}: {_err(e)}"
        lock.release()
        return ""

    def run(self, plan: Plan, confirm: Confirm | None = None,
            progress: ProgressFn | None = None) -> RunResult:
        """Apply `plan`. `confirm(plan)` is asked once before anything changes (None: no question);
        `progress(event)` hears about every phase of every step."""
        def emit(event: Progress) -> None:
            # Progress is for display: a broken pipe or a closed console must never stop a change
            # half-way with nothing rolled back.
            if progress is None:
                return
            try:
                progress(event)
            except Exception:
                pass
        if not plan.ok:
            return RunResult(REFUSED, plan.refusal)
        if not plan.steps:
            return RunResult(NOTHING, "nothing to do: the host is already in the requested state")
        if self.host.read_only_reason:
            return RunResult(REFUSED, self.host.read_only_reason)
        if not self.host.is_root():
            return RunResult(REFUSED, "changing the host needs root: run nodeconsole as root (sudo); "
                                      "nothing was changed")
        if confirm is not None and not confirm(plan):
            return RunResult(CANCELLED, "cancelled: nothing was changed")
        lock = self.host.lock()
        try:
            lock.acquire()
        except LockHeld as e:
            return RunResult(REFUSED, f"{e}; nothing was changed")
        except OSError as e:
            return RunResult(REFUSED, f"cannot take the host lock {lock.path}: {_err(e)}; nothing was changed")
        try:
            stale = self._stale(plan)
            if stale:
                return RunResult(REFUSED, stale)
            return self._apply(plan, emit)
        finally:
            lock.release()
            self.host.changed()

    def _stale(self, plan: Plan) -> str:
        """Re-plan under the lock: another console may have changed the host since the plan was made."""
        if plan.rebuild is None:
            return ""
        try:
            fresh = plan.rebuild()
        except Exception as e:
            return f"the host changed since the plan was made ({e}); nothing was changed"
        if not fresh.ok:
            return f"the host changed since the plan was made: {fresh.refusal}; nothing was changed"
        if fresh.ops() != plan.ops():
            return "the host changed since the plan was made; review the new plan. Nothing was changed"
        return ""

    def _apply(self, plan: Plan, emit: Callable[[Progress], None]) -> RunResult:
        audit = self.host.audit
        rid = new_id()
        base = {
            "id": rid, "who": who(), "when": now_iso(), "action": plan.action, "title": plan.title,
            "request": plan.request, "host": self.host.hostname(),
            "steps": [{"title": s.title, "why": s.why, "commands": list(s.commands), "op": s.op,
                       "inverse": s.inverse} for s in plan.steps],
            "undo": [s.inverse for s in reversed(plan.steps) if s.inverse is not None],
            "undo_command": f"nodeconsole undo {rid} --apply",
            "undoes": plan.undoes, "result": IN_PROGRESS,
        }
        try:
            audit.append(base)
        except OSError as e:  # no record, no change
            return RunResult(REFUSED, f"cannot write the audit log {audit.path}: {_err(e)}; nothing was changed")
        total = len(plan.steps)
        done: list[int] = []
        failure: tuple[int, str] | None = None
        for i, step in enumerate(plan.steps):
            emit(Progress(i + 1, total, step.title, "apply"))
            try:
                step.apply()
                emit(Progress(i + 1, total, step.title, "verify"))
                err = step.verify()
            except Exception as e:
                err = _err(e)
            if err:
                emit(Progress(i + 1, total, step.title, "failed", err))
                failure = (i, err)
                break
            done.append(i)
            emit(Progress(i + 1, total, step.title, "ok"))
        if failure is None:
            audit.append({"id": rid, "result": APPLIED, "finished": now_iso()})
            return RunResult(DONE, f"applied {total} step(s); undo with `nodeconsole undo {rid}`",
                             record_id=rid)
        # Roll back: the failed step too (it may be half-applied), then the completed ones, newest first.
        k, err = failure
        undone, undo_failed, remaining = [], [], []
        for j in reversed(done + [k]):
            step = plan.steps[j]
            emit(Progress(j + 1, total, step.title, "undo"))
            try:
                uerr = step.undo()
            except Exception as e:
                uerr = _err(e)
            if uerr:
                undo_failed.append(f"{step.title}: {uerr}")
                if step.inverse is not None:
                    remaining.append(step.inverse)
                emit(Progress(j + 1, total, step.title, "undo-failed", uerr))
            else:
                undone.append(step.title)
                emit(Progress(j + 1, total, step.title, "undone"))
        result = FAILED if not undo_failed else FAILED_PARTIAL
        audit.append({"id": rid, "result": result, "finished": now_iso(),
                      "failed": {"step": k + 1, "title": plan.steps[k].title, "error": err},
                      "undone": undone, "undo_failed": undo_failed, "undo": remaining})
        msg = f"step {k + 1} ({plan.steps[k].title}) failed: {err}. "
        if undo_failed:
            msg += ("Undoing did not fully succeed: " + "; ".join(undo_failed)
                    + f". See `nodeconsole log`; retry with `nodeconsole undo {rid}`")
        else:
            msg += "Every change was undone; the host is as it was."
        return RunResult(FAILED_RESULT, msg, record_id=rid, failed_step=plan.steps[k].title, error=err,
                         undone=undone, undo_failed=undo_failed)


def _err(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename:
        return f"{e.strerror or e} ({e.filename})"
    return str(e) or type(e).__name__


# -- undo ---------------------------------------------------------------------------------------------

def plan_undo(host: ActionHost, record_id: str | None = None) -> Plan:
    """The plan that rolls back audit record `record_id` (the latest undoable change when None).
    Raises RequestError when there is no such record."""
    from nodeconsole.actions.plan import RequestError

    log = host.audit
    try:
        record = log.latest_undoable() if record_id is None else log.find(record_id)
    except OSError as e:
        raise RequestError(f"cannot read the audit log {log.path}: {_err(e)}") from None
    if record_id is None:
        if record is None:
            raise RequestError(f"nothing to undo: no recorded change in {log.path}")
    else:
        if record is None:
            raise RequestError(f"no change with id {record_id!r} in {log.path} (see `nodeconsole log`)")
    rid = record["id"]
    plan = Plan(action="undo", title=f"Undo {rid}: {record.get('title', record.get('action', ''))}",
                request={"id": rid}, undoes=rid, rebuild=lambda: plan_undo(host, rid))
    if record.get("undone_by"):
        plan.checks.append(Check("not undone yet", False, f"{rid} was already undone by {record['undone_by']}"))
        return plan
    if record.get("result") == FAILED:
        plan.notes.append(f"{rid} failed and was rolled back when it ran: there is nothing left of it")
    for op in record.get("undo") or []:
        try:
            step = build_step(host, op)
        except StepError as e:
            plan.checks.append(Check("undo step can be built", False, str(e)))
            continue
        if step is not None:
            plan.steps.append(step)
    return plan
