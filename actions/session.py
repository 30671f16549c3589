"""One action session for every front end: a typed request in, a plan out, the plan applied.

    session = ActionSession.from_seams(seams)            # the one place that builds the ActionHost
    plan = session.plan(Passthrough(gpu="3", vm="train"))  # RequestError: bad input, nothing planned
    result = session.apply(plan, confirm, progress)       # refusal, confirm, lock, apply + verify,
                                                          # audit, roll back on failure: actions/runner.py

The CLI (actions/cli/change.py), the console (screens/app.py), the MIG editor (which hands back a
`MigLayout` request) and the doctor's fixes (`DoctorFix`, actions/doctor_fixes.py) all go through it; they
only differ in how they show a plan, ask and report progress.
`plan` re-reads the host (a fresh snapshot) every time; nothing here imports a UI.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Plan, RequestError, StepError, needs_typed_confirmation
from nodeconsole.actions.progress import ProgressFn, RunResult
from nodeconsole.actions.runner import Confirm, Runner

if TYPE_CHECKING:
    from nodeconsole.actions.mig_steps import MigState
    from nodeconsole.actions.placement import Placement
    from nodeconsole.console.model import HostSnapshot
    from nodeconsole.console.seams import Seams

__all__ = ["ActionSession", "DoctorFix", "Drain", "MigLayout", "MigRestore", "MigSave", "NicPassthrough", "NicVfs",
           "NothingToDo", "Passthrough", "Pin", "Prepare",
           "PinAll", "Redo", "Release", "Request", "Reset", "RequestError", "StepError", "Undo", "Undrain", "VgpuCreate",
           "VgpuRemove"]


class NothingToDo(RequestError):
    """Not an error: the request has nothing to act on (e.g. `undo` with no change left to undo)."""


# -- requests: what a front end asks for (plain data; `label` names it in messages) -------------------

@dataclass(frozen=True)
class Passthrough:
    label: ClassVar[str] = "passthrough"
    gpu: str  # console index, PCI address or UUID
    vm: str | None = None
    persist: bool = False
    with_nic: bool = False  # also the free NIC VF closest to the GPU (actions/nic.py)
    allow_far_nic: bool = False  # that VF may be across the sockets (SYS)
    allow_unhealthy: bool = False  # go ahead on an unhealthy GPU (actions/health_gate.py), recorded


@dataclass(frozen=True)
class NicVfs:
    """A NIC's SR-IOV VF count (0 removes them); `host_driver` lets the host's driver probe new VFs."""
    label: ClassVar[str] = "nic vfs"
    pf: str  # the physical function's PCI address
    count: int
    persist: bool = False
    host_driver: bool = False


@dataclass(frozen=True)
class NicPassthrough:
    """One NIC VF to vfio-pci and a VM's definition."""
    label: ClassVar[str] = "nic passthrough"
    vf: str
    vm: str


@dataclass(frozen=True)
class Release:
    label: ClassVar[str] = "release"
    gpu: str


@dataclass(frozen=True)
class Pin:
    label: ClassVar[str] = "pin"
    vm: str
    cpus: str | None = None
    reserve: str | None = None
    allow_overlap: bool = False  # share other VMs' CPUs on purpose when nothing else fits


@dataclass(frozen=True)
class PinAll:
    label: ClassVar[str] = "pin all"
    reserve: str | None = None
    allow_overlap: bool = False


@dataclass(frozen=True)
class MigLayout:
    """A GPU's MIG layout (`3g.40gb,1g.10gb*2`, `none` for MIG on without instances) or `off`."""
    label: ClassVar[str] = "MIG"
    gpu: str
    layout: str | None = None
    off: bool = False
    allow_unhealthy: bool = False  # go ahead on an unhealthy GPU (actions/health_gate.py), recorded


@dataclass(frozen=True)
class MigSave:
    label: ClassVar[str] = "mig save"


@dataclass(frozen=True)
class MigRestore:
    label: ClassVar[str] = "mig restore"


