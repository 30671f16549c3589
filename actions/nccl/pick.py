"""Which GPUs an NCCL check on this host uses.

By default the check takes the GPUs the host drives itself that are idle and healthy; every other GPU
is skipped, with its reasons (a finding each). A list the admin names is taken as given: its busy or
unhealthy GPUs become preflight warnings instead. Everything here reads the snapshot only (no I/O).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodeconsole.actions.nccl.finding import Finding
from nodeconsole.console.model import Gpu, HostSnapshot

# Owners whose GPU the host itself can drive (CUDA sees it through the nvidia driver).
HOST_OWNERS = ("host",)
MAX_NAMES = 3  # process names shown per GPU


@dataclass(frozen=True)
class Thresholds:
    """When a GPU counts as busy: any process on it, utilization above `utilization_pct`, or more than
    `memory_fraction` of its memory in use."""
    utilization_pct: float = 10.0
    memory_fraction: float = 0.5


DEFAULT_THRESHOLDS = Thresholds()


def _num(v: object) -> float | None:
    """A metric as a number; None for N/A, unread or anything else."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def unusable_reason(g: Gpu) -> str:
    """Why the host's CUDA cannot run the check on this GPU ("" when it can)."""
    vms = f" (VM {', '.join(g.owner.vms)})" if g.owner.vms else ""
    if g.owner.kind == "unbound" or not g.driver:
        return "bound to no driver"
    if g.driver != "nvidia" or g.owner.kind == "vfio":
        return f"on {g.driver}{vms}"
    if g.owner.kind == "mig":
        return f"MIG enabled{vms}"
    if g.owner.kind == "vgpu":
        return f"serves vGPUs{vms}"
    if g.owner.kind not in HOST_OWNERS:
        return f"owned by {g.owner.kind}{vms}"
    if not (g.uuid and g.uuid.startswith("GPU-")) and g.nvml_index is None:
        return "not visible to the NVIDIA driver"
    return ""


def busy_reasons(g: Gpu, t: Thresholds = DEFAULT_THRESHOLDS) -> tuple[str, ...]:
    """What shows the GPU at work: its processes (and the memory they hold); without any, utilization or
    memory in use above the thresholds (work NVML does not attribute to a process). The processes say
    more than the load figures, and unlike them they do not change from one reading to the next."""
    if g.processes:
        names = list(dict.fromkeys(p.name for p in g.processes))
        shown = ", ".join(names[:MAX_NAMES]) + (", …" if len(names) > MAX_NAMES else "")
        n = len(g.processes)
        held = [m for p in g.processes if (m := _num(p.used_memory_mib)) is not None]
        using = f" using {sum(held):.0f} MiB" if held else ""
        return (f"{n} process{'es' if n != 1 else ''} ({shown}){using}",)
    out = []
    util = _num(g.utilization_gpu)
    if util is not None and util > t.utilization_pct:
        out.append(f"utilization {util:.0f} %")
    used, total = _num(g.memory_used_mib), _num(g.memory_total_mib)
    if used is not None and total and used / total > t.memory_fraction:
        out.append(f"memory {used / total * 100:.0f} % used ({used:.0f} of {total:.0f} MiB)")
    return tuple(out)


def health_reasons(g: Gpu) -> tuple[str, ...]:
    """Why the GPU is unfit to measure: the reasons of its health verdict (console/health.py), the one
    every consumer reads; () when healthy."""
    return g.health.reasons if g.health.state != "healthy" else ()


@dataclass(frozen=True)
class GpuCondition:
    """One GPU as the pick sees it."""
    gpu: Gpu
    unusable: str  # why the host cannot use it ("" when it can)
    busy: tuple[str, ...]
    unhealthy: tuple[str, ...]  # the verdict's reasons when it is unhealthy
    degraded: tuple[str, ...] = ()  # … when it is degraded: picked only when no healthy GPU is left
    drained: str = ""  # the admin's drain (who, when, why): never picked, never taken when named

    @property
    def ok(self) -> bool:
        return not (self.drained or self.unusable or self.busy or self.unhealthy or self.degraded)

    @property
    def state(self) -> str:
        """One word for lists: "idle", "busy", "unhealthy", "busy, unhealthy" or "unusable"."""
        if self.drained:
            return "drained"
        if self.unusable:
            return "unusable"
        return ", ".join(w for w, on in (("busy", self.busy), ("unhealthy", self.unhealthy),
                                         ("degraded", self.degraded)) if on) or "idle"

    def describe(self) -> str:
        """The reasons in one line, e.g. "busy: 2 processes (python3, torchrun), utilization 88 %"."""
        if self.drained:
            return self.drained
        if self.unusable:
            return self.unusable
        parts = []
        if self.busy:
            parts.append(f"busy: {', '.join(self.busy)}")
        if self.unhealthy:
            parts.append(f"unhealthy: {', '.join(self.unhealthy)}")
        if self.degraded:
            parts.append(f"degraded: {', '.join(self.degraded)}")
        return "; ".join(parts) or "idle, healthy"

    def to_dict(self) -> dict[str, object]:
        g = self.gpu
        return {"index": g.index, "address": g.address, "state": self.state, "unusable": self.unusable or None,
                "busy": list(self.busy), "unhealthy": list(self.unhealthy),
                "degraded": list(self.degraded), "drained": self.drained or None}


def condition(g: Gpu, t: Thresholds = DEFAULT_THRESHOLDS) -> GpuCondition:
    unusable = unusable_reason(g)
    # A GPU the host cannot drive has no host-side load to read; its link health still counts.
    bad = g.health.reasons if g.health.unhealthy else ()
    weak = g.health.reasons if g.health.state == "degraded" else ()
    drained = f"drained by {g.drain.who} at {g.drain.when}: {g.drain.reason}" if g.drain is not None else ""
    return GpuCondition(g, unusable, () if unusable else busy_reasons(g, t), bad, weak, drained)


