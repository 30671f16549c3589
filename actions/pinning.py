"""NUMA-aware vCPU pinning of a VM (and of every unpinned GPU VM at once), as a plan.

`plan_pin` asks the placement planner (actions/pin_planner.py) where the VM's vCPUs, emulator threads
and memory should go, then plans `vm_pins` steps (actions/pin_steps.py): live now and in the persistent
config for a running VM, the config alone for a shut-off one; a note says which, and why when live is
not possible. The planner never proposes a CPU another defined VM (running, paused or shut off) is
pinned to unless the request allows the overlap, and leaves the host's own CPUs alone: the ones it keeps
(isolcpus=/nohz_full=/systemd CPUAffinity=, read as the doctor's host-cores check reads them), or the
admin's --reserve. The first step of each VM carries the before/after map of vCPU → host CPU. Only
plans: the runner applies, verifies, audits and undoes.
"""
from __future__ import annotations

from collections.abc import Iterable

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.pin_planner import (
    INACTIVE,
    Busy,
    Proposal,
    Topology,
    busy_of,
    default_reserve,
    parse_cpu_choice,
    propose,
    request_for,
    topology_of,
)
from nodeconsole.actions.pin_steps import LIVE_AND_CONFIG, PinState, describe, pin_scopes, read_state
from nodeconsole.actions.plan import Check, Plan, RequestError, StepError, build_step
from nodeconsole.actions.vm_guard import vm_change_checks
from nodeconsole.console.checks import vm_alignment
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.doctor.checks_memory import kept_host_cpus
from nodeconsole.console.model import HostSnapshot, Vm
from nodeconsole.console.vms.backend import VmConfigError

STRICT = "strict"


def resolve_vm(snap: HostSnapshot, name: str) -> Vm:
    """The VM called `name`. RequestError listing the known ones otherwise."""
    vm = snap.vm((name or "").strip())
    if vm is None:
        why = f"libvirt {snap.sources.libvirt}" if not snap.sources.libvirt.ok else \
            f"known VMs: {', '.join(sorted(v.name for v in snap.vms)) or 'none'}"
        raise RequestError(f"no VM named {name!r} ({why})")
    return vm


def _reserve(host: ActionHost, snap: HostSnapshot, topo: Topology, text: str | None) -> tuple[tuple[int, ...], str]:
    """The host reserve and where it comes from: --reserve when given, else the CPUs the host keeps for
    itself plus the first core of every node where it keeps none."""
    if text is not None:
        try:
            return parse_cpu_choice(text, topo, "--reserve", online=False), "as --reserve sets it"
        except ValueError as e:
            raise RequestError(str(e)) from None
    kept, how = kept_host_cpus(snap, host.root)
    held = default_reserve(topo, kept)
    if not kept:
        return held, ("the first core of each NUMA node: the host keeps none (no isolcpus=, nohz_full= or "
                      "systemd CPUAffinity=)")
    extra = sorted(set(held) - kept)
    return held, (f"kept for the host by {how}" + (f"; {format_cpulist(extra)}: the first core of a node "
                                                   "where it keeps none" if extra else ""))


def _host_checks(host: ActionHost, snap: HostSnapshot) -> list[Check]:
    out = []
    if not snap.sources.sysfs.ok:
        out.append(Check("host topology readable", False, f"sysfs {snap.sources.sysfs}",
                         "run on the host itself (or --demo)"))
    if host.vms is None or not snap.sources.libvirt.ok:
        why = "this host has no libvirt connection" if host.vms is None else f"libvirt {snap.sources.libvirt}"
        out.append(Check("libvirt reachable", False, why, "start libvirtd, or pass --libvirt URI"))
    return out


def plan_pin(host: ActionHost, snap: HostSnapshot, vm_name: str, cpus: str | None = None,
             reserve: str | None = None, allow_overlap: bool = False) -> Plan:
    """Plan pinning `vm_name` onto its GPUs' NUMA node (or onto `cpus`, a CPU list), keeping `reserve`
    (a CPU list; default: the CPUs the host keeps, else the first core of each node) for the host, and
    off every other defined VM's pins unless `allow_overlap`. RequestError: unknown VM, bad list."""
    vm = resolve_vm(snap, vm_name)
    topo = topology_of(snap)
    held, source = _reserve(host, snap, topo, reserve)
    chosen = None
    if cpus is not None:
        try:
            chosen = parse_cpu_choice(cpus, topo, "--cpus")
        except ValueError as e:
            raise RequestError(str(e)) from None
    req = request_for(snap, vm, chosen)
    prop = propose(topo, req, held, busy_of(snap, topo, vm.name), allow_overlap)
    where = (f"CPU {format_cpulist(chosen)}" if chosen is not None else
             f"NUMA node {format_cpulist(prop.nodes)}" if prop.ok else "its devices' NUMA node")
    if chosen is not None:  # the admin's CPUs: say where they are, not where the devices are
        title = f"Pin VM {vm.name} to {where} (chosen), on NUMA node {format_cpulist(prop.nodes) or '?'}"
    else:
        title = f"Pin VM {vm.name} to {where}" + (f", next to {', '.join(req.gpus)}" if req.gpus else "")
    request: dict[str, object] = {"vm": vm.name, "cpus": cpus, "reserve": reserve}
    if allow_overlap:
        request["allow_overlap"] = True
    plan = Plan(action="pin", title=title, request=request,
                rebuild=lambda: plan_pin(host, host.snapshot(), vm.name, cpus, reserve, allow_overlap))
    plan.checks += _host_checks(host, snap)
    plan.checks += vm_change_checks(host, vm)
    if not plan.ok:
        return plan
    _add_vm(host, snap, topo, plan, vm, prop, source)
    return plan


