"""Modules & driver: vfio-modules, nouveau, nvidia-driver."""
from __future__ import annotations

from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, Verdict, names, not_applicable, skipped
from nodeconsole.console.doctor.files import (
    MODPROBE_DIRS,
    MODULES_LOAD_DIRS,
    clip,
    dracut_drivers,
    modprobe_lines,
    module_name,
    modules_load_names,
)
from nodeconsole.console.doctor.model import CheckResult, Evidence, Fix
from nodeconsole.console.model import NA

DEBIAN_MODULES = "etc/modules"  # Debian's list, read by systemd-modules-load as well


def boot_modules(ctx: Context) -> dict[str, list[str]]:
    """Modules configured to load at boot → where ("/etc/modules-load.d/vfio.conf", "initramfs", …)."""
    f = ctx.files
    out: dict[str, list[str]] = {}

    def add(name: str, where: str) -> None:
        out.setdefault(module_name(name), []).append(where)

    for path, text in f.conf_files(MODULES_LOAD_DIRS):
        for name in modules_load_names(text):
            add(name, f"/{path}")
    for path in (DEBIAN_MODULES, facts.INITRAMFS_MODULES):
        listed = f.read(path)
        if listed is not None:
            for name in modules_load_names(listed):
                add(name, f"/{path}")
    for path, text in f.conf_files((facts.DRACUT_CONF_D,)):
        for name in dracut_drivers(text):
            add(name, f"/{path}")
    for path, text in f.conf_files(MODPROBE_DIRS):
        for words in modprobe_lines(text):
            # softdep nvidia pre: vfio-pci — vfio-pci loads before the GPU driver, at boot
            if words[0] == "softdep" and "pre:" in words:
                for w in words[words.index("pre:") + 1:]:
                    if w.endswith(":"):
                        break
                    add(w, f"/{path} (softdep)")
    for w in ctx.cmdline or []:
        for key in ("modules-load=", "rd.driver.pre="):
            if w.startswith(key):
                for name in w[len(key):].split(","):
                    add(name, "/proc/cmdline")
    return out


def check_vfio_modules(ctx: Context) -> CheckResult:
    v = Verdict("vfio-modules")
    f = ctx.files
    mods = list(facts.VFIO_MODULES)
    fix = _vfio_fix(ctx)
    loaded: list[str] | None = None
    if f.has_tree(facts.MODULES):
        loaded = [m for m in mods if f.loaded(m)]
        v.read(facts.MODULES, "loaded: " + (" ".join(loaded) or "none of " + " ".join(mods)))
    else:
        v.missing.append(f.missing(facts.MODULES))
    boot: dict[str, list[str]] | None = None
    if f.has_tree("etc"):
        boot = boot_modules(ctx)
        where = sorted({w for m in ("vfio_pci", "vfio") for w in boot.get(m, [])})
        v.evidence += [_ev(w, "vfio_pci" if w in boot.get("vfio_pci", []) else "vfio") for w in where[:4]]
        if not where:
            v.read(facts.MODULES_LOAD_D, "no vfio_pci in modules-load.d, the initramfs list or a softdep")
    else:
        v.missing.append(f.missing(facts.MODULES_LOAD_D))
    # vfio_pci pulls vfio (a dependency) and vfio_iommu_type1 (vfio's soft dependency) in with it
    at_boot = None if boot is None else "vfio_pci" in boot
    denied = f.denied_under(*MODULES_LOAD_DIRS, *MODPROBE_DIRS, facts.DRACUT_CONF_D, DEBIAN_MODULES,
                            facts.INITRAMFS_MODULES)
    if at_boot is False and denied:
        at_boot = None
        v.missing.append(denied)
    now = None if loaded is None else len(loaded) == len(mods)
    if now is False and at_boot is False:
        v.fails.append("the vfio modules are neither loaded nor configured to load at boot")
    elif now is False and at_boot is None:
        v.warns.append(f"not loaded: {' '.join(m for m in mods if m not in (loaded or []))}")
    elif now is False:
        v.warns.append(f"configured to load at boot but not loaded now: "
                       f"{' '.join(m for m in mods if m not in (loaded or []))} (modprobe, or reboot)")
    elif now and at_boot is False:
        v.warns.append("loaded now but not configured to load at boot: passthrough VMs fail after a reboot")
    if v.fails or v.warns:
        v.fix = fix
    return v.result("vfio, vfio_pci and vfio_iommu_type1 are loaded and load at boot")


