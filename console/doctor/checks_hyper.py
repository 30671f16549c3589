"""Hypervisor: vhost-net, tun, cgroups, secure-guest — what `virt-host-validate qemu` checks beyond KVM
and the IOMMU, judged the way it judges them (its device, cgroup and secure-guest lines). The daemon
itself (libvirtd) is checks_daemon.py."""
from __future__ import annotations

import re

from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, Verdict, not_applicable
from nodeconsole.console.doctor.files import HostFiles
from nodeconsole.console.doctor.model import CheckResult, Fix

_FLAGS = re.compile(r"^(?:flags|Features)\s*:(.*)$", re.M)
ON_VALUES = ("1", "y", "Y", "on", "ON", "yes")
# The controllers libvirt's QEMU driver asks for (virt-host-validate's cgroup lines), in its order
QEMU_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "devices", "blkio")
V1_KNOWN = ("cpu", "cpuacct", "cpuset", "memory", "devices", "blkio", "freezer", "net_cls", "net_prio",
            "perf_event", "hugetlb", "pids", "rdma", "misc")


# -- device nodes -------------------------------------------------------------------------------------

def _device_check(ctx: Context, cid: str, dev: str, module: str, level: str, loss: str) -> CheckResult:
    """/dev/X present → pass; absent → `level` (warn or fail) with the plan that loads `module` now and
    at boot. A tree without /dev, or a captured tree's partial /dev (no /sys/module), says nothing."""
    v = Verdict(cid)
    f = ctx.files
    if not f.has_tree("dev"):
        v.missing.append(f.missing(dev))
        return v.result("")
    if not f.has_tree(facts.MODULES):
        v.missing.append(f.missing(facts.MODULES) + f" (a partial /dev: whether /{dev} exists is unknown)")
        return v.result("")
    present = f.exists(dev)
    loaded = f.loaded(module)
    v.read(dev, "present" if present else "absent")
    v.read(facts.module_loaded_path(module), "loaded" if loaded else "not loaded (or built in)")
    if not present:
        (v.fails if level == "fail" else v.warns).append(f"/{dev} is missing: {loss}")
        conf = facts.MODULE_CONF[module]
        v.fix = Fix(f"load {module} now and at boot (/{conf})",
                    (f"modprobe {module}", f"printf '{module}\\n' > /{conf}"), False, True)
    return v.result(f"/{dev} exists" + (f" ({module} loaded)" if loaded else ""))


def check_vhost_net(ctx: Context) -> CheckResult:
    return _device_check(ctx, "vhost-net", facts.DEV_VHOST_NET, "vhost_net", "warn",
                         "virtio networking runs in QEMU's userspace (load vhost_net)")


def check_tun(ctx: Context) -> CheckResult:
    return _device_check(ctx, "tun", facts.DEV_TUN, "tun", "fail",
                         "QEMU cannot make tap devices: VMs get no network (load tun)")


# -- cgroups ------------------------------------------------------------------------------------------

class Cgroups:
    """The cgroup hierarchies as libvirt finds them: v1 controllers mounted (name → mount point), the
    unified (v2) hierarchy's mount point and the controllers its root offers, and what was read."""

    def __init__(self) -> None:
        self.v1: dict[str, str] = {}
        self.v2_mount: str | None = None
        self.v2: set[str] = set()
        self.read_from = ""  # "/proc/mounts" or "/proc/self/cgroup"

    def has(self, controller: str) -> str | None:
        """How the controller is there ("v1", "v2", "v2: cpu.stat", "v2: BPF", "v2: io"), None when not:
        libvirt's own rules (v1 first; on v2 cpuacct is cpu.stat, devices a BPF program, blkio is io)."""
        if controller in self.v1:
            return "v1"
        if self.v2_mount is None:
            return None
        if controller == "cpuacct":
            return "v2: cpu.stat"  # v2 has no cpuacct: every group's cpu.stat counts its CPU time
        if controller == "devices":
            return "v2: BPF"  # cgroup v2 has no devices controller: libvirt attaches a BPF program
        if controller == "blkio":
            return "v2: io" if "io" in self.v2 else None
        return "v2" if controller in self.v2 else None


def read_cgroups(f: HostFiles) -> Cgroups | None:
    """The hierarchies from /proc/mounts (cgroup and cgroup2 mounts), else /proc/self/cgroup (the
    hierarchies this process is in; v2 then mounted at /sys/fs/cgroup); None when neither is readable."""
    cg = Cgroups()
    mounts = f.read(facts.PROC_MOUNTS)
    if mounts is not None:
        cg.read_from = "/" + facts.PROC_MOUNTS
        for line in mounts.splitlines():
            words = line.split()
            if len(words) < 4:
                continue
            point, kind, opts = words[1].replace("\\040", " "), words[2], words[3].split(",")
            if kind == "cgroup":
                for name in opts:
                    if name in V1_KNOWN:
                        cg.v1.setdefault(name, point)
            elif kind == "cgroup2" and (cg.v2_mount is None or point == "/" + facts.CGROUP_ROOT):
                cg.v2_mount = point
    else:
        placed = f.read(facts.PROC_SELF_CGROUP)
        if placed is None:
            return None
        cg.read_from = "/" + facts.PROC_SELF_CGROUP
        for line in placed.splitlines():
            num, _, rest = line.partition(":")
            names, _, _path = rest.partition(":")
            if num == "0" and not names:
                cg.v2_mount = "/" + facts.CGROUP_ROOT
            for name in names.split(","):
                if name in V1_KNOWN:
                    cg.v1.setdefault(name, f"/{facts.CGROUP_ROOT}/{name}")
    if cg.v2_mount is not None:
        text = f.read(f"{cg.v2_mount.strip('/')}/cgroup.controllers")
        cg.v2 = set((text or "").split())
    return cg


