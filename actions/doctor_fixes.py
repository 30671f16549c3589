"""The doctor's fixes as plans (`DoctorFix(ids)` through actions/session.py): one plan for the named checks,
applied, verified, audited and undone like every other change.

A request for several checks is batched: all kernel command-line words go into ONE edit of the boot
loader the host uses (detected by console/doctor/bootloader.py, never guessed), and every file that
changes what the initramfs holds into ONE write followed by ONE rebuild. Steps that take effect only at
the next boot say so, and so does the plan ("apply these, then reboot once"); the runner records the
boot they were applied in, so the doctor reports them as pending until the host has rebooted.

Checks whose fix is firmware, hardware or a decision for the admin (kvm, interrupt-remapping, acs,
pcie-link, vcpu-commit, mig-pending, vgpu-host) are not planned: a request naming one is
refused with what to do by hand.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nodeconsole.actions.boot_hugepages import boot_covers
from nodeconsole.actions.boot_steps import GRUB_CFGS, encode, loader_words
from nodeconsole.actions.doctor_host import INITRAMFS_REBUILD, initramfs_tool, module_ops
from nodeconsole.actions.doctor_sizing import host_cores, hugepage_needs
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.live_steps import UNITS, page_text
from nodeconsole.actions.plan import Check, Op, Plan, RequestError, build_step
from nodeconsole.console.doctor import bootloader as bl
from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_proxmox import PVE_BY_HAND
from nodeconsole.console.doctor.model import CHECK_IDS, ROLES
from nodeconsole.console.doctor.run import ROLE_ONLY
from nodeconsole.console.grub_config import edit_cmdline, grub_files, grub_sources
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.root import Root
from nodeconsole.console.shell_assign import ShellEditError

ACTION = "doctor fix"
IOMMU_OFF_WORDS = ("intel_iommu=off", "amd_iommu=off", "iommu=off")
_UNIT_DIRS = ("usr/lib/systemd/system", "lib/systemd/system", "etc/systemd/system")

# What to do by hand, for the checks no plan can fix: (why no plan, what to do)
BY_HAND: dict[str, tuple[str, str]] = {
    "kvm": ("virtualization is switched on in the firmware",
            "turn on VT-x (Intel) or SVM (AMD) in the BIOS/UEFI setup, then load kvm_intel or kvm_amd "
            "(modprobe kvm_intel)"),
    "interrupt-remapping": ("interrupt remapping comes from the firmware and the IOMMU",
                            "turn on VT-d (Intel) or AMD-Vi with interrupt remapping in the BIOS/UEFI setup, "
                            "take intremap=off / nointremap off the kernel command line, and never set "
                            "vfio_iommu_type1 allow_unsafe_interrupts=1"),
    "acs": ("ACS is a property of the PCIe switch ports and the firmware",
            "turn ACS on in the BIOS/UEFI setup where it offers it, or put GPUs that must be isolated behind "
            "ports that have ACS (pcie_acs_override only makes the groups lie)"),
    "pcie-link": ("a link below its maximum is hardware",
                  "reseat the GPU, check that the slot is x16 electrically, check risers and cables and the "
                  "firmware's PCIe speed setting"),
    "vcpu-commit": ("how many vCPUs the VMs get is a decision for the admin",
                    "shrink VMs (virsh setvcpus VM N --config --maximum) or move some to another host"),
    "mig-pending": ("a pending MIG mode takes effect only after a GPU reset",
                    "stop what uses the GPU, then reset it (nvidia-smi --gpu-reset -i GPU) or reboot; "
                    "`nodeconsole mig GPU LAYOUT --apply` resets it as part of its plan"),
    "vgpu-host": ("the vGPU manager is NVIDIA's host driver package",
                  "install NVIDIA's vGPU host driver (the vGPU manager) and turn on the GPUs' SR-IOV VFs "
                  "(/usr/lib/nvidia/sriov-manage -e ALL)"),
    "libvirtd": ("starting the hypervisor's daemon is the admin's (and on Proxmox, its cluster's)",
                 "systemctl enable --now libvirtd (or virtqemud.socket where the host uses libvirt's modular "
                 "daemons; on Proxmox VE: systemctl enable --now pve-cluster)"),
    "cgroups": ("cgroup controllers come with the kernel and how systemd mounts them",
                "use a kernel with the controllers built in and let systemd mount them (cgroup v2: "
                "systemd.unified_cgroup_hierarchy=1), then reboot"),
    "secure-guest": ("secure guests are a firmware and kernel-parameter decision",
                     "turn SEV (AMD) or TDX (Intel) on in the firmware setup, then kvm_amd.sev=1 or "
                     "kvm_intel.tdx=1 on the kernel command line, and reboot"),
    **PVE_BY_HAND,  # Proxmox VE's checks
}
PLANNABLE = tuple(i for i in CHECK_IDS if i not in BY_HAND)


@dataclass
class _Parts:
    """What the fixes of one request add up to, before it becomes steps."""
    add: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    cmdline_for: list[str] = field(default_factory=list)  # the fixes that want the command line edited
    boot_files: dict[str, bytes | None] = field(default_factory=dict)  # files the initramfs is built from
    boot_for: list[str] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)  # everything else, in request order
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def cmdline(self, fix: str, add: Sequence[str] = (), remove: Sequence[str] = ()) -> None:
        self.add += [w for w in add if w not in self.add]
        self.remove += [w for w in remove if w not in self.remove]
        if fix not in self.cmdline_for:
            self.cmdline_for.append(fix)


@dataclass(frozen=True)
class _Ctx:
    host: ActionHost
    snap: HostSnapshot
    loader: bl.BootLoader
    initramfs: str | None  # "initramfs-tools", "dracut" or None (none found)

    @property
    def root(self) -> Root:
        return self.host.root


def check_request(ids: tuple[str, ...] | list[str], role: str) -> tuple[str, ...]:
    """The check ids in request order without repeats; RequestError for unknown ones or an unknown role."""
    if isinstance(ids, str):
        ids = (ids,)
    out = tuple(dict.fromkeys(i.strip() for i in ids if i and i.strip()))
    if not out:
        raise RequestError(f"name at least one check to fix (plannable: {', '.join(PLANNABLE)})")
    unknown = [i for i in out if i not in CHECK_IDS]
    if unknown:
        raise RequestError(f"unknown check id{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                           f"(checks: {', '.join(CHECK_IDS)})")
    if role not in ROLES:
        raise RequestError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")
    return out


def plan_doctor_fix(host: ActionHost, snap: HostSnapshot, ids: tuple[str, ...] | list[str],
                    role: str = "mixed") -> Plan:
    """The plan that fixes the checks `ids` (see the module doc). RequestError for unknown ids."""
    fixes = check_request(ids, role)
    plan = Plan(action=ACTION, title=f"Fix {', '.join(fixes)} (doctor)", request={"fixes": list(fixes), "role": role},
                rebuild=lambda: plan_doctor_fix(host, host.snapshot(), fixes, role))
    for i in fixes:
        if i in BY_HAND:
            why, what = BY_HAND[i]
            plan.checks.append(Check(f"{i} can be fixed by a plan", False, f"no: {why}", f"by hand: {what}"))
    if not plan.ok:
        return plan
    ctx = _Ctx(host, snap, bl.detect(host.root), initramfs_tool(host.root))
    parts = _Parts()
    for i in sorted(fixes, key=CHECK_IDS.index):  # vm-memory's hugepages at boot keep the hugepages fix's
        FIXERS[i](ctx, parts)
        if role not in ROLE_ONLY.get(i, ROLES):
            parts.notes.append(f"{i} is not needed for role {role} (planned because it was asked for)")
    plan.checks += parts.checks
    plan.notes += parts.notes
    if parts.add or parts.remove:
        _cmdline_op(ctx, parts, plan)
    rebuild = INITRAMFS_REBUILD[ctx.initramfs][0] if ctx.initramfs else ""
    if parts.boot_files and rebuild and not host.commands.which(rebuild):
        plan.checks.append(Check(f"{rebuild} is installed", False, f"this host's initramfs is built by {rebuild}, "
                                 f"which is not installed", "install it, then plan again"))
    if not plan.ok:
        return plan
    for op in _ops(ctx, parts):
        step = build_step(host, op)
        if step is not None:
            plan.steps.append(step)
    _reboot_notes(ctx, parts, plan)
    return plan


def cmdline_ops(host: ActionHost, snap: HostSnapshot, fix: str, words: list[str], plan: Plan) -> list[Op]:
    """The one boot-loader edit adding `words` to the kernel command line, for a plan other than the
    doctor's (prepare's hugepages at boot); a failing check added to `plan` instead when it cannot be made."""
    ctx = _Ctx(host, snap, bl.detect(host.root), initramfs_tool(host.root))
    parts = _Parts()
    parts.cmdline(fix, words)
    before = len(plan.checks)
    _cmdline_op(ctx, parts, plan)
    return [_boot_cmdline(ctx, parts)] if all(c.ok for c in plan.checks[before:]) else []


def current_words(host: ActionHost, snap: HostSnapshot) -> list[str]:
    """The kernel command line the boot loader's configuration gives now, as words."""
    return _current_words(_Ctx(host, snap, bl.detect(host.root), initramfs_tool(host.root)))