@dataclass(frozen=True)
class VgpuCreate:
    label: ClassVar[str] = "vgpu create"
    gpu: str
    type: str
    vm: str | None = None
    uuid: str | None = None
    allow_unhealthy: bool = False  # go ahead on an unhealthy GPU (actions/health_gate.py), recorded


@dataclass(frozen=True)
class VgpuRemove:
    label: ClassVar[str] = "vgpu remove"
    vgpu: str  # mdev UUID or the VF's PCI address


@dataclass(frozen=True)
class DoctorFix:
    """The fixes of doctor checks (ids as `nodeconsole doctor` names them), batched into one plan: one
    boot-loader edit, one initramfs rebuild. A check only fixable by hand refuses the request."""
    label: ClassVar[str] = "doctor fix"
    ids: tuple[str, ...]
    role: str = "mixed"  # passthrough | mig | vgpu | mixed


@dataclass(frozen=True)
class Drain:
    """Mark a GPU drained (actions/drain.py): no new work goes on it until `Undrain`."""
    label: ClassVar[str] = "gpu drain"
    gpu: str
    reason: str


@dataclass(frozen=True)
class Undrain:
    label: ClassVar[str] = "gpu undrain"
    gpu: str


@dataclass(frozen=True)
class Reset:
    """Reset a GPU whatever holds it (actions/reset.py): the VMs holding it stopped and started around it."""
    label: ClassVar[str] = "gpu reset"
    gpu: str
    force: bool = False  # destroy a VM that has not shut down after the wait


@dataclass(frozen=True)
class Prepare:
    """Size and wire a shut-off VM for training (actions/prepare.py): `gpus` a count ("2": place picks) or
    a list ("0,1", addresses); memory as `memory_kib` or `memory_factor` × the GPUs' VRAM (default 2);
    `hugepages` "1G", "2M", "none" or None (1G where the host offers it)."""
    label: ClassVar[str] = "prepare"
    vm: str
    gpus: str
    with_nic: bool = False
    vcpus: int | None = None
    memory_kib: int | None = None
    memory_factor: float | None = None
    hugepages: str | None = None


@dataclass(frozen=True)
class Undo:
    """Roll a recorded change back; the latest undoable one when `record_id` is None."""
    label: ClassVar[str] = "undo"
    record_id: str | None = None


@dataclass(frozen=True)
class Redo:
    """Put a change back by rolling back the undo that reverted it (`record_id`: that undo's record)."""
    label: ClassVar[str] = "redo"
    record_id: str


Request = (Passthrough | Release | Pin | PinAll | MigLayout | MigSave | MigRestore | VgpuCreate | VgpuRemove
           | DoctorFix | Undo | Redo | NicVfs | NicPassthrough | Drain | Undrain | Reset | Prepare)


