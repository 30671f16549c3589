"""GPUs: mig-pending, vgpu-host."""
from __future__ import annotations

from nodeconsole.console.doctor.checks_common import Context, Verdict, names, not_applicable, skipped
from nodeconsole.console.doctor.model import CheckResult, Evidence, Fix
from nodeconsole.console.model import NA, Gpu


def check_mig_pending(ctx: Context) -> CheckResult:
    v = Verdict("mig-pending")
    snap = ctx.snap
    if not snap.gpus:
        return skipped("mig-pending", "no NVIDIA GPU found")
    down = ctx.source_down("nvml")
    if down:
        return skipped("mig-pending", f"cannot check: {down}")
    seen = [g for g in snap.gpus if g.nvml_index is not None and not g.nvml_error]
    if not seen:
        return skipped("mig-pending", "NVML sees no GPU (all on vfio-pci or unbound)")
    capable = [g for g in seen if g.mig.mode != NA and g.mig.pending_mode != NA]
    pending = [g for g in capable if g.mig.mode != g.mig.pending_mode]
    if capable:
        v.evidence.append(Evidence("NVML MIG mode", ", ".join(
            f"GPU {g.index} {g.mig.mode}" + (f" -> {g.mig.pending_mode}" if g in pending else "") for g in capable)))
    if pending:
        v.warns.append("MIG mode change waits for a GPU reset: " + names(
            [f"{ctx.label(g)} {g.mig.mode} -> {g.mig.pending_mode}" for g in pending], 4))
        v.fix = Fix("reset those GPUs when idle (stops everything on them), or reboot",
                    tuple(f"nvidia-smi -r -i {g.nvml_index}" for g in pending), False, False)
    if not capable:
        return v.result("no GPU NVML sees is MIG-capable")
    return v.result(f"no MIG mode change pending ({len(capable)} MIG-capable GPU(s))")


def _vgpu_in_use(ctx: Context) -> list[Gpu]:
    return [g for g in ctx.snap.gpus if g.vgpu.instances or g.owner.kind == "vgpu"]


def check_vgpu_host(ctx: Context) -> CheckResult:
    v = Verdict("vgpu-host")
    snap = ctx.snap
    in_use = _vgpu_in_use(ctx)
    if ctx.role != "vgpu" and not in_use:
        why = "no vGPU in use" if ctx.role == "mixed" else f"not needed for role {ctx.role}"
        return not_applicable("vgpu-host", why + " (no vGPU instance on any GPU)" if ctx.role != "mixed" else why)
    if not snap.gpus:
        return skipped("vgpu-host", "no NVIDIA GPU found")
    with_types = [g for g in snap.gpus if g.vgpu.types]
    v.evidence.append(Evidence("vGPU types", ", ".join(f"GPU {g.index}: {len(g.vgpu.types)}" for g in with_types)
                               or "none offered"))
    if not with_types:
        down = ctx.source_down("nvml")
        if down:
            v.missing.append(down)
        else:
            v.fails.append("no GPU offers a vGPU type: the vGPU manager (NVIDIA's vGPU host driver) is not "
                           "installed or not loaded")
            v.fix = Fix("install NVIDIA's vGPU manager (the host driver from the NVIDIA licensing portal) "
                        "and reboot", (), True, False)
    need_vfs = []
    for g in snap.gpus:
        dev = ctx.by_addr.get(g.address)
        if dev is None or not dev.sriov_totalvfs:
            continue
        v.evidence.append(Evidence(f"/sys/bus/pci/devices/{g.address}/sriov_numvfs",
                                   f"{dev.sriov_numvfs} of {dev.sriov_totalvfs}"))
        wanted = g in in_use or (ctx.role == "vgpu" and g.driver == "nvidia")
        if wanted and not dev.sriov_numvfs:
            need_vfs.append(g)
    if need_vfs:
        v.warns.append(f"SR-IOV virtual functions are not enabled on {names([ctx.label(g) for g in need_vfs], 4)}")
        v.fix = v.fix or Fix("enable the VFs (NVIDIA's sriov-manage; at boot through nvidia-sriov.service)",
                             tuple(f"/usr/lib/nvidia/sriov-manage -e {g.address}" for g in need_vfs), False, False)
    used = sum(len(g.vgpu.instances) for g in snap.gpus)
    sriov = [g for g in snap.gpus if (d := ctx.by_addr.get(g.address)) is not None and d.sriov_totalvfs]
    return v.result(f"vGPU manager answers ({len(with_types)} GPU(s) offer vGPU types), {used} vGPU(s) in use"
                    + ("; SR-IOV VFs enabled where needed" if sriov else ""))