def plan_pin_all(host: ActionHost, snap: HostSnapshot, reserve: str | None = None,
                 allow_overlap: bool = False) -> Plan:
    """One plan pinning every GPU VM that has no vCPU pins, each onto its GPUs' node, none sharing a CPU
    with another (CPUs given to one VM of the plan are busy for the next) or with any other defined VM
    unless `allow_overlap`."""
    topo = topology_of(snap)
    held, source = _reserve(host, snap, topo, reserve)
    todo = sorted((v for v in snap.vms if vm_alignment(snap, v) == "unpinned"), key=lambda v: v.name)
    request: dict[str, object] = {"all": True, "reserve": reserve}
    if allow_overlap:
        request["allow_overlap"] = True
    plan = Plan(action="pin", title=f"Pin every unpinned GPU VM to its GPUs' NUMA node ({len(todo)} VMs)",
                request=request, rebuild=lambda: plan_pin_all(host, host.snapshot(), reserve, allow_overlap))
    plan.checks += _host_checks(host, snap)
    if not plan.ok:
        return plan
    names = {v.name for v in todo}
    every = busy_of(snap, topo, "")  # the VMs of this plan have no pins yet: the others' are what counts
    busy = Busy({c: others for c, pinned in every.cpus.items()
                 if (others := tuple(n for n in pinned if n not in names))}, every.states)
    for vm in todo:
        if (refused := vm_change_checks(host, vm)):
            plan.notes.append(f"VM {vm.name} is left out: {refused[0].reason}")
            continue
        prop = propose(topo, request_for(snap, vm), held, busy, allow_overlap)
        if not prop.ok:
            plan.notes.append(f"VM {vm.name} is left out: {prop.refusal}")
            continue
        _add_vm(host, snap, topo, plan, vm, prop, source)
        for c in set(prop.vcpus):
            busy.cpus[c] = tuple(sorted(set(busy.cpus.get(c, ())) | {vm.name}))
    crossed = sorted(v.name for v in snap.vms if vm_alignment(snap, v) == "cross-numa")
    if crossed:
        plan.notes.append(f"pinned across NUMA nodes, not part of this plan: {', '.join(crossed)} "
                          f"(`nodeconsole pin VM` re-pins one)")
    if not todo:
        plan.notes.append("every GPU VM already has vCPU pins")
    return plan


def _add_vm(host: ActionHost, snap: HostSnapshot, topo: Topology, plan: Plan, vm: Vm, prop: Proposal,
            source: str) -> None:
    """The checks, steps and notes for one VM's proposal (`source`: where the host reserve comes from)."""
    label = f"VM {vm.name}"
    if not prop.ok:
        plan.checks.append(Check(f"{label} can be placed", False, prop.refusal, prop.fix))
        return
    plan.checks.append(Check(f"{label} can be placed", True,
                             f"{vm.vcpus} vCPUs on CPU {format_cpulist(prop.vcpus)}, host reserve "
                             f"{format_cpulist(prop.reserve) or 'none'}, {source}"))
    cfg = host.vms
    assert cfg is not None, "_host_checks refuses a host without libvirt"
    try:
        where = pin_scopes(cfg, vm.name, running=vm.state not in INACTIVE)
        live_numa = read_state(cfg, vm.name, "live").numa if "live" in where.scopes else None
    except VmConfigError as e:
        plan.checks.append(Check(f"{label}'s config readable", False, str(e),
                                 f"check the VM's config ({host.command_hint('show', vm.name)})"))
        return
    target = _target(prop, cfg.whole_process_pins)
    # a running VM's memory mode cannot change (libvirt refuses): its live step keeps the policy alone
    # unless the mode is already strict, and the config carries it to the next start
    live_strict = live_numa is not None and (live_numa[0] or STRICT) == STRICT
    first = True
    for scope in where.scopes:
        with_numa = scope == "config" or live_strict
        try:
            step = build_step(host, target.op(vm.name, scope, with_numa))
        except StepError as e:
            plan.checks.append(Check(f"{label}'s {scope} pins can be set", False, str(e)))
            return
        if step is None:
            continue
        if where.scopes == ("config",) and where.live:  # one edit is the running state and the config
            step.title = f"Pin VM {vm.name} {LIVE_AND_CONFIG}: {describe(target, with_numa)}"
        step.why = _why(snap, vm, prop)
        if first:
            step.detail = "\n".join(pin_map(topo, vm, prop, cfg.whole_process_pins))
            first = False
        plan.steps.append(step)
    plan.notes.append(f"{label} is {vm.state}: {where.says}")
    if cfg.whole_process_pins:
        plan.notes.append(f"{cfg.label} pins the whole QEMU process (affinity), not each vCPU: every vCPU and the "
                          f"emulator threads run on CPU {format_cpulist(prop.vcpus)}, the memory bound to node "
                          f"{format_cpulist(prop.memory_nodes)}")
    if "live" in where.scopes and not live_strict:
        plan.notes.append(f"{label}: libvirt cannot change the memory policy of a running VM; strict on node "
                          f"{format_cpulist(prop.memory_nodes)} applies from its next start (memory already "
                          "allocated stays where it is)")
    plan.notes += [f"warning: {w}" for w in prop.warnings]
    plan.notes += list(prop.notes)