def _ops(ctx: _Ctx, parts: _Parts) -> list[Op]:
    """The operations in their order: the command line, the boot-time files, then the rest."""
    ops: list[Op] = []
    if parts.add or parts.remove:
        ops.append(_boot_cmdline(ctx, parts))
    if parts.boot_files:
        run = [INITRAMFS_REBUILD[ctx.initramfs]] if ctx.initramfs else []
        names = ", ".join(f"/{p}" for p in parts.boot_files)
        ops.append({"kind": "config_file", "needs_reboot": True, "run": run,
                    "title": f"Boot-time modules ({', '.join(parts.boot_for)}): write {names}"
                             + (f", then {' '.join(run[0])}" if run else ""),
                    "why": "the next boot loads the modules this says (and keeps blacklisted ones out) before "
                           "any GPU driver can take the GPUs" + ("; the initramfs is rebuilt once for all of "
                                                                 "them" if run else ""),
                    "files": [dict(encode(data), path=p) for p, data in parts.boot_files.items()]})
    return ops + parts.ops


def _cmdline_op(ctx: _Ctx, parts: _Parts, plan: Plan) -> None:
    """Refuse the command-line part when the boot loader is unknown (set it by hand) or its tool is not
    installed."""
    what = " ".join([f"add {w}" for w in parts.add] + [f"remove {w}" for w in parts.remove])
    if ctx.loader.kind == "grub":
        why = _grub_unsafe(ctx, parts)
        if why:
            plan.checks.append(Check("the GRUB configuration can be edited safely", False, why,
                                     f"set it by hand: {what} on the kernel command line, then update-grub "
                                     f"and reboot"))
            return
    if ctx.loader.known:
        tool = "grubby" if ctx.loader.kind == "grubby" else (ctx.loader.regenerate or ("",))[0]
        if tool and not ctx.host.commands.which(tool):
            plan.checks.append(Check(f"{tool} is installed", False,
                                     f"{ctx.loader.describe()} is changed with {tool}, which this host lacks",
                                     f"install it, or set it by hand: {what} on the kernel command line, "
                                     f"then reboot"))
        return
    seen = ", ".join(ctx.loader.found) or "none of /etc/default/grub with grub.cfg, /etc/kernel/cmdline, " \
                                          "loader entries"
    plan.checks.append(Check("boot loader detected", False,
                             f"cannot tell which boot loader this host uses (found: {seen})",
                             f"set it by hand: {what} on the kernel command line of the boot loader, then reboot"))