def _ev(path: str, value: str) -> Evidence:
    """Evidence whose path is already a host path (or names a source: "NVML")."""
    return Evidence(path, clip(value))


def _vfio_fix(ctx: Context) -> Fix:
    f = ctx.files
    mods = " ".join(facts.VFIO_MODULES)
    cmds = [f"printf '%s\\n' {mods} > /{facts.VFIO_MODULES_FILE}", f"modprobe -a {mods}"]
    if f.isdir("etc/initramfs-tools"):
        cmds.append("update-initramfs -u")
    elif f.isdir(facts.DRACUT_CONF_D) or f.exists("usr/bin/dracut") or f.exists("usr/sbin/dracut"):
        cmds.append("dracut -f")
    return Fix(f"load {mods} now and at boot (/{facts.VFIO_MODULES_FILE}, initramfs rebuilt)",
               tuple(cmds), False, True)


def nouveau_blacklist(ctx: Context) -> list[str]:
    """Where nouveau is kept from loading: modprobe.d `blacklist nouveau` / `install nouveau /bin/false`,
    or the kernel command line's modprobe.blacklist= / rd.driver.blacklist=."""
    where = []
    for path, text in ctx.files.conf_files(MODPROBE_DIRS):
        for words in modprobe_lines(text):
            if len(words) >= 2 and words[1] == "nouveau" and (
                    words[0] == "blacklist" or (words[0] == "install" and len(words) > 2
                                                and words[2] in ("/bin/false", "/bin/true", "/usr/bin/false",
                                                                 "/usr/bin/true"))):
                where.append(f"/{path}: {' '.join(words)}")
    for w in ctx.cmdline or []:
        for key in ("modprobe.blacklist=", "rd.driver.blacklist=", "module_blacklist="):
            if w.startswith(key) and "nouveau" in w[len(key):].split(","):
                where.append(f"/proc/cmdline: {w}")
    return where


def check_nouveau(ctx: Context) -> CheckResult:
    v = Verdict("nouveau")
    f = ctx.files
    blacklist_cmds = (f"printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /{facts.NOUVEAU_BLACKLIST_FILE}",
                      "update-initramfs -u" if f.isdir("etc/initramfs-tools") else "dracut -f")
    where: list[str] | None = None
    if f.has_tree("etc"):
        where = nouveau_blacklist(ctx)
        v.evidence += [_ev(w.split(":", 1)[0], w.split(": ", 1)[1]) for w in where[:3]]
        denied = f.denied_under(*MODPROBE_DIRS)
        if not where and denied:
            where = None
            v.missing.append(denied)
        elif not where:
            v.read(facts.MODPROBE_D, "no `blacklist nouveau`")
    else:
        v.missing.append(f.missing(facts.MODPROBE_D))
    loaded = None
    if f.has_tree(facts.MODULES):
        loaded = f.loaded("nouveau")
        v.read(facts.module_loaded_path("nouveau"), "loaded" if loaded else "absent")
    else:
        v.missing.append(f.missing(facts.MODULES))
    if loaded:
        users = [ctx.label(g) for g in ctx.snap.gpus if g.driver == "nouveau"]
        drives = f" and drives {names(users)}" if users else ""
        if where:
            v.fails.append(f"nouveau is loaded{drives} (it is blacklisted: gone after a reboot)")
            v.fix = Fix("reboot: nouveau is already blacklisted", (), True, False)
        else:
            v.fails.append(f"nouveau is loaded{drives}")
            v.fix = Fix("blacklist nouveau, rebuild the initramfs and reboot", blacklist_cmds, True, True)
    elif where == []:
        v.warns.append("nouveau is not blacklisted: it may take a GPU at the next boot")
        v.fix = Fix("blacklist nouveau (a modprobe.d file) and rebuild the initramfs", blacklist_cmds, False, True)
    return v.result("nouveau is not loaded and is blacklisted")


