"""MIG layouts as guided changes: `plan_mig(host, snap, GPU, "3g.40gb,2g.20gb,1g.10gb*2")` plans turning
MIG mode on when needed, destroying the GPU instances the layout does not keep (compute instances
first), creating the others at explicit placements with their compute instances, and re-reading the
whole layout from NVML at the end. `off=True` plans an empty layout and MIG mode off.

Refusals say why: a layout that cannot fit (mig_planner names the slices in the way), instances in use
(a process, a VM's vGPU, a VF holding a MIG-backed vGPU type), a GPU that is busy when MIG mode must
change. The runner applies the plan and undoes what it made when a step fails, so a GPU is never left
with half a layout. Step kinds live in actions/mig_steps.py.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from nodeconsole.actions.gpu_holders import HOLDER_DAEMONS, device_users, holder_daemons
from nodeconsole.actions.gpu_names import with_gpu_name
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.mig_planner import (
    CiSpec,
    Fit,
    LayoutError,
    Wanted,
    fit,
    format_layout,
    parse_layout,
    slices_text,
)
from nodeconsole.actions.mig_steps import MigState, read_mig_state
from nodeconsole.actions.plan import Check, Op, Plan, RequestError, StepError, build_step
from nodeconsole.actions.targets import resolve_gpu
from nodeconsole.actions.vgpu import _vf_held
from nodeconsole.console.model import Gpu, HostSnapshot

SAVE_HINT = "GPU instances do not survive a reboot: `nodeconsole mig save` re-creates the layouts at boot"


def _label(g: Gpu) -> str:
    return f"GPU {g.index} ({g.address}, {g.name}, nvidia-smi {g.smi})"


def mig_state_for(host: ActionHost, snap: HostSnapshot, g: Gpu) -> MigState:
    """The GPU's MIG state from NVML, with VM names for the users of MIG-backed vGPUs."""
    return read_mig_state(host, g.address, {v.uuid: v.name for v in snap.vms if v.uuid})


def _gpu_checks(snap: HostSnapshot, g: Gpu) -> list[Check]:
    if not snap.sources.nvml.ok:
        return [Check("NVML answers", False, f"NVML {snap.sources.nvml}",
                      "MIG is managed through the NVIDIA driver: make nvidia-smi work first")]
    if g.driver != "nvidia" or g.nvml_index is None:
        return [Check("the GPU is on the nvidia driver", False,
                      f"{g.address} is on {g.driver or 'no driver'}; NVML cannot see it",
                      f"give it back to the host first: nodeconsole release {g.address}")]
    return []


def _holders(host: ActionHost, snap: HostSnapshot, g: Gpu, st: MigState) -> list[str]:
    """Everything that stops a GPU reset or a MIG mode change now."""
    out = [f"process {p}" for p in st.processes]
    out += [f"VM {vm} (vGPU)" for vm in st.vgpu_vms]
    out += [f"vGPU {i.uuid} ({i.type_name}{', VM ' + i.vm if i.vm else ''})" for i in g.vgpu.instances]
    out += [u for u in device_users(host, [g.address]) if not any(u.startswith(p + " ") for p in st.processes)]
    out += [f"{HOLDER_DAEMONS[comm][0]} (pid {pid}) keeps every GPU open" for pid, comm in holder_daemons(host)]
    return out


