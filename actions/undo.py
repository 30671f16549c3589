"""Undo: the plan that puts the host back in the state an audit record says it was in before.

Each inverse operation names a target state (the state read before the change); its step kind plans
from whatever the host looks like now, so an undo reaches that state from anywhere the kinds can. When
something blocks it (a malformed record, a device gone), the plan is refused with the reason and names
the next older change that could be undone instead.
"""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check, Plan, RequestError, StepError, build_step
from nodeconsole.console.audit_log import AuditRecord, Status


def _find(host: ActionHost, record_id: str | None) -> tuple[AuditRecord, list[str]]:
    log = host.audit
    try:
        record = log.latest_undoable() if record_id is None else log.find(record_id)
    except OSError as e:
        raise RequestError(f"cannot read the audit log {log.path}: {e.strerror or e}") from None
    if record is None and record_id is None:
        raise RequestError(f"nothing to undo: no recorded change in {log.path}")
    if record is None:
        raise RequestError(f"no change with id {record_id!r} in {log.path} (see `nodeconsole log`)")
    return record, [f"{log.path} {p}" for p in log.problems]


def plan_undo(host: ActionHost, record_id: str | None = None) -> Plan:
    """The plan that rolls back audit record `record_id` (the latest undoable change when None).
    Raises RequestError when there is no such record."""
    record, problems = _find(host, record_id)
    rid = record.id
    named = record.title if record.title is not None else record.action if record.action is not None else ""
    plan = Plan(action="undo", title=f"Undo {rid}: {named}",
                request={"id": rid}, undoes=rid, rebuild=lambda: plan_undo(host, rid))
    plan.notes += problems
    if record.undone_by:
        plan.checks.append(Check("not undone yet", False, f"{rid} was already undone by {record.undone_by}"))
        return plan
    if record.result in (Status.FAILED, Status.INTERRUPTED):
        plan.notes.append(f"{rid} was rolled back when it ran ({record.result}): there is nothing left of it")
    if record.undo_invalid:
        plan.checks.append(Check("undo data is readable", False,
                                 f"the record's undo data is damaged ({record.undo_invalid})"))
    for n, op in enumerate(record.undo, 1):
        try:
            step = build_step(host, op)
        except StepError as e:
            from nodeconsole.actions.mig_deferred import deferred_mig_step

            step = deferred_mig_step(host, op, plan.steps)
            if step is None:
                plan.checks.append(Check(f"undo step {n} can be built", False, str(e)))
                continue
        if step is not None:
            plan.steps.append(step)
    if not plan.ok:
        _offer_older(host, plan, rid)
    return plan


def _offer_older(host: ActionHost, plan: Plan, rid: str) -> None:
    """A blocked undo names the next older change that could be rolled back instead."""
    try:
        older = host.audit.older_undoable(rid)
    except OSError:
        return
    fix = (f"the next older change is {older.id} ({older.title if older.title is not None else ''}): "
           f"`nodeconsole undo {older.id} --apply`" if older else "no older change is left to undo")
    failed = [i for i, c in enumerate(plan.checks) if not c.ok]
    c = plan.checks[failed[-1]]
    plan.checks[failed[-1]] = Check(c.title, c.ok, c.reason, (c.fix + "\n" if c.fix else "") + fix)
