"""What keeps a GPU busy on the host, so it cannot be taken from its driver: processes NVML lists, processes
holding /dev/nvidiaN open, a display, daemons holding every GPU, running VMs, SR-IOV VFs and vGPUs.
Used by the passthrough plan (actions/passthrough.py) and the MIG plan (actions/mig.py)."""
from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check
from nodeconsole.console.audit_log import UNDOABLE, AuditRecord
from nodeconsole.console.model import Gpu, HostSnapshot

STUB_DRIVERS = ("vfio-pci", "pci-stub")
INACTIVE = ("shut off", "crashed")  # VMs without a running definition
# /proc/PID/comm (15 characters at most) of daemons that hold every GPU open
HOLDER_DAEMONS = {
    "nvidia-persiste": ("nvidia-persistenced", "systemctl stop nvidia-persistenced (it keeps every GPU open)"),
    "nv-fabricmanage": ("nv-fabricmanager", "systemctl stop nvidia-fabricmanager"),
    "nv-hostengine": ("DCGM nv-hostengine", "systemctl stop nvidia-dcgm (or nv-hostengine --term)"),
}


def driver_of(snap: HostSnapshot, address: str) -> str | None:
    dev = snap.pci(address)
    return dev.driver if dev else None


def holder_checks(host: ActionHost, snap: HostSnapshot, gpu: Gpu, members: list[str],
                  config_only: Collection[str] = ()) -> list[Check]:
    """Everything that keeps the GPU busy on the host: processes, display, daemons, running VMs (but
    those in `config_only`, which hold it in their persistent config only, not in their running one)."""
    checks: list[Check] = []
    busy = []
    for a in members:
        g = snap.gpu(a)
        if g is not None and g.processes:
            busy += [f"pid {p.pid} {p.name} on {a}" for p in g.processes]
    on_host = any(driver_of(snap, a) not in (None, *STUB_DRIVERS) for a in members)
    if busy:
        checks.append(Check("no process uses the GPU", False, "; ".join(busy),
                            "stop those processes (nvidia-smi shows them), then plan again"))
    elif on_host:
        reason = "NVML lists no process" if snap.sources.nvml.ok else \
            f"NVML {snap.sources.nvml}: processes could not be listed"
        checks.append(Check("no process uses the GPU", snap.sources.nvml.ok or gpu.driver != "nvidia",
                            reason, "make NVML work (nvidia-smi) so running processes can be checked"))
    if on_host:
        users = device_users(host, [a for a in members if snap.gpu(a) is not None])
        if users:
            checks.append(Check("no process has the GPU open", False, "; ".join(users),
                                "stop those processes (fuser -v /dev/nvidia*), then plan again"))
        drm = [a for a in members if host.root.listdir(f"sys/bus/pci/devices/{a}/drm")]
        if drm and host.root.exists("sys/module/nvidia_drm"):
            checks.append(Check("no display on the GPU", False,
                                f"nvidia_drm drives a display device of {', '.join(drm)}",
                                "stop the display manager and unload nvidia_drm (modprobe -r nvidia_drm)"))
        for pid, comm in holder_daemons(host):
            name, fix = HOLDER_DAEMONS[comm]
            if gpu.driver == "nvidia":
                checks.append(Check(f"{name} is not running", False, f"{name} (pid {pid}) holds the GPU open", fix))
    running = [v.name for v in snap.vms if v.state not in INACTIVE and v.name not in config_only
               and any(h.type == "pci" and h.address in members for h in v.hostdevs)]
    if running:
        checks.append(Check("no running VM uses the GPU", False, f"VM {', '.join(running)} is running with it",
                            f"shut {'it' if len(running) == 1 else 'them'} down first ("
                            f"{'; '.join(host.command_hint('shutdown', n) for n in running)})"))
    for a in members:
        pf = snap.pci(a)
        if pf is None or not pf.vfs:
            continue
        checks.append(Check("no SR-IOV VFs are enabled", False,
                            f"{a} has {len(pf.vfs)} VFs enabled",
                            f"disable them first: echo 0 > /sys/bus/pci/devices/{a}/sriov_numvfs"))
    if gpu.vgpu.instances:
        checks.append(Check("no vGPU lives on the GPU", False,
                            f"{len(gpu.vgpu.instances)} vGPU instance(s) are created on it",
                            "remove the vGPUs (and their VMs' hostdevs) first"))
    return checks