def _target(prop: Proposal, whole_process: bool) -> PinState:
    """The pins of a proposal: each vCPU on its CPU, the emulator on the reserve; for a hypervisor that pins
    the whole process (`whole_process`), every vCPU and the emulator on the one set of the vCPUs' CPUs."""
    numa = (STRICT, format_cpulist(prop.memory_nodes))
    if whole_process:
        one = format_cpulist(prop.vcpus)
        return PinState(vcpus=tuple((i, one) for i in range(len(prop.vcpus))), emulator=one, numa=numa)
    return PinState(vcpus=tuple((i, str(c)) for i, c in enumerate(prop.vcpus)),
                    emulator=format_cpulist(prop.emulator) or None, numa=numa)


def _why(snap: HostSnapshot, vm: Vm, prop: Proposal) -> str:
    nodes = format_cpulist(prop.nodes)
    now = {n for p in vm.pins for c in p.cpus if (n := snap.cpu_node().get(c)) is not None}
    was = f"now on node {format_cpulist(now)}" if vm.pins else "now unpinned: the scheduler moves them anywhere"
    devices = {g.numa_node for h in vm.hostdevs if h.gpu and (g := snap.gpu(h.gpu)) and g.numa_node is not None}
    if devices and not set(prop.nodes) <= devices:  # --cpus elsewhere than the devices
        return (f"vCPUs, emulator threads and memory on node {nodes} as chosen ({was}); the VM's GPUs are "
                f"on node {format_cpulist(devices)}")
    return (f"vCPUs, emulator threads and memory on node {nodes} next to the VM's devices ({was}); "
            "a cross-node placement costs 10% or more")


def _cpus_text(topo: Topology, cpus: Iterable[int]) -> str:
    cpus = sorted(set(cpus))
    if not cpus:
        return "any CPU"
    nodes = sorted({topo.node_of.get(c, -1) for c in cpus})
    return f"{format_cpulist(cpus)} (node {format_cpulist(n for n in nodes if n >= 0) or '?'})"


def pin_map(topo: Topology, vm: Vm, prop: Proposal, whole_process: bool = False) -> list[str]:
    """The before/after map: each vCPU's host CPU(s) now and in the proposal, then emulator and memory
    (`whole_process`: every vCPU and the emulator on the vCPUs' one CPU set)."""
    before = {p.vcpu: p.cpus for p in vm.pins}
    rows = [(f"vCPU {i}", _cpus_text(topo, before.get(i, ())), _cpus_text(topo, prop.vcpus if whole_process else (c,)))
            for i, c in enumerate(prop.vcpus)]
    emulator = prop.vcpus if whole_process else prop.emulator
    rows.append(("emulator", _cpus_text(topo, vm.emulator_pins) if vm.emulator_pins else "unpinned",
                 _cpus_text(topo, emulator) if emulator else "unpinned"))
    rows.append(("memory", f"{vm.numa_mode} on node {format_cpulist(vm.numa_nodeset)}" if vm.numa_mode
                 else "no policy", f"{STRICT} on node {format_cpulist(prop.memory_nodes)}"))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(max(len(r[1]) for r in rows), len("before"))
    out = [f"{'':<{w0}}  {'before':<{w1}}    after"]
    out += [f"{a:<{w0}}  {b:<{w1}} →  {c}" for a, b, c in rows]
    return out
