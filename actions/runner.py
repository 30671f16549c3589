"""Run a plan: confirm, lock, apply step by step with verification, roll back on failure, audit.

The runner is headless and synchronous: the CLI calls it directly; the TUI calls it from a thread worker
(the `confirm` and `progress` callbacks then run in that worker thread, so a UI posts from them).
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from nodeconsole.actions.audit import (
    MIN_FREE_BYTES,
    new_id,
    now_iso,
    who,
)
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.interrupt import (
    FaultSwitch,
    Interrupted,
    hold,
    interruptible,
    shielded,
    signal_name,
    take_pending,
)
from nodeconsole.actions.lock import HostLock, LockHeld
from nodeconsole.actions.plan import Op, Plan, Step, StepError
from nodeconsole.actions.progress import (
    Progress,
    ProgressFn,
    RunResult,
)
from nodeconsole.console.audit_log import Status

Confirm = Callable[[Plan], bool]


class Runner:
    """`Runner(host).run(plan, confirm, progress)`; see the module docstring."""

    def __init__(self, host: ActionHost) -> None:
        self.host = host

    def refusal(self, plan: Plan) -> str:
        """Why `run` refuses this plan before asking or locking anything ('' when it would go on): a
        refused plan, a read-only host, no root. (An empty plan is not refused: `run` settles it.)"""
        if not plan.ok:
            return plan.refusal
        if self.host.read_only_reason:
            return self.host.read_only_reason
        if not self.host.is_root():
            return "changing the host needs root: run nodeconsole as root (sudo); nothing was changed"
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
        if plan.ok and not plan.steps:
            return self._settle(plan)
        if why := self.refusal(plan):
            return RunResult(Status.REFUSED, why)
        if confirm is not None and not confirm(plan):
            return RunResult(Status.CANCELLED, "cancelled: nothing was changed")
        lock = self.host.lock()
        try:
            lock.acquire({"user": who()["user"], "when": now_iso(), "action": plan.action})
        except LockHeld as e:
            return RunResult(Status.REFUSED, f"{e}; nothing was changed")
        except OSError as e:
            return RunResult(Status.REFUSED, f"cannot take the host lock {lock.path}: {_err(e)}; nothing was changed")
        warnings = [stale_lock_message(lock.stale)] if lock.stale else []
        try:
            stale = self._stale(plan)
            result = RunResult(Status.REFUSED, stale) if stale else self._apply(plan, emit, lock)
            result.warnings[:0] = warnings
            return result
        finally:
            lock.release()
            self.host.changed()

    def _settle(self, plan: Plan) -> RunResult:
        """An undo with nothing left to do (the host already is as the record says it was before, e.g.
        a run killed before its first write) is recorded as done, so a plain `undo` moves on to the next
        older change instead of choosing this one forever."""
        nothing = RunResult(Status.NOTHING, "nothing to do: the host is already in the requested state")
        if not plan.undoes or self.refusal(plan):
            return nothing
        lock = self.host.lock()
        try:
            lock.acquire({"user": who()["user"], "when": now_iso(), "action": plan.action})
        except (LockHeld, OSError):
            return nothing
        try:
            if self._stale(plan):
                return nothing
            rid = new_id()
            self.host.audit.append({"id": rid, "who": who(), "when": now_iso(), "action": plan.action,
                                    "title": plan.title, "request": plan.request, "steps": [], "undo": [],
                                    "undoes": plan.undoes, "result": Status.APPLIED, "finished": now_iso()})
            nothing.record_id = rid
            nothing.message += f"; {plan.undoes} is marked as undone"
        except OSError:
            pass
        finally:
            lock.release()
        return nothing

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

    def _apply(self, plan: Plan, emit: Callable[[Progress], None], lock: HostLock) -> RunResult:
        audit = self.host.audit
        try:
            fault = FaultSwitch.from_env()
        except StepError as e:
            return RunResult(Status.REFUSED, f"{e}; nothing was changed")
        rid = new_id()
        base = {
            "id": rid, "who": who(), "when": now_iso(), "action": plan.action, "title": plan.title,
            "request": plan.request, "host": self.host.hostname(),
            "steps": [_step_record(s) for s in plan.steps],
            "undo": [s.inverse for s in reversed(plan.steps) if s.inverse is not None],
            "undo_command": f"nodeconsole undo {rid} --apply",
            "undoes": plan.undoes, "result": Status.IN_PROGRESS,
        }
        base.update(self._boot_fields(plan))
        # a step's apply may complete its inverse (plan.py `Step`): the result's record then says so
        recorded_undo: list[Op] = copy.deepcopy([s.inverse for s in reversed(plan.steps) if s.inverse is not None])
        with interruptible():
            with shielded():  # a signal now waits until the record is written, then stops the run
                try:
                    audit.append(base, min_free=MIN_FREE_BYTES)  # whole and synced, or refused
                except OSError as e:  # no record, no change
                    return RunResult(Status.REFUSED, f"cannot write the audit log {audit.path}: {_err(e)}; "
                                              "nothing was changed")
                lock.note(change=rid)
            done, failure, signame = self._steps(plan, emit, fault)
            with shielded():  # from here on a signal must not cut the record or the rollback short
                if failure is None:
                    return self._applied(plan, rid, recorded_undo)
                return self._rollback(plan, rid, done, failure, signame, emit)

    def _boot_fields(self, plan: Plan) -> dict[str, Any]:
        """What a change that takes effect at the next boot adds to its record: `needs_reboot`, the
        `boot_id` of the boot it was applied in (a later read that differs means the host rebooted since)
        and the doctor checks it fixes (`fixes`, from the request), so the doctor can say "pending reboot"
        and, after the reboot, whether it took effect."""
        out: dict[str, Any] = {}
        fixes = plan.request.get("fixes") if isinstance(plan.request, dict) else None
        if isinstance(fixes, list) and all(isinstance(f, str) for f in fixes):
            out["fixes"] = list(fixes)
        if plan.needs_reboot:
            out["needs_reboot"] = True
            out["boot_id"] = self.host.boot_id()
        return out

    def _applied(self, plan: Plan, rid: str, recorded_undo: list[Op]) -> RunResult:
        """Record a run whose every step applied and verified; say what waits for a reboot and what a
        step reached short of its aim (its `outcome`)."""
        outcomes = [s.outcome for s in plan.steps if s.outcome]
        record: dict[str, Any] = {"id": rid, "result": Status.APPLIED, "finished": now_iso()}
        undo = [s.inverse for s in reversed(plan.steps) if s.inverse is not None]
        if undo != recorded_undo:  # a step completed its inverse while applying (plan.py `Step`)
            record["undo"] = undo
        if outcomes:
            record["notes"] = outcomes
        try:
            self.host.audit.append(record)
        except OSError as e:  # the host keeps the change: its in-progress record describes it and its undo
            outcomes = [*outcomes, f"change {rid} was applied, but its final audit record could not be written "
                                   f"({_err(e)}): `nodeconsole log` lists it as in-progress"]
        msg = f"applied {len(plan.steps)} step(s)"
        if plan.needs_reboot:
            which = ", ".join(str(i) for i, s in enumerate(plan.steps, 1) if s.needs_reboot)
            msg += f"; reboot once for step(s) {which} to take effect (pending reboot)"
        return RunResult(Status.APPLIED, f"{msg}; undo with `nodeconsole undo {rid} --apply`", record_id=rid,
                         warnings=outcomes)

    def _steps(self, plan: Plan, emit: Callable[[Progress], None],
               fault: FaultSwitch) -> tuple[list[int], tuple[int, str] | None, str | None]:
        """Apply and verify each step: (completed indexes, (failed index, error) or None, the signal
        that interrupted the run or None). A signal is a failure of the step it arrived in."""
        total, i = len(plan.steps), 0
        done: list[int] = []
        try:
            if name := take_pending():
                raise Interrupted(name)
            for i, step in enumerate(plan.steps):
                emit(Progress(i + 1, total, step.title, "apply"))
                try:
                    fault.before_apply(i + 1, step.op.get("kind"))
                    step.apply()
                    emit(Progress(i + 1, total, step.title, "verify"))
                    err = fault.after_apply(i + 1, step.op.get("kind")) or step.verify()
                except Exception as e:
                    err = _err(e)
                if err:
                    hold()
                    emit(Progress(i + 1, total, step.title, "failed", err))
                    return done, (i, err), None
                done.append(i)
                emit(Progress(i + 1, total, step.title, "ok"))
            hold()
        except (Interrupted, KeyboardInterrupt) as e:
            name = signal_name(e)
            with shielded():
                emit(Progress(i + 1, total, plan.steps[i].title, "failed", f"interrupted by {name}"))
            return done, (i, f"interrupted by {name}"), name
        return done, None, None

    def _rollback(self, plan: Plan, rid: str, done: list[int], failure: tuple[int, str],
                  signame: str | None, emit: Callable[[Progress], None]) -> RunResult:
        """Undo the failed step too (it may be half-applied), then the completed ones, newest first."""
        k, err = failure
        total = len(plan.steps)
        undone: list[str] = []
        undo_failed: list[str] = []
        notes: list[str] = []
        remaining = []
        for j in sorted(set(done) | {k}, reverse=True):
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
                if step.undo_note:
                    notes.append(step.undo_note)
                emit(Progress(j + 1, total, step.title, "undone"))
        if signame:
            result = Status.INTERRUPTED if not undo_failed else Status.INTERRUPTED_PARTIAL
        else:
            result = Status.FAILED if not undo_failed else Status.FAILED_PARTIAL
        record = {"id": rid, "result": result, "finished": now_iso(),
                  "failed": {"step": k + 1, "title": plan.steps[k].title, "error": err},
                  "undone": undone, "undo_failed": undo_failed, "undo": remaining}
        if signame:
            record["interrupted"] = {"signal": signame, "step": k + 1}
        if notes:
            record["notes"] = notes
        try:
            self.host.audit.append(record)
        except OSError as e:
            undo_failed.append(f"the audit log could not record the outcome: {_err(e)}")
        msg = (f"interrupted by {signame} at step {k + 1} ({plan.steps[k].title}). " if signame
               else f"step {k + 1} ({plan.steps[k].title}) failed: {err}. ")
        if undo_failed:
            msg += ("Undoing did not fully succeed: " + "; ".join(undo_failed)
                    + f". See `nodeconsole log`; retry with `nodeconsole undo {rid} --apply`")
        else:
            msg += "Every change was undone; the host is as it was."
        if notes:
            msg += " Note: " + " ".join(notes)
        return RunResult(Status.FAILED, msg, record_id=rid, failed_step=plan.steps[k].title, error=err,
                         undone=undone, undo_failed=undo_failed, interrupted=signame)


def _step_record(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {"title": step.title, "why": step.why, "commands": list(step.commands), "op": step.op,
                           "inverse": step.inverse}
    if step.needs_reboot:
        out["needs_reboot"] = True
    return out


def stale_lock_message(info: dict) -> str:
    """What a dead holder's lock line tells the next taker (who, pid, when, the change it was making)."""
    who_, when = info.get("user", "someone"), info.get("when", "an unknown time")
    text = (f"a previous nodeconsole run (pid {info.get('pid', '?')}, {who_}, started {when}) died while "
            f"holding the host lock; the lock was taken over")
    change = info.get("change")
    if change:
        text += (f". Its change {change} may be half-applied: see `nodeconsole log`, and roll it back "
                 f"with `nodeconsole undo {change} --apply`")
    return text


def _err(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename:
        return f"{e.strerror or e} ({e.filename})"
    return str(e) or type(e).__name__