def _grub_unsafe(ctx: _Ctx, parts: _Parts) -> str:
    """Why GRUB's files cannot take the edit safely ("" when they can)."""
    sources = grub_sources(ctx.root)
    if sources is None:
        return f"/{bl.GRUB_DEFAULT} cannot be read"
    try:
        edit_cmdline(sources, parts.add, parts.remove)
    except ShellEditError as e:
        return str(e)
    return ""


def _boot_cmdline(ctx: _Ctx, parts: _Parts) -> Op:
    loader = ctx.loader
    if loader.kind == "grubby":
        entry_dir = loader.found[1].lstrip("/")
        paths = [f"{entry_dir}/{n}" for n in ctx.root.listdir(entry_dir) if n.endswith(".conf")]
    elif loader.kind == "systemd-boot":
        paths = list(loader.entries)
    elif loader.kind == "grub":
        paths = grub_files(ctx.root)
    else:
        paths = [loader.config or ""]
    cfg = next((f.lstrip("/") for f in loader.found if f.lstrip("/") in GRUB_CFGS), None)
    return {"kind": "boot_cmdline", "loader": loader.kind, "paths": paths, "add": parts.add,
            "remove": parts.remove, "regenerate": list(loader.regenerate), "cfg": cfg}


def _reboot_notes(ctx: _Ctx, parts: _Parts, plan: Plan) -> None:
    running = (ctx.root.read(facts.CMDLINE) or "").split()
    if parts.add and not any(s.op.get("kind") == "boot_cmdline" for s in plan.steps):
        missing = [w for w in parts.add if w not in running]
        if missing:
            plan.notes.append(f"the boot loader's configuration already has {' '.join(missing)}, the running "
                              f"kernel does not (/proc/cmdline): reboot for it to take effect")
    if plan.needs_reboot:
        which = ", ".join(str(n) for n, s in enumerate(plan.steps, 1) if s.needs_reboot)
        plan.notes.append(f"step(s) {which} take effect at the next boot: apply these, then reboot once "
                          f"(the doctor shows them as pending until then)")