def plan_mig(host: ActionHost, snap: HostSnapshot, gpu_text: str, layout: str | None = None, off: bool = False) -> Plan:
    """Plan a GPU's MIG layout (`layout`, e.g. "3g.40gb,1g.10gb*2" or "none"), or MIG off (`off`).
    Raises RequestError for an unknown GPU or a malformed layout / unknown profile name."""
    g = resolve_gpu(snap, gpu_text)
    if (layout is None) == (not off):
        raise RequestError("give either a layout (e.g. 3g.40gb,2g.20gb,1g.10gb*2) or --off")
    title = f"Turn MIG off on {_label(g)}" if off else f"MIG layout {layout} on {_label(g)}"
    plan = Plan(action="mig", title=title, request=with_gpu_name({"gpu": g.address, "given": gpu_text,
                                                                   "layout": layout, "off": off}, g),
                rebuild=lambda: plan_mig(host, host.snapshot(), g.address, layout, off))
    plan.checks += _gpu_checks(snap, g)
    if not plan.ok:
        return plan
    st = _usable_mig_state(plan, host, snap, g)
    if st is None:
        return plan
    try:
        wanted = [] if off else parse_layout(layout or "", st.profiles)
    except LayoutError as e:
        raise RequestError(str(e)) from None
    canon = format_layout(wanted, st.profiles)
    plan.request["layout"] = None if off else canon
    if not off:
        plan.title = f"MIG layout {canon} on {_label(g)}"
    source = "NVML" if not st.table else f"nodeconsole's table for {st.table} (NVML lists profiles once MIG is on)"
    result = fit(st.profiles, wanted, st.instances)
    fits = "MIG can be turned off" if off else "the layout fits"
    if not result.ok:
        plan.checks.append(Check(fits, False, result.reason,
                                 ("free" if off else "change the layout, or free") + " the instances in the way "
                                 "(stop their VMs and processes), then plan again"))
        return plan
    plan.checks.append(Check(fits, True, _fit_text(result) + f"; profiles from {source}"))
    plan.checks += _vf_checks(g, result, off)
    want_mode = 0 if off else 1
    mode_change = (st.current, st.pending) != (want_mode, want_mode)
    if mode_change:
        holders = _holders(host, snap, g, st)
        plan.checks.append(Check("nothing uses the GPU (MIG mode changes need a GPU reset)", not holders,
                                 "; ".join(holders) if holders else "no process, vGPU or VM uses it",
                                 "stop those first (processes: nvidia-smi; vGPUs: nodeconsole vgpu remove), "
                                 "then plan again"))
    if not plan.ok:
        return plan
    ops = layout_ops(g.address, st, result, want_mode, mode_change)
    _notes(plan, host, snap, g, st, mode_change, want_mode, bool(ops))
    _add_steps(plan, host, ops)
    return plan


def _usable_mig_state(plan: Plan, host: ActionHost, snap: HostSnapshot, g: Gpu) -> MigState | None:
    """The GPU's MIG state, or None with the failed check added to `plan` (NVML does not answer, the
    GPU has no MIG, or its profiles are unknown)."""
    try:
        st = mig_state_for(host, snap, g)
    except StepError as e:
        plan.checks.append(Check("NVML answers", False, str(e)))
        return None
    if not st.capable:
        plan.checks.append(Check("the GPU supports MIG", False, f"NVML answers Not Supported for {g.name}"))
        return None
    if not st.profiles:
        plan.checks.append(Check("MIG profiles are known", False,
                                 f"MIG mode is off and nodeconsole has no profile table for PCI device "
                                 f"{st.pci_device_id:#010x}", f"turn MIG mode on first (nvidia-smi -i "
                                                              f"{g.address} -mig 1), then plan again"))
        return None
    return st


def _add_steps(plan: Plan, host: ActionHost, ops: list[Op]) -> None:
    """Build the steps of `ops` into `plan`; the first that cannot be built adds a failed check and ends it."""
    for op in ops:
        try:
            step = build_step(host, op)
        except StepError as e:
            plan.checks.append(Check("step can be planned", False, str(e)))
            return
        if step is not None:
            plan.steps.append(step)


def _fit_text(f: Fit) -> str:
    parts = [f"keep {e.profile} at {slices_text(e.start, e.size)}" for e in f.keep]
    parts += [f"create {c.profile.name} at {slices_text(c.start, c.size)}" for c in f.create]
    parts += [f"destroy {e.profile} at {slices_text(e.start, e.size)}" for e in f.destroy]
    return ", ".join(parts) or "no GPU instances"


