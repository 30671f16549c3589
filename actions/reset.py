"""`nodeconsole gpu reset GPU [--force]`: one plan that recovers a GPU whatever holds it.

- On vfio-pci: each running VM that holds the GPU (or another function of its card) is shut down
  (actions/reset_steps.py `vm_run`; `--force` destroys it after the wait), the function is reset through
  its sysfs `reset` file (`pci_reset`, naming the kernel's reset method) and must answer, then each VM is
  started again and seen running. A failure part-way starts what was stopped (the shutdown's inverse).
- On the nvidia driver: refused while processes use the GPU (named, from NVML) or MIG instances exist;
  else `nvidia-smi -r -i ADDR` (`nvidia_reset`), verified through NVML.
- Refused: a VM holding it that is neither running nor shut off (paused: QEMU keeps the device open),
  libvirt down (which VMs hold it cannot be known), vGPUs in use, no driver that can reset it.
A drained GPU may be reset (a reset is recovery; the drain stays). A reset applied clears the GPU's
health window for the events before it (console/resets.py reads the applied records).
"""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check, Op, Plan, Step, vms_known_check
from nodeconsole.actions.reset_steps import SHUTDOWN_WAIT_S, nvidia_reset_step, pci_reset_step, reset_method, vm_step
from nodeconsole.actions.targets import companions, gpu_label, resolve_gpu, source_checks
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.model_gpu import Gpu

ACTION = "gpu reset"


def holders(snap: HostSnapshot, g: Gpu) -> dict[str, str]:
    """VM name → its state, of every VM whose hostdevs hold the GPU or another function of its card."""
    mine = set(companions(snap, g)) | {g.address}
    return {v.name: v.state for v in snap.vms
            if any(h.type == "pci" and h.address in mine for h in v.hostdevs)}


def _vfio_checks(host: ActionHost, held: dict[str, str]) -> list[Check]:
    odd = {n: s for n, s in held.items() if s not in ("running", "shut off")}
    if odd:
        listing = ", ".join(f"{n} ({s})" for n, s in sorted(odd.items()))
        return [Check("VMs holding it running or shut off", False,
                      f"{listing}: QEMU keeps the device open while the VM is in that state",
                      "resume it or stop it (" + "; ".join(f"{host.command_hint('resume', n)} or "
                                                           f"{host.command_hint('stop', n)}" for n in sorted(odd))
                      + "), then plan again")]
    running = sorted(n for n, s in held.items() if s == "running")
    return [Check("VMs holding it running or shut off", True,
                  f"{', '.join(running)} running: stopped and started again" if running else "none running")]


def _host_checks(g: Gpu) -> list[Check]:
    checks = []
    if g.processes:
        names = ", ".join(f"{p.name} (pid {p.pid})" for p in g.processes)
        checks.append(Check("no processes on the GPU", False, f"in use by {names}",
                            "stop them (or the service that runs them), then plan again"))
    else:
        checks.append(Check("no processes on the GPU", True, "none"))
    if g.mig.instances:
        checks.append(Check("no MIG instances", False, f"{len(g.mig.instances)} MIG instance(s) in use",
                            f"remove them first (nodeconsole mig {g.address} none), then plan again"))
    if g.vgpu.instances:
        checks.append(Check("no vGPUs", False, f"{len(g.vgpu.instances)} vGPU(s) on it",
                            "remove them first (nodeconsole vgpu remove …)"))
    if g.nvml_index is None:
        checks.append(Check("NVML sees the GPU", False, g.nvml_error or "NVML does not list it",
                            "a GPU NVML cannot see needs a host reboot (or a vfio-pci reset: release it first)"))
    return checks


def _vfio_steps(host: ActionHost, g: Gpu, running: list[str], force: bool) -> list[Step]:
    stops: list[Op] = [{"kind": "vm_run", "vm": n, "running": False, "force": force, "wait_s": SHUTDOWN_WAIT_S}
                       for n in running]
    starts: list[Op] = [{"kind": "vm_run", "vm": n, "running": True} for n in running]
    return ([vm_step(host, op) for op in stops] + [pci_reset_step(host, {"kind": "pci_reset", "device": g.address})]
            + [vm_step(host, op) for op in starts])


def plan_reset(host: ActionHost, snap: HostSnapshot, gpu_text: str, force: bool = False) -> Plan:
    """Plan resetting a GPU (see the module doc). RequestError for an unknown GPU."""
    g = resolve_gpu(snap, gpu_text)
    plan = Plan(ACTION, f"Reset {gpu_label(g)}", {"gpu": g.address, "force": force})
    plan.checks += source_checks(snap)
    plan.rebuild = lambda: plan_reset(host, host.snapshot(), g.address, force)
    if g.drain is not None:
        plan.notes.append(f"it is {g.drain.summary}: a reset is recovery, the drain stays until `gpu undrain`")
    if g.driver in ("vfio-pci", None, ""):  # unbound: no driver holds it, the kernel resets it alone
        plan.checks += vms_known_check(snap, f"GPU {g.address}")
        if not snap.sources.libvirt.ok:
            return plan
        held = holders(snap, g)
        plan.checks += _vfio_checks(host, held)
        method = reset_method(host, g.address)
        plan.checks.append(Check("the kernel can reset it", bool(method), f"reset method: {method}" if method
                                 else "the kernel reports no reset method", "a host reboot resets it"))
        if plan.ok:
            running = sorted(n for n, s in held.items() if s == "running")
            plan.steps += _vfio_steps(host, g, running, force)
            for n in sorted(n for n, s in held.items() if s == "shut off"):
                plan.notes.append(f"VM {n} holds it but is shut off: not touched")
            if running:
                plan.notes.append("a reset is not undone: `undo` of it only starts a VM it left stopped")
        return plan
    if g.driver != "nvidia":
        plan.checks.append(Check("a driver that can reset it", False,
                                 f"it is on {g.driver or 'no driver'}",
                                 "bind it to nvidia or vfio-pci (nodeconsole passthrough / release), then plan again"))
        return plan
    plan.checks += _host_checks(g)
    if plan.ok:
        plan.steps.append(nvidia_reset_step(host, {"kind": "nvidia_reset", "gpu": g.address}))
    return plan