# -- the fixes, one per plannable check ---------------------------------------------------------------

def _current_words(ctx: _Ctx) -> list[str]:
    """The command-line words the boot loader's configuration gives now (the first entry for grubby)."""
    text = bl.loader_cmdline(ctx.root, ctx.loader)
    if text is None and ctx.loader.kind == "grubby":
        d = ctx.loader.found[1].lstrip("/")
        first = next((n for n in ctx.root.listdir(d) if n.endswith(".conf")), None)
        text = " ".join(loader_words("grubby", ctx.root.read(f"{d}/{first}") or "")) if first else ""
    return (text or "").split()


def _fix_iommu(ctx: _Ctx, parts: _Parts) -> None:
    vendor = ctx.snap.host.cpu_vendor
    tables = ctx.root.listdir(facts.ACPI_TABLES)
    if ctx.root.isdir(facts.ACPI_TABLES) and not {"DMAR", "IVRS"} & set(tables):
        parts.checks.append(Check("the firmware describes an IOMMU", False,
                                  "no DMAR or IVRS table in /sys/firmware/acpi/tables: the firmware hides it",
                                  "by hand: turn on VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the BIOS/UEFI setup"))
        return
    if vendor not in facts.IOMMU_ON_FLAGS:
        parts.checks.append(Check("CPU vendor known", False, "/proc/cpuinfo does not say whose CPU this is",
                                  "set it by hand: add intel_iommu=on (Intel) to the kernel command line; "
                                  "AMD's IOMMU is on by default"))
        return
    flags = list(facts.IOMMU_ON_FLAGS[vendor])
    off = [w for w in IOMMU_OFF_WORDS if w in _current_words(ctx)]
    if not flags and not off:
        parts.checks.append(Check("the kernel flag turns the IOMMU on", False,
                                  f"the kernel turns the IOMMU of this {vendor} CPU on by default: it is off in "
                                  f"the firmware", "by hand: turn on IOMMU / AMD-Vi in the BIOS/UEFI setup"))
        return
    parts.cmdline("iommu", flags, off)


def _fix_iommu_pt(ctx: _Ctx, parts: _Parts) -> None:
    parts.cmdline("iommu-pt", [facts.IOMMU_PT])


def _fix_acs_override(ctx: _Ctx, parts: _Parts) -> None:
    parts.cmdline("acs-override", remove=[facts.ACS_OVERRIDE])


