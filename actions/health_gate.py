"""The GPU health verdict as a precondition (console/health.py judges; this only reads `Gpu.health`).

An action that puts work on a GPU — passthrough, a MIG layout, a vGPU — is refused on an unhealthy GPU,
naming the reasons; `--allow-unhealthy` goes ahead, and the request (so the audit record) says so with
the reasons. A degraded GPU is allowed with a warning. Releasing a GPU, undoing a change and the other
actions that take work away are never gated: they are how a sick GPU is recovered.
A drained GPU (actions/drain_gate.py) is refused before its health is even weighed, and
`--allow-unhealthy` does not lift a drain: only `gpu undrain` does.
"""
from __future__ import annotations

from collections.abc import Callable

from nodeconsole.actions.drain_gate import drain_checks
from nodeconsole.actions.plan import Check, Plan
from nodeconsole.console.gpu_events import DEGRADED
from nodeconsole.console.model import Gpu, HostSnapshot

TITLE = "GPU healthy"
OVERRIDE = "--allow-unhealthy"


def health_checks(gpu: Gpu, allow_unhealthy: bool) -> tuple[list[Check], list[str]]:
    """(the health precondition, the warnings for the plan's notes)."""
    h = gpu.health
    label = f"GPU {gpu.index} ({gpu.address})"
    why = "; ".join(h.reasons)
    if h.unhealthy and not allow_unhealthy:
        return [Check(TITLE, False, f"{label} is unhealthy: {why}",
                      f"recover the GPU first (see `nodeconsole events`); {OVERRIDE} goes ahead anyway "
                      "(recorded in the audit log)")], []
    if h.unhealthy:
        return ([Check(TITLE, True, f"unhealthy, going ahead as {OVERRIDE} asks: {why}")],
                [f"{label} is unhealthy ({why}): going ahead because of {OVERRIDE}"])
    if h.state == DEGRADED:
        return [Check(TITLE, True, f"degraded: {why}")], [f"{label} is degraded: {why}"]
    return [Check(TITLE, True, "healthy")], []


def gate(plan: Plan, snap: HostSnapshot, gpu: Gpu | None, allow_unhealthy: bool,
         fresh: Callable[[], HostSnapshot]) -> Plan:
    """`plan` with the health precondition first (and in its re-plan under the lock, from `fresh`)."""
    if gpu is None:
        return plan
    checks, warnings = health_checks(gpu, allow_unhealthy)
    plan.checks[:0] = drain_checks(gpu) + checks  # drained first: --allow-unhealthy does not lift it
    plan.notes += warnings
    if allow_unhealthy and gpu.health.unhealthy:
        plan.request["allow_unhealthy"] = True
        plan.request["health"] = {"state": gpu.health.state, "reasons": list(gpu.health.reasons)}
    rebuild = plan.rebuild
    if rebuild is not None:
        def regated() -> Plan:
            again = rebuild()
            now = fresh()
            return gate(again, now, now.gpu(gpu.address), allow_unhealthy, fresh)
        plan.rebuild = regated
    return plan
