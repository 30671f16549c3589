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
    """What makes the GPU unfit to measure: NVML errors, uncorrected memory errors, row remapping
    pending or failed, a PCIe link trained below its width."""
    out = []
    if g.nvml_error:
        out.append(f"NVML error: {g.nvml_error}")
    ecc = _num(g.ecc_volatile_uncorrected)
    if ecc:
        out.append(f"{ecc:.0f} uncorrected ECC error{'s' if ecc != 1 else ''}")
    if _num(g.remapped_rows_pending):
        out.append("row remapping pending")
    if _num(g.remapped_rows_failure):
        out.append("row remapping failed")
    if g.link.downtrained:
        out.append(f"PCIe link x{g.link.current_width} of x{g.link.max_width}")
    return tuple(out)


@dataclass(frozen=True)
class GpuCondition:
    """One GPU as the pick sees it."""
    gpu: Gpu
    unusable: str  # why the host cannot use it ("" when it can)
    busy: tuple[str, ...]
    unhealthy: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not (self.unusable or self.busy or self.unhealthy)

    @property
    def state(self) -> str:
        """One word for lists: "idle", "busy", "unhealthy", "busy, unhealthy" or "unusable"."""
        if self.unusable:
            return "unusable"
        return ", ".join(w for w, on in (("busy", self.busy), ("unhealthy", self.unhealthy)) if on) or "idle"

    def describe(self) -> str:
        """The reasons in one line, e.g. "busy: 2 processes (python3, torchrun), utilization 88 %"."""
        if self.unusable:
            return self.unusable
        parts = []
        if self.busy:
            parts.append(f"busy: {', '.join(self.busy)}")
        if self.unhealthy:
            parts.append(f"unhealthy: {', '.join(self.unhealthy)}")
        return "; ".join(parts) or "idle, healthy"

    def to_dict(self) -> dict[str, object]:
        g = self.gpu
        return {"index": g.index, "address": g.address, "state": self.state, "unusable": self.unusable or None,
                "busy": list(self.busy), "unhealthy": list(self.unhealthy)}


def condition(g: Gpu, t: Thresholds = DEFAULT_THRESHOLDS) -> GpuCondition:
    unusable = unusable_reason(g)
    # A GPU the host cannot drive has no host-side load to read; its link health still counts.
    return GpuCondition(g, unusable, () if unusable else busy_reasons(g, t), health_reasons(g))


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
    """Every idle, healthy GPU the host drives; the rest skipped."""
    conds = conditions(snap, t)
    return Pick(tuple(c.gpu for c in conds if c.ok), True, tuple(c for c in conds if not c.ok))


def skip_findings(pick: Pick) -> list[Finding]:
    """One note per GPU the automatic pick left out, and a warning when it leaves fewer than two."""
    if not pick.automatic:
        return []
    out = []
    for c in pick.skipped:
        g = c.gpu
        if c.unusable:
            why = "the host's CUDA only drives GPUs bound to the nvidia driver, without MIG or vGPU"
            fix = (f"test it inside its VM: `nodeconsole nccl check --vm {g.owner.vms[0]}`" if g.owner.vms
                   else "nothing to do")
        elif c.busy:
            why = ("a check beside running work measures the contention, not the links, and slows that work"
                   + ("; the GPU is unhealthy too" if c.unhealthy else ""))
            fix = f"test it anyway with --gpus {g.index} (P on the NCCL screen), or when its work is done"
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


def selection_findings(gpus: Sequence[Gpu], t: Thresholds = DEFAULT_THRESHOLDS) -> list[Finding]:
    """Warnings about busy or unhealthy GPUs among the selected ones (a GPU the host cannot drive shows
    no load here, but its link and memory errors still count)."""
    out = []
    for g in gpus:
        c = condition(g, t)
        if c.busy:
            out.append(Finding(
                "warning", "nccl.gpu_busy", f"GPU {g.index} ({g.address}) is busy: {', '.join(c.busy)}",
                "the check competes with the work running there: the bandwidth reads low and that work "
                "slows down", "leave --gpus out to pick idle GPUs, or run the check when the work is done",
                subject=g.address))
        if c.unhealthy:
            out.append(Finding(
                "warning", "nccl.gpu_unhealthy", f"GPU {g.index} ({g.address}) is unhealthy: "
                f"{', '.join(c.unhealthy)}",
                "memory errors can fail or corrupt the run and a downtrained link caps its bandwidth, so the "
                "result says more about this GPU than about the setup",
                "fix it first (the Overview lists the problem and its fix), or leave it out", subject=g.address))
    return out
