"""Firmware & kernel: kvm, iommu, iommu-pt, interrupt-remapping, acs-override."""
from __future__ import annotations

import re
from dataclasses import replace

from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, Verdict, cmdline_has, iommu_state
from nodeconsole.console.doctor.files import MODPROBE_DIRS, evidence, modprobe_lines
from nodeconsole.console.doctor.model import CheckResult, Fix
from nodeconsole.console.iommu import has_acs_override

_FLAGS = re.compile(r"^(?:flags|Features)\s*:(.*)$", re.M)
# The ACPI table that describes the IOMMU, by CPU vendor
ACPI_TABLE = {"intel": "DMAR", "amd": "IVRS", "arm": "IORT"}
KVM_MODULE = {"intel": "kvm_intel", "amd": "kvm_amd", "arm": "kvm"}
PT_FLAGS = (facts.IOMMU_PT, "amd_iommu=pt", "iommu.passthrough=1")


def _cpu_flags(text: str) -> set[str]:
    m = _FLAGS.search(text)
    return set(m.group(1).split()) if m else set()


def check_kvm(ctx: Context) -> CheckResult:
    v = Verdict("kvm")
    f = ctx.files
    firmware = Fix("enable Intel VT-x / AMD-V (SVM) in the firmware (BIOS/UEFI) setup, then boot again",
                   (), True, False)
    cpuinfo = f.read(facts.CPUINFO)
    vendor = ctx.vendor
    if cpuinfo is None:
        v.missing.append(f.missing(facts.CPUINFO))
    elif vendor != "arm":
        flags = _cpu_flags(cpuinfo)
        have = sorted(flags & {"vmx", "svm"})
        v.read(facts.CPUINFO, f"flags: {' '.join(have) or 'no vmx or svm'}")
        if not have:
            v.fails.append("the CPU shows neither vmx nor svm: virtualization is off in the firmware "
                           "(or not supported)")
            v.fix = firmware
        vendor = vendor or ("intel" if "vmx" in have else "amd" if "svm" in have else "")
    module = KVM_MODULE.get(vendor)
    if not f.has_tree(facts.MODULES):
        v.missing.append(f.missing(facts.MODULES))
    elif module is None:
        v.missing.append("the CPU vendor is unknown (which kvm module to look for)")
    else:
        loaded = f.loaded(module)
        v.read(facts.module_loaded_path(module), "loaded" if loaded else "absent")
        if not loaded:
            v.fails.append(f"{module} is not loaded")
            v.fix = v.fix or Fix(f"load it: modprobe {module} (if it refuses, virtualization is off in "
                                 f"the firmware)", (f"modprobe {module}",), False, False)
    if not f.has_tree("dev"):
        v.missing.append(f.missing(facts.DEV_KVM))
    elif f.has_tree(facts.MODULES):  # a captured tree's partial /dev (no /sys/module) says nothing
        present = f.exists(facts.DEV_KVM)
        v.read(facts.DEV_KVM, "present" if present else "absent")
        if not present:
            v.fails.append("/dev/kvm is missing")
            v.fix = v.fix or Fix(f"load the kvm module (modprobe {module or 'kvm_intel'}); /dev/kvm "
                                 "appears with it", (), False, False)
    return v.result("KVM is available: " + (f"{module} loaded, " if module else "") + "/dev/kvm present")


def check_iommu(ctx: Context) -> CheckResult:
    v = Verdict("iommu")
    f = ctx.files
    table = ACPI_TABLE.get(ctx.vendor)
    firmware_off = False
    if table is None:
        v.missing.append("the CPU vendor is unknown (which ACPI table describes the IOMMU)")
    elif not f.isdir(facts.ACPI_TABLES):
        v.missing.append(f.missing(facts.ACPI_TABLES))
    else:
        present = f.exists(f"{facts.ACPI_TABLES}/{table}")
        v.read(f"{facts.ACPI_TABLES}/{table}", "present" if present else "absent")
        if not present:
            firmware_off = True
            what = {"DMAR": "VT-d", "IVRS": "AMD-Vi (IOMMU)", "IORT": "the SMMU"}[table]
            v.fails.append(f"the firmware describes no IOMMU (no {table} table): enable {what} in the "
                           "firmware setup")
            v.fix = Fix(f"enable {what} in the firmware (BIOS/UEFI) setup, then boot again", (), True, False)
    on, ev, unknown = iommu_state(ctx)
    v.evidence += ev
    words = ctx.cmdline
    want = list(facts.IOMMU_ON_FLAGS.get(ctx.vendor, ()))
    off_words = [w for w in (words or []) if w in ("intel_iommu=off", "amd_iommu=off", "iommu=off")]
    if words is None:
        v.missing.append(ctx.files.missing(facts.CMDLINE))
    else:
        v.read(facts.CMDLINE, " ".join(w for w in words if "iommu" in w) or "no iommu flags")
    if on is None:
        v.missing.append(unknown)
    elif on:
        missing_flags = [w for w in want if words is not None and w not in words]
        if missing_flags:
            v.notes.append(f"on by the kernel's default ({' '.join(missing_flags)} is not on the command line)")
    elif not firmware_off:
        flags_missing = [w for w in want if w not in (words or [])]
        reason = (f"{' '.join(off_words)} on the kernel command line" if off_words
                  else f"{' '.join(flags_missing)} is not on the kernel command line" if flags_missing
                  else "no IOMMU groups although the firmware and the command line allow it")
        v.fails.append(f"the IOMMU is off: {reason}")
        if flags_missing or off_words:
            v.fix = ctx.cmdline_fix(f"turn the IOMMU on at boot ({' '.join(flags_missing + ['-' + w for w in off_words])})",
                                    flags_missing, off_words)
        else:
            v.fix = Fix("enable the IOMMU in the firmware setup (VT-d / AMD-Vi) and check the kernel log "
                        "(dmesg | grep -i -e DMAR -e IOMMU)", (), True, False)
    groups = len([n for n in f.listdir(facts.IOMMU_GROUPS) if n.isdigit()])
    return v.result(f"the IOMMU is on ({groups} IOMMU groups)")