def check_nvidia_driver(ctx: Context) -> CheckResult:
    v = Verdict("nvidia-driver")
    f = ctx.files
    snap = ctx.snap
    if not snap.gpus:
        return skipped("nvidia-driver", "no NVIDIA GPU found" + ("" if snap.sources.sysfs.ok
                                                                 else f" (sysfs {snap.sources.sysfs})"))
    kept = ctx.kept_gpus
    if not kept and ctx.role == "passthrough":
        return not_applicable("nvidia-driver", "not needed for role passthrough: the host keeps no GPU "
                                        "(every GPU is on vfio-pci or unbound)")
    version = None
    if f.has_tree(facts.MODULES):
        if f.loaded("nvidia"):
            version = f.read(facts.NVIDIA_VERSION)
            v.read(facts.NVIDIA_VERSION, version or "unreadable")
        else:
            v.read(facts.module_loaded_path("nvidia"), "absent")
            v.fails.append("the nvidia module is not loaded" + (
                f": {names([ctx.label(g) for g in kept])} have no NVIDIA driver" if kept else ""))
            v.fix = Fix("install the NVIDIA data-center driver matching this kernel and load it "
                        "(modprobe nvidia)", ("modprobe nvidia",), False, False)
    else:
        v.missing.append(f.missing(facts.MODULES))
    others = [f"{ctx.label(g)} on {g.driver}" for g in kept if g.driver != "nvidia"]
    if others:
        v.warns.append(f"not on the NVIDIA driver: {names(others)}")
    nvml = ctx.source_down("nvml")
    if nvml:
        v.missing.append(nvml)
    else:
        lib = snap.nvml_driver_version
        if lib:
            v.evidence.append(_ev("NVML", f"driver {lib}"))
        if version and lib and version != lib:
            v.fails.append(f"the kernel module is {version} but NVML's library is {lib}: reload the module "
                           "or reboot")
            v.fix = v.fix or Fix("reboot (or unload and reload the nvidia module) so the module matches the "
                                 "library", (), True, False)
        _persistence(ctx, v)
    return v.result(f"nvidia {version or snap.nvml_driver_version or ''} loaded on every GPU the host "
                    "keeps; persistence mode on".replace("  ", " "))


def _persistence(ctx: Context, v: Verdict) -> None:
    seen = [g for g in ctx.snap.gpus if g.nvml_index is not None and not g.nvml_error]
    off = [g for g in seen if g.persistence_mode == "disabled"]
    unknown = [g for g in seen if g.persistence_mode is None]
    na = [g for g in seen if g.persistence_mode == NA]
    if seen:
        v.evidence.append(_ev("NVML persistence mode", ", ".join(
            f"GPU {g.index} {g.persistence_mode if g.persistence_mode is not None else '?'}" for g in seen)))
    enable = Fix("turn persistence mode on now (nvidia-smi -pm 1) and at boot (enable nvidia-persistenced)",
                 ("nvidia-smi -pm 1", "systemctl enable --now nvidia-persistenced"), False, True)
    if off:
        v.warns.append(f"persistence mode is off on {names([ctx.label(g) for g in off])}")
        v.fix = v.fix or enable
    if unknown:
        v.missing.append(f"NVML did not say the persistence mode of {names([ctx.label(g) for g in unknown])}")
    if na and len(na) == len(seen):
        v.notes.append("the GPUs do not report a persistence mode (not supported)")
    if len(na) == len(seen):
        return
    f = ctx.files
    if not f.has_tree("etc"):
        v.missing.append(f.missing(facts.PERSISTENCED_WANTS) + " (whether persistence is set at boot)")
        return
    enabled = f.exists(facts.PERSISTENCED_WANTS)
    v.read(facts.PERSISTENCED_WANTS, "enabled" if enabled else "absent")
    if not enabled and not off:
        v.warns.append("nvidia-persistenced is not enabled at boot: persistence mode is lost at the next "
                       "reboot")
        v.fix = v.fix or enable