class ActionSession:
    """Plans and applies requests on one host; see the module docstring."""

    def __init__(self, host: ActionHost) -> None:
        self.host = host

    @classmethod
    def from_seams(cls, seams: Seams, on_changed: Callable[[], None] | None = None) -> ActionSession:
        """The session on the host behind `seams` (real, captured or demo). `on_changed` hears about every
        applied change (e.g. the console's Collector.invalidate)."""
        return cls(ActionHost.from_seams(seams, on_changed=on_changed))

    # -- planning ------------------------------------------------------------------------------------
    def plan(self, request: Request) -> Plan:
        """The plan for `request`, from a fresh read of the host. RequestError (NothingToDo included) for
        bad input, StepError when a step cannot be built."""
        host = self.host
        if isinstance(request, Undo | Redo):
            return self._plan_undo(request)
        if isinstance(request, MigLayout):
            _check_mig_layout(request)
        if isinstance(request, DoctorFix):
            from nodeconsole.actions.doctor_fixes import check_request

            check_request(request.ids, request.role)  # bad ids are refused before the host is read
        snap = host.snapshot()
        _check_names(request, snap)
        plan = _builder(request)(host, snap)
        # work put on a GPU (not MIG turned off: that takes work away) waits for a healthy GPU
        if isinstance(request, Passthrough | VgpuCreate) or (isinstance(request, MigLayout) and not request.off):
            from nodeconsole.actions.health_gate import gate
            from nodeconsole.actions.targets import resolve_gpu

            plan = gate(plan, snap, resolve_gpu(snap, request.gpu), request.allow_unhealthy, host.snapshot)
        if plan.needs_reboot:
            from nodeconsole.console.reboot_impact import impact_sentence

            if hit := impact_sentence(snap):
                plan.notes.append(f"takes effect at the next reboot: {hit}")
        if isinstance(request, NicPassthrough):  # a NIC paired with a drained GPU's VM is new work too
            from nodeconsole.actions.drain_gate import gate_vm

            plan = gate_vm(plan, snap, request.vm, host.snapshot)
        return plan

    def _plan_undo(self, request: Undo | Redo) -> Plan:
        from nodeconsole.actions.undo import plan_undo

        log = self.host.audit
        if isinstance(request, Redo):
            try:
                record = log.find(request.record_id)
            except OSError:
                record = None  # plan_undo reports the unreadable log
            if record is not None and not record.undoes:
                raise RequestError(f"{request.record_id} is not an undo: there is nothing to redo "
                                   f"(undo it instead)")
        elif request.record_id is None:
            try:
                if log.latest_undoable() is None:
                    raise NothingToDo(f"nothing to undo: no recorded change left to roll back ({log.path})")
            except OSError:
                pass  # plan_undo reports the unreadable log
        return plan_undo(self.host, request.record_id)

    def mig_state(self, gpu: str) -> MigState:
        """What NVML says about one GPU's MIG mode, layout and profiles (for an editor). RequestError when
        the GPU is unknown, not on the nvidia driver or not MIG capable."""
        from nodeconsole.actions.mig import mig_state_for
        from nodeconsole.actions.targets import resolve_gpu

        snap = self.host.snapshot()
        g = resolve_gpu(snap, gpu)
        if g.driver != "nvidia" or g.nvml_index is None:
            raise RequestError(f"{gpu} is not on the nvidia driver: NVML cannot manage its MIG mode")
        st = mig_state_for(self.host, snap, g)
        if not st.capable or not st.profiles:
            raise RequestError(f"{g.name} does not support MIG (or its profiles are unknown)")
        return st

    def place(self, count: int, *, with_nic: bool = False, vm: str | None = None,
              memory_factor: float = 2.0) -> Placement:
        """`place`'s recommendation on a fresh read of the host (actions/placement.py), as `Prepare` plans
        with it: for a form that shows where a VM would go before it is planned."""
        from nodeconsole.actions.placement import place

        return place(self.host.snapshot(), self.host.root, count, with_nic=with_nic, vm=vm,
                     memory_factor=memory_factor)

    # -- applying ------------------------------------------------------------------------------------
    @staticmethod
    def can_apply(plan: Plan) -> bool:
        """Whether the plan has changes to make (a refused or empty plan is only shown)."""
        return plan.ok and not plan.empty

    @staticmethod
    def typed_confirmation(plan: Plan) -> str | None:
        """The text (a GPU's address) the admin must type to confirm; None when yes/no is enough."""
        return needs_typed_confirmation(plan)

    def refusal(self, plan: Plan) -> str:
        """Why `apply` would refuse this plan before asking ('' when it would go on)."""
        return Runner(self.host).refusal(plan)

    def apply(self, plan: Plan, confirm: Confirm | None = None, progress: ProgressFn | None = None) -> RunResult:
        """Apply `plan`: refused plans and hosts are refused, `confirm(plan)` is asked once before anything
        changes (None: no question), then the host lock, each step applied and verified with `progress`
        events, the audit record, and a step-by-step rollback on failure or interruption. An empty undo
        plan is recorded as done, so a plain `undo` moves on."""
        return Runner(self.host).run(plan, confirm=confirm, progress=progress)


def _check_mig_layout(request: MigLayout) -> None:
    if request.layout is not None and request.off:
        raise RequestError("give a LAYOUT or --off, not both")
    if request.layout is None and not request.off:
        raise RequestError("give a LAYOUT or --off")
    if request.layout is not None and not request.layout.strip():
        # an empty word is no layout: it must not turn MIG mode on (a GPU reset on real hardware)
        raise RequestError("empty LAYOUT: give profiles (e.g. 3g.40gb,1g.10gb*2), `none` for MIG on without "
                           "instances, or --off")