def check_iommu_pt(ctx: Context) -> CheckResult:
    v = Verdict("iommu-pt")
    words = ctx.cmdline
    if words is None:
        v.missing.append(ctx.files.missing(facts.CMDLINE))
        return v.result("")
    found = cmdline_has(words, *PT_FLAGS)
    v.read(facts.CMDLINE, found or "no iommu=pt")
    if not found:
        flag = "iommu.passthrough=1" if ctx.vendor == "arm" else facts.IOMMU_PT
        v.warns.append(f"{flag} is not on the kernel command line: the host's own devices pay for DMA "
                       "translation")
        v.fix = ctx.cmdline_fix(f"add {flag} to the kernel command line", [flag], [])
    return v.result(f"{found} is on the kernel command line")


def check_interrupt_remapping(ctx: Context) -> CheckResult:
    v = Verdict("interrupt-remapping")
    f = ctx.files
    on, ev, unknown = iommu_state(ctx)
    if on is False:
        return Verdict("interrupt-remapping", missing=[
            "the IOMMU is off: interrupt remapping comes with it (fix the iommu check first)"]).result("")
    words = ctx.cmdline
    if words is None:
        v.missing.append(f.missing(facts.CMDLINE))
    else:
        off = [w for w in words if w in facts.IR_OFF_FLAGS]
        v.read(facts.CMDLINE, " ".join(off) or "no intremap=off / nointremap")
        if off:
            v.warns.append(f"{' '.join(off)} on the kernel command line turns interrupt remapping off")
            # the doctor's fix plans leave interrupt remapping to the admin (firmware and the IOMMU first)
            v.fix = replace(ctx.cmdline_fix(f"remove {' '.join(off)} from the kernel command line", [], off),
                            plannable=False)
    if on is None:
        v.missing.append(unknown)
    table = ACPI_TABLE.get(ctx.vendor)
    if table and table != "IORT":
        if f.isdir(facts.ACPI_TABLES):
            present = f.exists(f"{facts.ACPI_TABLES}/{table}")
            v.read(f"{facts.ACPI_TABLES}/{table}", "present" if present else "absent")
            if not present:
                v.missing.append(f"no {table} table: the firmware describes no IOMMU (see the iommu check)")
        else:
            v.missing.append(f.missing(facts.ACPI_TABLES))
    _unsafe_interrupts(ctx, v)
    return v.result("interrupt remapping is on (IOMMU active, not turned off on the command line) and "
                    "vfio does not allow unsafe interrupts")


def _unsafe_interrupts(ctx: Context, v: Verdict) -> None:
    """allow_unsafe_interrupts: the loaded module's parameter, else what modprobe.d would give it."""
    f = ctx.files
    fix = Fix("stop allowing unsafe interrupts: remove `options vfio_iommu_type1 allow_unsafe_interrupts=1` "
              "from /etc/modprobe.d and reload vfio_iommu_type1 (or reboot)", (), True, False)
    if not f.has_tree(facts.MODULES):
        v.missing.append(f.missing(facts.MODULES))
    elif f.loaded("vfio_iommu_type1"):
        value = f.read(facts.ALLOW_UNSAFE_INTERRUPTS)
        if value is None:
            v.missing.append(f.missing(facts.ALLOW_UNSAFE_INTERRUPTS))
        else:
            v.read(facts.ALLOW_UNSAFE_INTERRUPTS, value)
            if value.upper() in ("Y", "1"):
                v.fails.append("vfio_iommu_type1 allows unsafe interrupts (allow_unsafe_interrupts=Y)")
                v.fix = fix
        return
    if not f.has_tree("etc"):
        v.missing.append(f.missing(facts.MODPROBE_D))
        return
    files = f.conf_files(MODPROBE_DIRS)
    denied = f.denied_under(*MODPROBE_DIRS)
    if denied:
        v.missing.append(denied)
    for path, text in files:
        for words in modprobe_lines(text):
            if len(words) > 2 and words[0] == "options" and words[1].replace("-", "_") == "vfio_iommu_type1":
                for w in words[2:]:
                    name, _, value = w.partition("=")
                    if name == "allow_unsafe_interrupts" and value.upper() in ("1", "Y", "TRUE", "ON"):
                        v.evidence.append(evidence(path, " ".join(words)))
                        v.fails.append(f"/{path} makes vfio_iommu_type1 allow unsafe interrupts")
                        v.fix = fix


def check_acs_override(ctx: Context) -> CheckResult:
    v = Verdict("acs-override")
    words = ctx.cmdline
    if words is None:
        v.missing.append(ctx.files.missing(facts.CMDLINE))
        return v.result("")
    flags = [w for w in words if has_acs_override([w])]
    v.read(facts.CMDLINE, " ".join(flags) or "no pcie_acs_override")
    if flags:
        v.warns.append(f"{' '.join(flags)} is on the kernel command line: IOMMU groups do not reflect "
                       "what the hardware isolates")
        v.fix = ctx.cmdline_fix(f"remove {' '.join(flags)} (put GPUs in slots whose ports have ACS instead)",
                                [], flags)
    return v.result("no ACS override: IOMMU groups are the hardware's")
