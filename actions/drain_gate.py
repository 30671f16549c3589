"""The drain as a precondition: a drained GPU (console/drains.py, `nodeconsole gpu drain`) takes no new
work. It comes before the health verdict (actions/health_gate.py) in every message — drained, then
unhealthy, then degraded — and `--allow-unhealthy` does not lift it: only `gpu undrain` does.
"""
from __future__ import annotations

from collections.abc import Callable

from nodeconsole.actions.plan import Check, Plan
from nodeconsole.console.model import Gpu, HostSnapshot

TITLE = "GPU not drained"


def drain_fix(gpu: Gpu) -> str:
    return (f"`nodeconsole gpu undrain {gpu.address}` lifts the drain (--allow-unhealthy does not); "
            "pick another GPU meanwhile")


def drain_checks(gpu: Gpu) -> list[Check]:
    """[] for a GPU that is not drained; else the refusing check naming who drained it, when and why
    (and the health verdict after it, when the GPU is not healthy either)."""
    d = gpu.drain
    if d is None:
        return []
    also = f"; it is also {gpu.health.summary}" if gpu.health.state != "healthy" else ""
    return [Check(TITLE, False, f"GPU {gpu.index} ({gpu.address}) is drained by {d.who} at {d.when}: "
                  f"{d.reason}{also}", drain_fix(gpu))]


def vm_drain_checks(snap: HostSnapshot, vm: str) -> list[Check]:
    """The drained GPUs a VM holds (its definition names them): pairing a NIC with them is new work."""
    return [Check(TITLE, False, f"VM {vm} holds GPU {g.index} ({g.address}), drained by {g.drain.who} at "
                  f"{g.drain.when}: {g.drain.reason}", drain_fix(g))
            for g in snap.gpus if g.drain is not None and vm in g.owner.vms]


def gate_vm(plan: Plan, snap: HostSnapshot, vm: str, fresh: Callable[[], HostSnapshot]) -> Plan:
    """`plan` refused when the VM holds a drained GPU (`nic passthrough` pairs a NIC with its GPUs);
    its re-plan under the lock is judged on a fresh read (`fresh`)."""
    plan.checks[:0] = vm_drain_checks(snap, vm)
    rebuild = plan.rebuild
    if rebuild is not None:
        plan.rebuild = lambda: gate_vm(rebuild(), fresh(), vm, fresh)
    return plan