def _check_names(request: Request, snap: HostSnapshot) -> None:
    """A VM the request names must exist: one message for every request (the closest names offered,
    `unknown VM trian-a (did you mean train-a?)`), before any planner reads it. GPU names are resolved
    by every planner through `resolve_gpu`, which offers the closest GPU names the same way. While
    libvirt does not answer, each planner says so in its own words."""
    vm = getattr(request, "vm", None)
    if isinstance(vm, str) and snap.sources.libvirt.ok:
        from nodeconsole.actions.targets import resolve_vm

        resolve_vm(snap, vm)


Builder = Callable[[ActionHost, "HostSnapshot"], Plan]


def _builder(r: Request) -> Builder:
    """The planner of a (non-undo) request, as `build(host, snapshot)`; planners are imported on use."""
    if isinstance(r, Passthrough | Release):
        from nodeconsole.actions.passthrough import plan_passthrough, plan_release

        if isinstance(r, Release):
            return lambda h, s: plan_release(h, s, r.gpu)
        return lambda h, s: plan_passthrough(h, s, r.gpu, vm=r.vm, persist=r.persist, with_nic=r.with_nic,
                                             allow_far_nic=r.allow_far_nic)
    if isinstance(r, NicVfs | NicPassthrough):
        from nodeconsole.actions.nic import plan_nic_passthrough, plan_nic_vfs

        if isinstance(r, NicVfs):
            return lambda h, s: plan_nic_vfs(h, s, r.pf, r.count, persist=r.persist, host_driver=r.host_driver)
        return lambda h, s: plan_nic_passthrough(h, s, r.vf, r.vm)
    if isinstance(r, Pin | PinAll):
        from nodeconsole.actions.pinning import plan_pin, plan_pin_all

        if isinstance(r, PinAll):
            return lambda h, s: plan_pin_all(h, s, reserve=r.reserve, allow_overlap=r.allow_overlap)
        return lambda h, s: plan_pin(h, s, r.vm, cpus=r.cpus, reserve=r.reserve, allow_overlap=r.allow_overlap)
    if isinstance(r, MigLayout):
        from nodeconsole.actions.mig import plan_mig

        return lambda h, s: plan_mig(h, s, r.gpu, r.layout, r.off)
    if isinstance(r, MigSave | MigRestore):
        from nodeconsole.actions.mig_persist import plan_mig_restore, plan_mig_save

        return plan_mig_save if isinstance(r, MigSave) else plan_mig_restore
    if isinstance(r, VgpuCreate | VgpuRemove):
        from nodeconsole.actions.vgpu import plan_vgpu_create, plan_vgpu_remove

        if isinstance(r, VgpuRemove):
            return lambda h, s: plan_vgpu_remove(h, s, r.vgpu)
        return lambda h, s: plan_vgpu_create(h, s, r.gpu, r.type, vm=r.vm, uuid=r.uuid)
    if isinstance(r, Drain | Undrain):
        from nodeconsole.actions.drain import plan_drain, plan_undrain

        if isinstance(r, Undrain):
            return lambda h, s: plan_undrain(h, s, r.gpu)
        return lambda h, s: plan_drain(h, s, r.gpu, r.reason)
    if isinstance(r, Reset):
        from nodeconsole.actions.reset import plan_reset

        return lambda h, s: plan_reset(h, s, r.gpu, r.force)
    if isinstance(r, Prepare):
        from nodeconsole.actions.prepare import plan_prepare

        return lambda h, s: plan_prepare(h, s, r.vm, r.gpus, with_nic=r.with_nic, vcpus=r.vcpus,
                                         memory_kib=r.memory_kib, memory_factor=r.memory_factor,
                                         hugepages=r.hugepages)
    if isinstance(r, DoctorFix):
        from nodeconsole.actions.doctor_fixes import plan_doctor_fix

        return lambda h, s: plan_doctor_fix(h, s, r.ids, r.role)
    raise RequestError(f"unknown request {r!r}")