def _vf_checks(g: Gpu, f: Fit, off: bool) -> list[Check]:
    """VFs holding MIG-backed vGPU types need a GPU instance of their profile each."""
    held = _vf_held(g)
    if not held:
        return []
    after = Counter([e.profile for e in f.keep] + [c.profile.name for c in f.create])
    bad = [f"{', '.join(vfs)} hold{'s' if len(vfs) == 1 else ''} {prof} vGPUs ({len(vfs)}), the layout leaves "
           f"{0 if off else after.get(prof, 0)} {prof} instance(s)"
           for prof, vfs in sorted(held.items()) if off or after.get(prof, 0) < len(vfs)]
    return [Check("MIG-backed vGPUs keep their GPU instances", not bad, "; ".join(bad) or "yes",
                  "remove those vGPUs first (nodeconsole vgpu remove VF)")]


def layout_ops(address: str, st: MigState, f: Fit, want_mode: int, mode_change: bool) -> list[Op]:
    """The operations that take a GPU from `st` to the fit `f` (MIG mode `want_mode`), in order."""
    addr = address
    ops: list[Op] = []
    if want_mode == 1 and mode_change:
        ops.append({"kind": "mig_mode", "gpu": addr, "mode": 1})

    def gi(profile: str, pid: int, start: int, size: int, present: bool, cis: Iterable[CiSpec]) -> Op:
        return {"kind": "mig_gi", "gpu": addr, "profile_id": pid, "profile": profile, "start": start,
                "size": size, "present": present, "cis": [list(c) for c in cis]}

    ops += [gi(e.profile, e.profile_id, e.start, e.size, False, e.cis)
            for e in sorted(f.destroy, key=lambda e: e.start)]
    by_name = {p.name: p for p in st.profiles}
    for e in f.keep:
        if not e.cis and e.profile in by_name:  # a GPU instance nothing can run in: give it its compute instance
            ops.append(gi(e.profile, e.profile_id, e.start, e.size, True, [by_name[e.profile].full_ci()]))
    ops += [gi(c.profile.name, c.profile.profile_id, c.start, c.size, True, [c.profile.full_ci()])
            for c in f.create]
    if want_mode == 0 and mode_change:
        ops.append({"kind": "mig_mode", "gpu": addr, "mode": 0})
    if ops and want_mode == 1:
        layout = sorted([e.profile_id, e.start, e.size] for e in f.keep) + \
            sorted([c.profile.profile_id, c.start, c.size] for c in f.create)
        ops.append({"kind": "mig_verify", "gpu": addr, "layout": sorted(layout)})
    return ops


def _notes(plan: Plan, host: ActionHost, snap: HostSnapshot, g: Gpu, st: MigState, mode_change: bool, want_mode: int,
           changes: bool) -> None:
    if mode_change and (st.current != want_mode):
        plan.notes.append(f"MIG mode {'on' if want_mode else 'off'} takes effect with a GPU reset (Hopper and "
                          f"most Ampere drivers ask for one): nodeconsole resets {g.address} right after setting "
                          "it. The reset stops everything running on this GPU — nothing now (checked above). "
                          "Where no reset is possible the change waits for the next reboot.")
    in_configs = sorted(v.name for v in snap.vms
                        if any(h.type == "pci" and h.address == g.address for h in v.hostdevs))
    if in_configs:
        plan.notes.append(f"VM {', '.join(in_configs)} has this GPU in its config: starting it takes the whole "
                          "GPU (and every MIG instance on it) away from the host")
    if changes:
        plan.notes.append(SAVE_HINT)


def pinned(st: MigState) -> list[Wanted]:
    """The GPU's current layout with every instance pinned to its placement (what `mig save` keeps)."""
    return [Wanted(e.profile, e.start) for e in st.instances]
