"""`run_doctor(snapshot, root, role, changes)`: every check, in the order of model.GROUPS.

One pass over the snapshot (facts derived once in the Context), each file read at most once (HostFiles),
no libvirt or NVML call: what the sources say comes from the snapshot. A check that does not apply to
the role is skipped saying so; a check that breaks is skipped naming the error (and noted), so one bad
read never costs the other checks.

`changes` are audit records of applied changes. A record with `needs_reboot: true` names the checks it
fixes (`fixes`) and the boot it was applied in (`boot_id`): while the host's boot_id is that one, those
checks are "pending reboot (change ID)"; after a reboot they say whether the change took effect.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from nodeconsole.console.audit_log import AuditRecord, Status
from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, not_applicable, skipped
from nodeconsole.console.doctor.checks_daemon import check_libvirtd
from nodeconsole.console.doctor.checks_gpus import check_mig_pending, check_vgpu_host
from nodeconsole.console.doctor.checks_hyper import check_cgroups, check_secure_guest, check_tun, check_vhost_net
from nodeconsole.console.doctor.checks_kernel import (
    check_acs_override,
    check_interrupt_remapping,
    check_iommu,
    check_iommu_pt,
    check_kvm,
)
from nodeconsole.console.doctor.checks_memory import (
    check_host_cores,
    check_hugepages,
    check_numa_balancing,
    check_vcpu_commit,
)
from nodeconsole.console.doctor.checks_modules import check_nouveau, check_nvidia_driver, check_vfio_modules
from nodeconsole.console.doctor.checks_pcie import check_acs, check_pcie_link
from nodeconsole.console.doctor.checks_proxmox import check_pve_hookscripts, check_pve_mappings, check_pve_vfio
from nodeconsole.console.doctor.checks_vms import check_vm_memory
from nodeconsole.console.doctor.files import HostFiles
from nodeconsole.console.doctor.model import CHECK_IDS, GPU_CHECKS, NO_GPU, ROLES, CheckResult, DoctorReport
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.root import Root
from nodeconsole.console.sources.types import Hypervisor

CHECKS: dict[str, Callable[[Context], CheckResult]] = {
    "kvm": check_kvm,
    "iommu": check_iommu,
    "iommu-pt": check_iommu_pt,
    "interrupt-remapping": check_interrupt_remapping,
    "acs-override": check_acs_override,
    "vfio-modules": check_vfio_modules,
    "nouveau": check_nouveau,
    "nvidia-driver": check_nvidia_driver,
    "libvirtd": check_libvirtd,
    "vhost-net": check_vhost_net,
    "tun": check_tun,
    "cgroups": check_cgroups,
    "secure-guest": check_secure_guest,
    "hugepages": check_hugepages,
    "host-cores": check_host_cores,
    "vcpu-commit": check_vcpu_commit,
    "numa-balancing": check_numa_balancing,
    "acs": check_acs,
    "pcie-link": check_pcie_link,
    "mig-pending": check_mig_pending,
    "vgpu-host": check_vgpu_host,
    "vm-memory": check_vm_memory,
    "pve-vfio": check_pve_vfio,
    "pve-mappings": check_pve_mappings,
    "pve-hookscripts": check_pve_hookscripts,
}
assert tuple(CHECKS) == CHECK_IDS, "every check id has its check, in display order"

# Checks that only some roles need (the rest apply to every role — nouveau too: it must not hold the GPUs
# of any host; vgpu-host decides for itself: it applies to role vgpu and wherever vGPU is in use).
ROLE_ONLY: dict[str, tuple[str, ...]] = {
    "vfio-modules": ("passthrough", "mixed"),
    "mig-pending": ("mig", "mixed"),
}


def no_gpu(snap: HostSnapshot) -> bool:
    """True when sysfs was read and shows no NVIDIA GPU: the GPU checks do not apply (model.GPU_CHECKS)."""
    return snap.sources.sysfs.ok and not snap.gpus


def run_doctor(snap: HostSnapshot, root: Root, role: str = "mixed",
               changes: Iterable[AuditRecord] = (), hypervisor: Hypervisor | None = None) -> DoctorReport:
    """Every check on `snap` and the files below `root`, for `role` (model.ROLES). `hypervisor`: what the
    VM source's connection said of itself (the collector's), for the libvirtd check's evidence."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (one of {', '.join(ROLES)})")
    files = HostFiles(root)
    ctx = Context(snap, files, role, hypervisor)
    results: list[CheckResult] = []
    notes: list[str] = []
    gpu_less = no_gpu(snap)
    for cid, check in CHECKS.items():
        roles = ROLE_ONLY.get(cid)
        if roles is not None and role not in roles:
            results.append(not_applicable(cid, f"not needed for role {role}"))
            continue
        if gpu_less and cid in GPU_CHECKS:
            results.append(not_applicable(cid, NO_GPU))
            continue
        try:
            results.append(check(ctx))
        except Exception as exc:  # one broken read must not cost the other checks
            results.append(skipped(cid, f"the check could not run: {type(exc).__name__}: {exc}"))
            notes.append(f"{cid}: {type(exc).__name__}: {exc}")
    boot_id = files.read(facts.BOOT_ID) or ""
    results = mark_pending(results, changes, boot_id)
    for name in ("sysfs", "nvml", "libvirt"):
        status = getattr(snap.sources, name)
        if not status.ok:
            notes.append(f"{name}: {status}")
    if any(c.fix is not None and c.fix.needs_reboot and c.fix.plannable for c in results):
        notes.append(f"boot loader: {ctx.loader.describe()}")
    return DoctorReport(role=role, checks=tuple(results), boot_id=boot_id, notes=tuple(notes))


def mark_pending(results: list[CheckResult], changes: Iterable[AuditRecord],
                 boot_id: str) -> list[CheckResult]:
    """Each check named by an applied, not undone change that needs a reboot gets its note: pending while
    the boot is the one the change was applied in (or the boot cannot be told), else whether it took
    effect — the check passes now or not (a skipped check gets no note). The latest change wins."""
    latest: dict[str, tuple[str, bool]] = {}  # check id → (change id, still the same boot)
    for r in changes:
        if r.needs_reboot is not True or r.result != Status.APPLIED or r.undone_by:
            continue
        same_boot = not boot_id or r.boot_id == boot_id
        for cid in r.fixes:
            latest[cid] = (r.id, same_boot)
    out = []
    for c in results:
        if c.id not in latest:
            out.append(c)
            continue
        rid, same_boot = latest[c.id]
        if same_boot:
            text = f"pending reboot (change {rid})"
        elif c.status == "pass":
            text = f"took effect after reboot (change {rid})"
        elif c.status in ("warn", "fail"):
            text = f"did not take effect after reboot (change {rid})"
        else:
            text = ""
        out.append(replace(c, pending=text) if text else c)
    return out