def _fix_vfio_modules(ctx: _Ctx, parts: _Parts) -> None:
    mods = facts.VFIO_MODULES
    parts.boot_files[facts.VFIO_MODULES_FILE] = (
        "# Written by nodeconsole (doctor --fix vfio-modules): the vfio modules load at every boot.\n"
        + "".join(f"{m}\n" for m in mods)).encode()
    if ctx.initramfs == "initramfs-tools":
        old = ctx.root.read_bytes(facts.INITRAMFS_MODULES)
        text = (old or b"").decode("utf-8", "replace")
        have = {line.split("#", 1)[0].strip() for line in text.splitlines()}
        missing = [m for m in mods if m not in have]
        if missing:
            sep = "" if not text or text.endswith("\n") else "\n"
            parts.boot_files[facts.INITRAMFS_MODULES] = (old or b"") + (
                f"{sep}# nodeconsole (doctor --fix vfio-modules): vfio in the initramfs, before any GPU driver\n"
                + "".join(f"{m}\n" for m in missing)).encode()
    elif ctx.initramfs == "dracut":
        parts.boot_files[facts.DRACUT_VFIO_FILE] = (
            "# Written by nodeconsole (doctor --fix vfio-modules): vfio in the initramfs, before any GPU driver\n"
            f'force_drivers+=" {" ".join(mods)} "\n').encode()
    else:
        parts.notes.append("no initramfs tool found (update-initramfs, dracut): the vfio modules load from "
                           "/etc/modules-load.d once the root file system is up; if a GPU driver in your "
                           "initramfs takes the GPUs earlier, add vfio there by hand")
    _boot_for(parts, "vfio-modules")
    parts.ops.append({"kind": "module", "name": "vfio-pci"})  # now, without a reboot (it pulls in vfio)
    parts.notes.append("vfio-modules: the modules load now; loading them at boot (the file and the "
                       "initramfs) takes effect at the next boot")


def _boot_for(parts: _Parts, fix: str) -> None:
    if fix not in parts.boot_for:
        parts.boot_for.append(fix)


def _fix_nouveau(ctx: _Ctx, parts: _Parts) -> None:
    parts.boot_files[facts.NOUVEAU_BLACKLIST_FILE] = (
        b"# Written by nodeconsole (doctor --fix nouveau): nouveau must not take the NVIDIA GPUs.\n"
        b"blacklist nouveau\noptions nouveau modeset=0\n")
    _boot_for(parts, "nouveau")
    if ctx.root.exists(facts.module_loaded_path("nouveau")):
        parts.notes.append("nouveau is loaded now and stays until the reboot (unloading it under a console "
                           "or a GPU in use is not safe)")


def _module_fixer(module: str) -> Callable[[_Ctx, _Parts], None]:
    def fix(ctx: _Ctx, parts: _Parts) -> None:
        parts.ops += module_ops(module)

    return fix


def _fix_nvidia_driver(ctx: _Ctx, parts: _Parts) -> None:
    snap = ctx.snap
    if not snap.sources.nvml.ok:
        parts.checks.append(Check("NVML answers", False, f"NVML {snap.sources.nvml}",
                                  "by hand: install or load the NVIDIA driver (modprobe nvidia; nvidia-smi), "
                                  "then plan again"))
        return
    gpus = [g for g in snap.gpus if g.nvml_index is not None]
    if not gpus:
        parts.checks.append(Check("NVML sees a GPU", False, "no GPU is on the nvidia driver",
                                  "by hand: bind a GPU to nvidia (nodeconsole release GPU) or load the driver"))
        return
    parts.ops.append({"kind": "nvml_persistence", "gpus": [g.address for g in gpus], "mode": 1})  # one step
    parts.ops.append({"kind": "systemd_unit", "unit": "nvidia-persistenced", "enabled": True})
    unit = "nvidia-persistenced.service"
    if not any(ctx.root.exists(f"{d}/{unit}") for d in _UNIT_DIRS) and not ctx.root.exists(UNITS[
            "nvidia-persistenced"]):
        parts.notes.append(f"{unit} was not found under /usr/lib/systemd/system or /lib/systemd/system: "
                           f"systemctl enable fails if the driver package did not install it")


def _fix_hugepages(ctx: _Ctx, parts: _Parts) -> None:
    needs = hugepage_needs(ctx.snap, ctx.root)
    parts.checks += needs.checks
    parts.notes += needs.notes
    if not needs.per_node:
        return
    size = needs.size_kib
    for node, count in sorted(needs.per_node.items()):
        if count > needs.current.get(node, 0):
            parts.ops.append({"kind": "hugepages", "node": node, "size_kib": size, "count": count, "boot": True})
    unit = "1G" if size == 1048576 else f"{size // 1024}M"
    have = _current_words(ctx)
    if boot_covers(have, unit, needs.per_node):
        parts.notes.append(f"hugepages: the boot loader's configuration already reserves enough at boot "
                           f"({' '.join(w for w in have if w.startswith(('hugepagesz=', 'hugepages=')))})")
        return
    words = ([] if needs.mixed else [f"default_hugepagesz={unit}"]) + [f"hugepagesz={unit}",
                                                                       f"hugepages={needs.boot_total}"]
    parts.cmdline("hugepages", words)
    parts.notes.append(f"hugepages: {needs.advice} ({page_text(size)} pages)")


