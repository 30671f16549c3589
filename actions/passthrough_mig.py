"""A GPU in MIG mode handed to a VM: the guest would get a GPU still partitioned (MIG mode lives on the
GPU, not in the host's driver), so the passthrough turns MIG off first. Its steps are the MIG action's
own (`plan_mig(..., off=True)`): destroy each GPU instance with its compute instances, then MIG mode
off with the GPU reset it needs. Their inverses are recorded like any step's, so undoing the
passthrough (or a failed apply's rollback) turns MIG mode back on and re-creates the layout at the
same placements. When an instance is in use (a process, a VM's MIG-backed vGPU, a VF holding one) the
passthrough is refused with the MIG plan's reason, which names the instance and who holds it.
"""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check, Op, Plan
from nodeconsole.console.model import Gpu, HostSnapshot

TITLE = "MIG can be turned off first (a VM needs the whole GPU)"


def in_mig_mode(gpu: Gpu) -> bool:
    """MIG mode on now or at the GPU's next reset (both reach the guest)."""
    return gpu.driver == "nvidia" and "enabled" in (gpu.mig.mode, gpu.mig.pending_mode)


def _layout(gpu: Gpu) -> str:
    shown = [f"{i.profile}@{i.start}" for i in gpu.mig.instances]
    return ", ".join(shown) if shown else "no GPU instances"


def mig_off_first(host: ActionHost, snap: HostSnapshot, gpu: Gpu, plan: Plan) -> list[Op]:
    """The operations that take `gpu` out of MIG mode before it goes to vfio-pci ([] when it is not in
    MIG mode). A MIG plan that refuses adds its failed checks to `plan` under TITLE."""
    if not in_mig_mode(gpu):
        return []
    from nodeconsole.actions.mig import plan_mig

    off = plan_mig(host, snap, gpu.address, off=True)
    failed = [c for c in off.checks if not c.ok]
    if failed:
        plan.checks += [Check(TITLE, False, c.reason if c.title == "MIG can be turned off" else f"{c.title}: {c.reason}",
                              c.fix) for c in failed]
        return []
    plan.checks.append(Check(TITLE, True, f"MIG mode is on ({_layout(gpu)}); nothing uses its instances"))
    plan.notes.append(f"{gpu.address} is in MIG mode ({_layout(gpu)}): the passthrough first destroys its GPU "
                      "instances (compute instances first) and turns MIG mode off, so the VM gets the whole GPU; "
                      "undo turns MIG mode back on and re-creates the same layout")
    plan.notes += [n for n in off.notes if n.startswith("MIG mode off takes effect")]
    return [s.op for s in off.steps]