def check_cgroups(ctx: Context) -> CheckResult:
    v = Verdict("cgroups")
    f = ctx.files
    cg = read_cgroups(f)
    if cg is None:
        v.missing.append(f.missing(facts.PROC_MOUNTS) + " and /" + facts.PROC_SELF_CGROUP)
        return v.result("")
    v.read(cg.read_from.lstrip("/"), "; ".join(
        [f"v1: {' '.join(sorted(cg.v1))}"] * bool(cg.v1)
        + [f"v2 at {cg.v2_mount}"] * (cg.v2_mount is not None)) or "no cgroup hierarchy mounted")
    if cg.v2_mount is not None:
        v.read(f"{cg.v2_mount.strip('/')}/cgroup.controllers", " ".join(sorted(cg.v2)) or "empty")
    how = {c: cg.has(c) for c in QEMU_CONTROLLERS}
    lacking = [c for c, h in how.items() if h is None]
    if lacking:
        v.warns.append(f"cgroup controller{'s' if len(lacking) > 1 else ''} {', '.join(lacking)} "
                       "missing: libvirt cannot confine VMs that way")
        v.fix = Fix("enable the controllers: mount them (cgroup v1) or let systemd delegate them on the unified "
                    "hierarchy (cgroup v2: boot with systemd.unified_cgroup_hierarchy=1 on a kernel with "
                    "them built in)", (), True, False)
    return v.result("cgroup controllers for QEMU: " + ", ".join(f"{c} ({h})" for c, h in how.items()))


# -- secure guests ------------------------------------------------------------------------------------

def _flags(text: str) -> set[str]:
    m = _FLAGS.search(text)
    return set(m.group(1).split()) if m else set()


def _param(f: HostFiles, v: Verdict, rel: str) -> bool | None:
    value = f.read(rel)
    if value is None:
        return None
    v.read(rel, value)
    return value.strip() in ON_VALUES


def check_secure_guest(ctx: Context) -> CheckResult:
    """AMD SEV / SEV-ES / SEV-SNP (CPU flags; kvm_amd's sev* parameters; /dev/sev) and Intel TDX (the
    tdx_host_platform flag or /sys/firmware/tdx; kvm_intel's tdx parameter). Informational: not applicable
    where the platform offers neither; warns when it does and the kernel has it off."""
    v = Verdict("secure-guest")
    f = ctx.files
    cpuinfo = f.read(facts.CPUINFO)
    if cpuinfo is None:
        v.missing.append(f.missing(facts.CPUINFO))
        return v.result("")
    flags = _flags(cpuinfo)
    sev = sorted(flags & {"sev", "sev_es", "sev_snp"})
    tdx = sorted(w for w in flags if w.startswith("tdx_host")) + ["/sys/firmware/tdx"] * f.isdir(facts.FIRMWARE_TDX)
    if not sev and not tdx:
        return not_applicable("secure-guest", "the platform offers no secure guests (no sev, sev_es, sev_snp or "
                                              "tdx_host_platform CPU flag, no /sys/firmware/tdx)")
    cpu = sev + [t for t in tdx if not t.startswith("/")]
    v.read(facts.CPUINFO, "flags: " + (" ".join(cpu) or "no sev or tdx flag"))
    on: list[str] = []
    if sev:
        params = {p: _param(f, v, f"{facts.MODULES}/kvm_amd/parameters/{p}") for p in ("sev", "sev_es", "sev_snp")}
        on += [p.upper().replace("_", "-") for p, val in params.items() if val]
        if not params["sev"]:
            v.warns.append("the CPU offers " + "/".join(s.upper().replace("_", "-") for s in sev) + " but kvm_amd has "
                           "it off" + (" (kvm_amd is not loaded)" if params["sev"] is None else ""))
            v.fix = Fix("turn SEV on in kvm_amd: add kvm_amd.sev=1 to the kernel command line (and enable SEV and "
                        "SME in the firmware), then reboot", (), True, False)
        elif not f.exists(facts.DEV_SEV):
            v.read(facts.DEV_SEV, "absent")
            v.warns.append("kvm_amd has SEV on but /dev/sev is missing: the firmware (PSP) has it off")
            v.fix = Fix("enable SEV in the firmware (BIOS/UEFI) setup, then reboot", (), True, False)
    if tdx:
        value = _param(f, v, f"{facts.MODULES}/kvm_intel/parameters/tdx")
        if value:
            on.append("TDX")
        else:
            v.warns.append("the platform offers TDX (" + ", ".join(tdx) + ") but kvm_intel has it off")
            v.fix = v.fix or Fix("turn TDX on in kvm_intel: add kvm_intel.tdx=1 to the kernel command line, then "
                                 "reboot", (), True, False)
    return v.result("secure guests on: " + ", ".join(on))