def device_users(host: ActionHost, gpus: list[str]) -> list[str]:
    """Processes holding /dev/nvidiaN of these GPUs open (NVML misses some, e.g. in other PID
    namespaces). N is the GPU's minor number from /proc/driver/nvidia; unreadable fds are skipped."""
    nodes = {}
    for a in gpus:
        info = host.root.read(f"proc/driver/nvidia/gpus/{a}/information") or ""
        m = re.search(r"^Device Minor:\s*(\d+)", info, re.M)
        if m:
            nodes[f"/dev/nvidia{m.group(1)}"] = a
    if not nodes:
        return []
    out = []
    own = str(os.getpid())
    for pid in host.root.listdir("proc"):
        if not pid.isdigit() or pid == own:  # our own NVML handle is closed before any unbind
            continue
        try:
            fds = host.root.listdir(f"proc/{pid}/fd")
        except OSError:
            continue
        held = {nodes[t] for fd in fds if (t := host.root.readlink(f"proc/{pid}/fd/{fd}")) in nodes}
        if held:
            comm = host.root.read(f"proc/{pid}/comm") or "?"
            out += [f"pid {pid} {comm} has {a} open" for a in sorted(held)]
    return out


def holder_daemons(host: ActionHost) -> list[tuple[int, str]]:
    out = []
    for name in host.root.listdir("proc"):
        if name.isdigit():
            try:
                comm = host.root.read(f"proc/{name}/comm")
            except OSError:
                continue
            if comm in HOLDER_DAEMONS:
                out.append((int(name), comm))
    return out


# -- passthroughs in effect ----------------------------------------------------------------------------

def passthroughs_in_effect(host: ActionHost, address: str) -> list[AuditRecord]:
    """The passthrough records of the GPU at `address` still in effect, oldest first: applied (or left
    half-applied), not undone, and not followed by a release of that GPU. [] when the log is unreadable."""
    try:
        records = host.audit.records()
    except OSError:
        return []
    out: list[AuditRecord] = []
    for r in records:
        if r.undoes or r.undone_by or r.result not in UNDOABLE:
            continue
        if r.request is None or r.request.get("gpu") != address:
            continue
        if r.action == "release":
            out = []
        elif r.action == "passthrough":
            out.append(r)
    return out


def _added_to(record: AuditRecord) -> set[str]:
    """The VMs whose config the record's steps gave a device."""
    return {op["vm"] for s in record.steps if isinstance(op := s.get("op"), dict)
            and op.get("kind") == "vm_hostdev" and op.get("present") and isinstance(op.get("vm"), str)}


def config_only(host: ActionHost, snap: HostSnapshot, address: str, members: list[str],
                in_configs: Iterable[str]) -> dict[str, str]:
    """Running VMs that hold the GPU at `address` (group `members`) in their persistent config only →
    why. `in_configs`: the VMs whose persistent config names a member. On a libvirt host the snapshot
    shows a running VM's live devices, so this is every running VM of `in_configs` whose live definition
    lacks the GPU. The demo's node file is both states at once: there the audit says it (a passthrough in
    effect added the GPU to the config of a VM that was running: it gets the GPU at its next start)."""
    out: dict[str, str] = {}
    if host.vms is not None and host.vms.one_state:
        for r in passthroughs_in_effect(host, address):
            req = r.request or {}
            name = req.get("vm")
            vm = snap.vm(name) if isinstance(name, str) else None
            if vm is not None and vm.state not in INACTIVE and req.get("vm_state") not in (None, *INACTIVE) \
                    and name in _added_to(r):
                out[vm.name] = f"passthrough {r.id} added it to its config while it was {req['vm_state']}"
        return out
    for name in in_configs:
        vm = snap.vm(name)
        if vm is not None and vm.state not in INACTIVE and \
                not any(h.type == "pci" and h.address in members for h in vm.hostdevs):
            out[name] = "its config names the GPU, its running definition does not"
    return out