def conditions(snap: HostSnapshot, t: Thresholds = DEFAULT_THRESHOLDS) -> tuple[GpuCondition, ...]:
    return tuple(condition(g, t) for g in snap.gpus)


@dataclass(frozen=True)
class Pick:
    """The GPUs a check uses; with `automatic`, the ones it skipped and why."""
    gpus: tuple[Gpu, ...]
    automatic: bool
    skipped: tuple[GpuCondition, ...] = ()

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)


def auto_pick(snap: HostSnapshot, t: Thresholds = DEFAULT_THRESHOLDS) -> Pick:
    """Every idle, healthy GPU the host drives; the rest skipped. Degraded idle GPUs only when no healthy
    one is left (the check then says so)."""
    conds = conditions(snap, t)
    picked = [c for c in conds if c.ok]
    if not picked:
        picked = [c for c in conds if c.degraded and not (c.drained or c.unusable or c.busy or c.unhealthy)]
    return Pick(tuple(c.gpu for c in picked), True, tuple(c for c in conds if c not in picked))


def skip_findings(pick: Pick) -> list[Finding]:
    """One note per GPU the automatic pick left out, and a warning when it leaves fewer than two."""
    if not pick.automatic:
        return []
    out = []
    for c in pick.skipped:
        g = c.gpu
        if c.drained:
            why = "an admin drained it: no new work goes on it, --gpus and --allow-unhealthy included"
            fix = f"`nodeconsole gpu undrain {g.address}` when it is fit again"
        elif c.unusable:
            why = "the host's CUDA only drives GPUs bound to the nvidia driver, without MIG or vGPU"
            fix = (f"test it inside its VM: `nodeconsole nccl check --vm {g.owner.vms[0]}`" if g.owner.vms
                   else "nothing to do")
        elif c.busy:
            why = ("a check beside running work measures the contention, not the links, and slows that work"
                   + ("; the GPU is unhealthy too" if c.unhealthy else ""))
            fix = f"test it anyway with --gpus {g.index} (P on the NCCL screen), or when its work is done"
        elif c.unhealthy:
            why = "its health verdict is unhealthy: the check would fail, or measure the fault"
            fix = f"recover it first (see the Overview's problems); --gpus {g.index} --allow-unhealthy tests it anyway"
        elif c.degraded:
            why = "a degraded GPU skews the check (a narrow link, slowed clocks): healthy GPUs are measured instead"
            fix = f"--gpus {g.index} tests it anyway"
        else:
            why = "a faulty GPU or a downtrained link fails or skews the check"
            fix = f"fix it first (see the Overview's problems); --gpus {g.index} tests it anyway"
        out.append(Finding("info", "nccl.gpu_skipped", f"GPU {g.index} ({g.address}) skipped: {c.describe()}",
                           why, fix, subject=g.address))
    if len(pick.gpus) == 1 and pick.skipped:
        g = pick.gpus[0]
        out.append(Finding("warning", "nccl.one_gpu", f"only GPU {g.index} ({g.address}) is idle and healthy",
                           "a check on one GPU moves no data between GPUs: it measures no link",
                           "name two or more GPUs with --gpus (busy or unhealthy ones get a warning)",
                           subject="gpus"))
    return out


def selection_findings(gpus: Sequence[Gpu], t: Thresholds = DEFAULT_THRESHOLDS,
                       allow_unhealthy: bool = False) -> list[Finding]:
    """Findings about the selected GPUs: an unhealthy one refuses the check (an error) unless
    `allow_unhealthy`; busy or degraded ones are warnings (a GPU the host cannot drive shows no load
    here, but its verdict still counts)."""
    out = []
    for g in gpus:
        c = condition(g, t)
        if c.drained:  # before anything else about it: a drain is lifted only by `gpu undrain`
            also = f" (also unhealthy: {'; '.join(c.unhealthy)})" if c.unhealthy else ""
            out.append(Finding(
                "error", "nccl.gpu_drained", f"GPU {g.index} ({g.address}) is {c.drained}{also}",
                "an admin drained it: no new work goes on it (--allow-unhealthy does not lift a drain)",
                f"leave it out, or `nodeconsole gpu undrain {g.address}` when it is fit again", subject=g.address))
            continue
        if c.busy:
            out.append(Finding(
                "warning", "nccl.gpu_busy", f"GPU {g.index} ({g.address}) is busy: {', '.join(c.busy)}",
                "the check competes with the work running there: the bandwidth reads low and that work "
                "slows down", "leave --gpus out to pick idle GPUs, or run the check when the work is done",
                subject=g.address))
        if c.unhealthy:
            out.append(Finding(
                "warning" if allow_unhealthy else "error", "nccl.gpu_unhealthy",
                f"GPU {g.index} ({g.address}) is unhealthy: {'; '.join(c.unhealthy)}",
                "the run would fail or measure the fault, not the setup"
                + (" (going ahead: --allow-unhealthy)" if allow_unhealthy else ""),
                "recover it first (the Overview lists the problem and its fix), leave it out, or add "
                "--allow-unhealthy", subject=g.address))
        elif c.degraded:
            out.append(Finding(
                "warning", "nccl.gpu_degraded", f"GPU {g.index} ({g.address}) is degraded: {'; '.join(c.degraded)}",
                "a narrow link or slowed clocks cap the bandwidth: the result says more about this GPU than "
                "about the setup", "fix it first (the Overview lists the problem), or leave it out",
                subject=g.address))
    return out