def _fix_host_cores(ctx: _Ctx, parts: _Parts) -> None:
    cpus, checks = host_cores(ctx.snap)
    parts.checks += checks
    if not cpus:
        return
    listing = ",".join(str(c) for c in cpus)
    content = ("# Written by nodeconsole (doctor --fix host-cores): systemd and every service it starts run on\n"
               "# these CPUs (one core and its siblings per NUMA node), which no VM is pinned to.\n"
               f"[Manager]\nCPUAffinity={listing}\n")
    parts.ops.append({"kind": "config_file", "needs_reboot": True, "run": [],
                      "title": f"Keep CPUs {listing} for the host (systemd CPUAffinity)",
                      "why": "host services and interrupts of the host stay off the CPUs the VMs are pinned to",
                      "files": [dict(encode(content.encode()), path=facts.HOST_CORES_FILE)]})
    parts.notes.append("host-cores: systemd reads CPUAffinity= when it starts, so it takes effect at the next "
                       "boot; `systemctl daemon-reexec` would move systemd itself and the services started "
                       "after it, not the ones already running, so the plan counts it as pending a reboot")


def _fix_numa_balancing(ctx: _Ctx, parts: _Parts) -> None:
    old = (ctx.root.read_bytes(facts.SYSCTL_FILE) or b"").decode("utf-8", "replace")
    keep = [line for line in old.splitlines() if line.split("=", 1)[0].strip() != "kernel.numa_balancing"]
    if not keep:
        keep = ["# Written by nodeconsole (doctor --fix numa-balancing): pinned VMs keep their memory where "
                "it is placed."]
    content = "\n".join(keep + ["kernel.numa_balancing = 0"]) + "\n"
    parts.ops.append({"kind": "config_file", "needs_reboot": False, "run": [],
                      "title": f"Keep NUMA balancing off at boot (/{facts.SYSCTL_FILE})",
                      "why": "automatic NUMA balancing moves the memory of pinned VMs away from their nodes",
                      "files": [dict(encode(content.encode()), path=facts.SYSCTL_FILE)]})
    if ctx.root.exists(facts.NUMA_BALANCING):
        parts.ops.append({"kind": "kernel_value", "path": facts.NUMA_BALANCING, "value": "0",
                          "title": "Turn NUMA balancing off now",
                          "why": "the sysctl.d file counts from the next boot; this is the running kernel"})


def _fix_vm_memory(ctx: _Ctx, parts: _Parts) -> None:
    from nodeconsole.actions.vm_memory_fix import vm_memory_fix

    fix = vm_memory_fix(ctx.host, ctx.snap, _current_words(ctx), parts.add)
    parts.checks, parts.notes, parts.ops = parts.checks + fix.checks, parts.notes + fix.notes, parts.ops + fix.ops
    if fix.boot_words:  # they keep what the hugepages fix asked for, and replace its words
        parts.add = [w for w in parts.add if not w.startswith(("hugepagesz=", "hugepages="))]
        parts.cmdline("vm-memory", fix.boot_words)


FIXERS: dict[str, Callable[[_Ctx, _Parts], None]] = {
    "vhost-net": _module_fixer("vhost_net"), "tun": _module_fixer("tun"),
    "iommu": _fix_iommu, "iommu-pt": _fix_iommu_pt, "acs-override": _fix_acs_override,
    "vfio-modules": _fix_vfio_modules, "nouveau": _fix_nouveau, "nvidia-driver": _fix_nvidia_driver,
    "hugepages": _fix_hugepages, "host-cores": _fix_host_cores, "numa-balancing": _fix_numa_balancing,
    "vm-memory": _fix_vm_memory,
}
assert set(FIXERS) == set(PLANNABLE), "every check is either planned or done by hand"
