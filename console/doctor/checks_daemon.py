"""Hypervisor: libvirtd — the connection the console reads VMs through. On a Proxmox VE host (its
cluster file system's qemu-server folder, or pmxcfs installed) the equivalent: pve-cluster running and
/etc/pve mounted."""
from __future__ import annotations

from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, Verdict
from nodeconsole.console.doctor.files import clip
from nodeconsole.console.doctor.model import CheckResult, Evidence, Fix

UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
# Reasons of a libvirt source that was not asked (a captured tree without --libvirt): nothing to judge
NOT_ASKED = ("no libvirt URI", "not read for")
MAX_PIDS = 8192  # /proc entries looked at for pmxcfs


def _unit(ctx: Context, name: str) -> bool:
    return any(ctx.files.exists(f"{d}/{name}") for d in UNIT_DIRS)


def daemon_fix(ctx: Context, reason: str) -> Fix:
    """How to get libvirt answering: the monolithic libvirtd, or virtqemud's socket where the host uses
    the modular daemons (its socket enabled, or no libvirtd unit at all); installing it when neither unit
    is there; joining the libvirt group when the daemon refused us."""
    low = reason.lower()
    if "permission denied" in low or "authentication" in low or "libvirt group, or root" in low:
        return Fix("the daemon answers but refuses this user: run as root or join the libvirt group, then log "
                   "in again", ("usermod -aG libvirt USER",), False, False)
    modular = _unit(ctx, "virtqemud.socket") and (
        ctx.files.exists("etc/systemd/system/sockets.target.wants/virtqemud.socket")
        or not _unit(ctx, "libvirtd.service"))
    if modular:
        return Fix("start libvirt's QEMU daemon (the modular daemons: virtqemud) and start it at boot",
                   ("systemctl enable --now virtqemud.socket virtqemud-ro.socket",), False, False)
    if _unit(ctx, "libvirtd.service"):
        return Fix("start libvirtd and start it at boot", ("systemctl enable --now libvirtd",), False, False)
    return Fix("install libvirt's daemon (Debian/Ubuntu: libvirt-daemon-system; RHEL/Fedora: libvirt-daemon-kvm), "
               "then start it", ("systemctl enable --now libvirtd",), False, False)


def check_libvirtd(ctx: Context) -> CheckResult:
    f = ctx.files
    if f.isdir(facts.PVE_QEMU_SERVER) or f.exists(facts.PMXCFS):
        return _check_proxmox(ctx)
    v = Verdict("libvirtd")
    state = ctx.snap.sources.libvirt
    hv = ctx.hypervisor
    if state.pending:
        v.missing.append("libvirt was not read yet")
        return v.result("")
    if not state.ok:
        if state.reason.startswith(NOT_ASKED):
            v.missing.append(f"libvirt {state}")
            return v.result("")
        v.evidence.append(_source_ev("libvirt", state.reason))
        v.fails.append(f"libvirt does not answer: {state.reason}")
        v.fix = daemon_fix(ctx, state.reason)
        return v.result("")
    if hv is None:
        return v.result("libvirt answers")
    caps = ", ".join(hv.domain_types) or "none"
    v.evidence.append(_source_ev("libvirt", f"libvirt {hv.version or '?'}, {hv.driver or '?'} "
                                         f"{hv.driver_version}".rstrip() + f"; domain types ({hv.arch or '?'}): {caps}"))
    if hv.driver.upper() == "QEMU" and hv.domain_types and "kvm" not in hv.domain_types:
        v.notes.append("its QEMU driver offers no kvm domains: VMs would be emulated (see the kvm check)")
    return v.result(f"libvirt {hv.version or '(version unknown)'} answers: {hv.driver or 'driver ?'} "
                    f"{hv.driver_version}".rstrip() + f", domain types {caps}")


def _source_ev(where: str, value: str) -> Evidence:
    """Evidence whose path names a source ("libvirt"), not a file (the connection's URI is left out: a
    replay of a capture reaches the same hypervisor through another)."""
    return Evidence(where, clip(value))


def _check_proxmox(ctx: Context) -> CheckResult:
    v = Verdict("libvirtd")
    f = ctx.files
    fix = Fix("start the Proxmox cluster file system (pve-cluster: pmxcfs mounts /etc/pve)",
              ("systemctl enable --now pve-cluster",), False, False)
    mounts = f.read(facts.PROC_MOUNTS)
    if mounts is None:
        v.missing.append(f.missing(facts.PROC_MOUNTS))
    else:
        line = next((ln for ln in mounts.splitlines() if len(ln.split()) > 2 and ln.split()[1] == "/etc/pve"), None)
        v.read(facts.PROC_MOUNTS, " ".join(line.split()[:3]) if line else "no /etc/pve mount")
        if line is None:
            v.fails.append("/etc/pve is not mounted: the Proxmox cluster file system is down")
            v.fix = fix
    if not f.isdir("proc"):
        v.missing.append(f.missing("proc/1/comm"))
    else:
        pids = [p for p in f.listdir("proc") if p.isdigit()][:MAX_PIDS]
        pid = next((p for p in pids if f.read(f"proc/{p}/comm") == "pmxcfs"), None)
        v.read("proc/*/comm", f"pmxcfs pid {pid}" if pid else "no pmxcfs process")
        if pid is None:
            v.fails.append("pve-cluster is not running (no pmxcfs process)")
            v.fix = fix
    return v.result("Proxmox VE: pve-cluster runs (pmxcfs) and /etc/pve is mounted")
